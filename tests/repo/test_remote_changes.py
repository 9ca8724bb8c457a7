"""What a pass says when the remote or the checkout changed under it in ways only a person can
settle: the remote branch rewritten (a rollback by reset or force push) under a checkout that
held its old commits, the branch deleted there, and a `.git/index.lock` left by a killed git.
Each: exit 1, no traceback, nothing written or pushed, a message that says what to do, and the
next run goes on once that is done."""
from __future__ import annotations

import os
import time
from pathlib import Path

from tests.helpers import RUNNERSET, git, make_repo, run, simple_config

FILES = {
    "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 20}"}),
    "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
    "demand.yaml": "linux: {queued: 3, running: 0}\n",
}


def test_a_rolled_back_remote_is_named_with_the_command_that_follows_it(
        tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout = make_repo(tmp_path, FILES)
    remote = tmp_path / "remote.git"
    first = git(remote, "rev-parse", "main")
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, err
    # a person rolls the branch back to before gitscale's commit (git push --force)
    git(remote, "update-ref", "refs/heads/main", first)
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1
    assert "Traceback" not in err
    # before: "has commits that are not on origin/main; push them first" — which would undo
    # the rollback
    assert "branch main has 1 commit that origin/main does not have (newest " in err, err
    assert "'gitscale: linux 0→3'): not pushed yet, or dropped there by a force push or a " \
        "reset" in err, err
    assert f"`git -C {checkout} reset --hard {first[:12]}`" in err, err
    assert git(remote, "rev-parse", "main") == first  # nothing pushed
    git(checkout, "reset", "-q", "--hard", first[:12])  # what it says
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, err
    assert git(remote, "log", "-1", "--format=%s", "main") == "gitscale: linux 0→3"


def test_the_branch_deleted_on_the_remote(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout = make_repo(tmp_path, FILES)
    remote = tmp_path / "remote.git"
    git(remote, "branch", "-q", "other", "main")
    git(remote, "update-ref", "-d", "refs/heads/main")
    hint = ("hint: the remote has no branch main (deleted or renamed there?): restore it, or "
            "pass --branch with the one gitscale should work on")
    for repo, extra in ((str(checkout), ()), (str(remote), ("--branch", "main"))):
        code, _, err = run(capsys, "reconcile", "--repo", repo, *extra)
        assert code == 1 and hint in err and "Traceback" not in err, err
    # a clone of the remote's default branch, which names the deleted one: not "no commits"
    code, _, err = run(capsys, "reconcile", "--repo", str(remote))
    assert code == 1
    assert f"error: {remote}: its default branch (the one its HEAD names) does not exist " \
        "there: deleted or renamed? Its branches: other; pass --branch with the one gitscale " \
        "should work on" in err, err
    code, _, err = run(capsys, "reconcile", "--repo", str(remote), "--branch", "other")
    assert code == 0, err
    assert "replicas: 3" in git(remote, "show", "other:sets/linux.yaml")


def test_a_stale_index_lock_says_how_old_it_is_and_what_to_do(
        tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout = make_repo(tmp_path, FILES)
    remote = tmp_path / "remote.git"
    before = git(remote, "rev-parse", "main")
    lock = checkout / ".git" / "index.lock"
    lock.write_text("")
    old = time.time() - 7 * 60  # a git killed 7 minutes ago
    os.utime(lock, (old, old))
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1 and "Traceback" not in err
    assert f"fatal: Unable to create '{lock}': File exists." in err, err
    assert "(7 min ago) by a git process that still works in this repository, or that was " \
        "killed before it could remove it" in err, err
    assert f"hint: if no git process runs there, remove it (rm {lock}); gitscale does not" \
        in err, err
    assert "Another git process seems" not in err  # git's paragraph, replaced by the above
    # nothing written, committed or pushed; the lock is the person's to remove
    assert git(checkout, "status", "--porcelain") == ""
    assert git(remote, "rev-parse", "main") == before == git(checkout, "rev-parse", "HEAD")
    assert lock.exists()
    lock.unlink()
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, err
    assert "replicas: 3" in git(remote, "show", "main:sets/linux.yaml")
