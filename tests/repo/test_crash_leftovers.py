"""A reconcile killed half-way (SIGKILL) must not wedge the checkout: the next run recognises
gitscale's own leftovers — files edited but not committed, a commit not yet pushed — discards
them and lands a fresh decision. What a person did is still refused.

The kill comes from a git hook in the checkout (gitscale skips pre-commit hooks, not these): it
kills the gitscale process that is running git, once, at a precise point of the write.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import RUNNERSET, git, make_repo, run, simple_config

KILL_GITSCALE = """#!/bin/sh
# Kill the gitscale process running this git command, the first time only.
[ -e '{marker}' ] && exit 0
{condition}
touch '{marker}'
read -r _ _ _ grandparent _ < /proc/$PPID/stat
kill -9 "$grandparent"
"""


def setup(tmp_path: Path, hook: str) -> Path:
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "default", "arm": "default"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=2),
        "sets/arm.yaml": RUNNERSET.format(name="arm", replicas=2),
        "demand.yaml": "linux: {queued: 5, running: 0}\narm: {queued: 1, running: 0}\n",
    })
    path = checkout / ".git" / "hooks" / hook
    # the index is also written by a refresh (`git status`): wait until our edit is staged
    condition = "git diff --cached --quiet && exit 0" if hook == "post-index-change" else ""
    path.write_text(KILL_GITSCALE.format(marker=tmp_path / "killed", condition=condition))
    path.chmod(0o755)
    return checkout


def killed_reconcile(checkout: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "gitscale", "reconcile", "--repo",
                             str(checkout)], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == -9, result  # SIGKILL, as planned


def test_files_edited_but_not_committed_are_discarded(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout = setup(tmp_path, "post-index-change")  # after `git add`, before `git commit`
    before = git(checkout, "rev-parse", "HEAD")
    killed_reconcile(checkout)
    assert git(checkout, "rev-parse", "HEAD") == before
    assert git(checkout, "status", "--porcelain", "--untracked-files=no")  # the leftovers

    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, out + err
    assert "discarded the leftovers of an interrupted gitscale run: uncommitted edits of " \
           "sets/arm.yaml, sets/linux.yaml" in out
    remote = tmp_path / "remote.git"
    assert git(remote, "rev-parse", "main") == git(checkout, "rev-parse", "HEAD") != before
    assert git(remote, "log", "-1", "--format=%s", "main") == "gitscale: linux 2→5, arm 2→1"
    assert not git(checkout, "status", "--porcelain")
    assert not (checkout / ".git" / "gitscale-pending-write.json").exists()


def test_a_commit_not_yet_pushed_is_discarded(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout = setup(tmp_path, "post-commit")  # after the commit, before the push
    remote = tmp_path / "remote.git"
    upstream = git(remote, "rev-parse", "main")
    killed_reconcile(checkout)
    stale = git(checkout, "rev-parse", "HEAD")
    assert stale != upstream and git(remote, "rev-parse", "main") == upstream
    # meanwhile another writer moved the branch: the stale commit is not on top of it
    other = make_other_writer_commit(tmp_path, remote)

    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, out + err
    assert f"discarded the leftovers of an interrupted gitscale run: unpushed commit " \
           f"{stale[:12]}" in out
    history = git(remote, "rev-list", "main").splitlines()
    assert history[1:] == [other, upstream] and stale not in history
    assert git(checkout, "rev-parse", "HEAD") == history[0]


def make_other_writer_commit(tmp_path: Path, remote: Path) -> str:
    other = tmp_path / "other"
    git(tmp_path, "clone", "--quiet", str(remote), str(other))
    (other / "README").write_text("someone else\n")
    git(other, "add", "README")
    git(other, "-c", "user.name=p", "-c", "user.email=p@x", "commit", "--quiet", "-m", "docs")
    git(other, "push", "--quiet")
    return git(other, "rev-parse", "HEAD")


def test_a_persons_edit_after_the_crash_is_still_refused(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout = setup(tmp_path, "post-index-change")
    killed_reconcile(checkout)
    manifest = checkout / "sets" / "linux.yaml"
    manifest.write_text(manifest.read_text() + "# a note\n")
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1 and "uncommitted changes (sets/linux.yaml)" in err, out + err
    assert "# a note" in manifest.read_text()  # not touched


@pytest.mark.parametrize("hook", ["post-commit"])
def test_a_persons_commit_on_top_of_a_crash_is_still_refused(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                            hook: str) -> None:
    checkout = setup(tmp_path, hook)
    killed_reconcile(checkout)
    (checkout / "README").write_text("mine\n")
    git(checkout, "add", "README")
    git(checkout, "-c", "user.name=p", "-c", "user.email=p@x", "commit", "--quiet", "-m", "mine")
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1 and "push them first" in err, out + err
    assert git(checkout, "log", "-1", "--format=%s") == "mine"


def test_a_lone_gitscale_commit_made_with_no_push_is_kept(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """--no-push commits are the user's to push: only an interrupted push is discarded."""
    checkout = setup(tmp_path, "no-hook")
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout), "--no-push")
    assert code == 0, out + err
    mine = git(checkout, "rev-parse", "HEAD")
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1 and "push them first" in err
    assert git(checkout, "rev-parse", "HEAD") == mine


def test_a_killed_runs_commit_is_discarded_by_a_no_push_run_too(tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                capsys) -> None:
    """A `--no-push` run after a killed one took the record of the killed run's write and
    left its commit: the stale decision stayed under the --no-push commit, where it passed for
    the user's own (`push them first`). The record names the commit and its base without the
    upstream: it is discarded there too."""
    checkout = setup(tmp_path, "post-commit")  # after the commit, before the push
    base = git(checkout, "rev-parse", "HEAD")
    killed_reconcile(checkout)
    stale = git(checkout, "rev-parse", "HEAD")
    assert stale != base
    demand = tmp_path / "later.yaml"
    demand.write_text("linux: {queued: 7, running: 0}\narm: {queued: 1, running: 0}\n")
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout), "--no-push",
                         "--demand", str(demand))
    assert code == 0, out + err
    assert f"discarded the leftovers of an interrupted gitscale run: unpushed commit " \
           f"{stale[:12]}" in out
    assert git(checkout, "rev-parse", "HEAD~1") == base  # its own commit, on the base
    assert git(checkout, "log", "-1", "--format=%s") == "gitscale: linux 2→7, arm 2→1"
    assert not (checkout / ".git" / "gitscale-pending-write.json").exists()


def test_a_recovery_that_fails_keeps_the_record_for_the_next_run(tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                 capsys) -> None:
    """A run killed with its git (a process group's SIGKILL) leaves gitscale's edit staged and
    git's `index.lock`. The next run's recovery fails on that lock (gitscale never removes one);
    it dropped the record of the edit all the same, so once the lock was removed, as the error
    says, gitscale's own edit was refused as a person's ("uncommitted changes") for good. The
    record is dropped only once it has served: the leftovers discarded, or a refusal."""
    checkout = setup(tmp_path, "post-index-change")  # after `git add`, before `git commit`
    killed_reconcile(checkout)
    lock = checkout / ".git" / "index.lock"
    lock.touch()  # what a git killed while writing the index leaves
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code != 0 and "index.lock" in err and f"rm {lock}" in err, out + err
    assert (checkout / ".git" / "gitscale-pending-write.json").exists()

    lock.unlink()  # as the hint says
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, out + err
    assert "discarded the leftovers of an interrupted gitscale run: uncommitted edits of " \
           "sets/arm.yaml, sets/linux.yaml" in out
    assert git(tmp_path / "remote.git", "log", "-1", "--format=%s", "main") \
        == "gitscale: linux 2→5, arm 2→1"
    assert not git(checkout, "status", "--porcelain")


def test_the_record_half_written_by_a_killed_run_is_removed(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A run killed while it wrote the record of its write (between the temporary file and its
    rename) left `.git/gitscale-pending-write.json.PID.tmp` for ever: the next run removes it
    (it holds the checkout: no other gitscale is writing one)."""
    checkout = setup(tmp_path, "no-hook")
    half = checkout / ".git" / "gitscale-pending-write.json.4242.tmp"
    half.write_text('{"base": "')
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, out + err
    assert not half.exists()
    assert not list((checkout / ".git").glob("gitscale-pending-write.json*"))
    assert git(tmp_path / "remote.git", "log", "-1", "--format=%s", "main") \
        == "gitscale: linux 2→5, arm 2→1"
