"""`gitscale reconcile` on a checkout with a local bare remote: commits, pushes, refusals."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import RUNNERSET, git, make_repo, run, simple_config
from tests.one_set import land_sequence, reconcile, setup, spec


def test_a_sequence_lands_as_one_commit_per_change(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout, remote = setup(tmp_path)
    land_sequence(capsys, checkout, tmp_path)
    # the same demand again: no commit
    count = git(remote, "rev-list", "--count", "main")
    reconcile(capsys, checkout, tmp_path, 5, 0, "2026-11-21T09:09:00Z")
    assert git(remote, "rev-list", "--count", "main") == count
    assert count == "6"
    # the commit message: subject `gitscale: SET old→new`, then Gitscale-Set/-Base trailers
    message = git(remote, "log", "-1", "--format=%B", "main")
    assert message.splitlines()[0] == "gitscale: linux 1→3"
    assert "Gitscale-Set: linux replicas=3 previous=1 patch=1 queued=5 running=0" in message
    parent = git(remote, "rev-parse", "main~1")
    assert message.rstrip().endswith(f"Gitscale-Base: {parent}")


def test_no_push_commits_locally(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout, remote = setup(tmp_path)
    before = git(remote, "rev-parse", "main")
    demand = tmp_path / "d.yaml"
    demand.write_text("linux: {queued: 2, running: 0}\n")
    code, out, _ = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand),
                       "--no-push")
    assert code == 0 and "(not pushed: --no-push)" in out
    assert git(remote, "rev-parse", "main") == before
    assert git(checkout, "rev-parse", "HEAD") != before
    # a later pushing run refuses to build on unpushed commits it could lose in a race
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand))
    assert code == 1 and "push them first" in err


def test_a_branch_without_upstream_commits_and_says_how_to_push(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A CI checkout whose branch tracks nothing exits 0 with its commit unpushed: the line
    says so and how to make it push, not "no upstream, or --no-push"."""
    checkout, remote = setup(tmp_path)
    git(checkout, "branch", "--unset-upstream")
    before = git(remote, "rev-parse", "main")
    demand = tmp_path / "d.yaml"
    demand.write_text("linux: {queued: 2, running: 0}\n")
    code, out, _ = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand))
    assert code == 0 and git(remote, "rev-parse", "main") == before
    assert ("(not pushed: main tracks no remote branch; `git branch "
            "--set-upstream-to=origin/main` makes gitscale push it)") in out, out
    git(checkout, "remote", "remove", "origin")
    demand.write_text("linux: {queued: 3, running: 0}\n")
    code, out, _ = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand))
    assert code == 0 and "(not pushed: the checkout has no remote)" in out, out


def test_a_branch_never_pushed_is_told_to_push_not_to_set_an_upstream(
        tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """`gitscale init`, then `git remote add origin` before the first push: the line said
    `git branch --set-upstream-to=origin/main`, which git refuses ("the requested upstream
    branch 'origin/main' does not exist"). It says the push that does work."""
    checkout, _ = setup(tmp_path)
    git(checkout, "branch", "--unset-upstream")
    git(checkout, "update-ref", "-d", "refs/remotes/origin/main")  # as if never pushed
    demand = tmp_path / "d.yaml"
    demand.write_text("linux: {queued: 2, running: 0}\n")
    code, out, _ = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand))
    assert code == 0
    assert ("(not pushed: main tracks no remote branch, and origin/main is not known here "
            "(not pushed yet?); `git push -u origin main` pushes it and makes gitscale "
            "push)") in out, out
    git(checkout, "push", "--quiet", "-u", "origin", "main")  # what it says
    demand.write_text("linux: {queued: 3, running: 0}\n")
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand))
    assert code == 0 and "and pushed to origin/main" in out, out + err
    assert spec(tmp_path / "remote.git")["replicas"] == 3


def test_a_clone_of_an_empty_repo_not_pushed_yet_is_told_to_push(
        tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A clone of a new, empty repo tracks origin/main before main exists there; reconcile
    before the first push said git's "couldn't find remote ref" with a hint for a branch
    deleted on the remote ("pass --branch"), which a checkout cannot take. Exit 1, nothing
    pushed, and the push that fixes it."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    git(tmp_path, "clone", "--quiet", str(remote), "config")
    checkout = tmp_path / "config"
    fresh = make_repo(tmp_path / "files", {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 3}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 2, running: 0}\n"}, bare_remote=False)
    git(checkout, "fetch", "--quiet", str(fresh), "main")
    git(checkout, "reset", "--quiet", "--hard", "FETCH_HEAD")
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1 and "Traceback" not in err
    assert (f"error: {checkout}: branch main tracks origin/main, which origin does not have: "
            f"not pushed yet? `git -C {checkout} push -u origin main` pushes it (or use "
            "--no-push)") in err, err
    assert "deleted or renamed" not in err
    assert git(remote, "for-each-ref") == ""  # nothing pushed
    git(checkout, "push", "--quiet", "-u", "origin", "main")  # what it says
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0 and "and pushed to origin/main" in out, out + err
    assert spec(remote)["replicas"] == 2


def test_a_checkout_on_another_branch_works_on_it_without_branch(
        tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """What --help says of --branch: in a checkout the default is the branch checked out (not
    the remote's default one), and --branch may only repeat it."""
    checkout, remote = setup(tmp_path)
    main = git(remote, "rev-parse", "main")
    git(checkout, "checkout", "-q", "-b", "staging")
    git(checkout, "push", "--quiet", "-u", "origin", "staging")
    demand = tmp_path / "d.yaml"
    demand.write_text("linux: {queued: 2, running: 0}\n")
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand))
    assert code == 0 and "pushed to origin/staging" in out, out + err
    assert git(remote, "rev-parse", "main") == main
    assert "replicas: 3" in git(remote, "show", "staging:sets/linux.yaml")
    code, _, err = run(capsys, "plan", "--repo", str(checkout), "--branch", "main")
    assert code == 1
    assert f"error: {checkout}: is on branch staging, not main; check out main or drop " \
        "--branch" in err, err


def test_dirty_checkout_is_refused(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout, _ = setup(tmp_path)
    (checkout / "gitscale.yaml").write_text((checkout / "gitscale.yaml").read_text() + "\n")
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1 and "uncommitted changes" in err and "gitscale.yaml" in err


def test_refused_push_leaves_the_checkout_as_it_was(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A hook refuses: exit 1, our commit is taken back, and the next run works."""
    import os

    checkout, remote = setup(tmp_path)
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'frozen for the release' >&2\nexit 1\n")
    os.chmod(hook, 0o755)
    head = git(checkout, "rev-parse", "HEAD")
    demand = tmp_path / "d.yaml"
    demand.write_text("linux: {queued: 2, running: 0}\n")
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand))
    assert code == 1 and "frozen for the release" in err and "not retried" in err
    assert git(checkout, "rev-parse", "HEAD") == head
    assert git(checkout, "status", "--porcelain") == ""
    hook.unlink()
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand))
    assert code == 0, err
    assert spec(remote)["replicas"] == 3


def test_a_failed_fetch_after_a_push_race_leaves_the_checkout_as_it_was(tmp_path: Path) -> None:
    """Lost the race, then the fetch failed: the unpushed commit stayed in the checkout, and
    every later run refused it ("commits that are not on origin/main")."""
    from datetime import datetime, timezone

    import pytest

    from gitscale.config.load import load_config
    from gitscale.demand.resolve import read_demand
    from gitscale.plan.engine import compute_plan
    from gitscale.errors import GitError
    from gitscale.plan.landing import land
    from gitscale.repo.opening import open_workspace

    checkout, remote = setup(tmp_path)
    (checkout / "demand.yaml").write_text("linux: {queued: 2, running: 0}\n")
    git(checkout, "commit", "-qam", "demand")
    git(checkout, "push", "-q")
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(remote), str(other))
    head = git(checkout, "rev-parse", "HEAD")

    def another_writer_lands_first() -> None:
        (other / "README").write_text("hello\n")
        git(other, "add", "README")
        git(other, "commit", "-qm", "someone else")
        git(other, "push", "-q")

    def remote_goes_away(_: float) -> None:
        remote.rename(tmp_path / "gone.git")

    with open_workspace(str(checkout), None) as ws:
        def make_plan():  # type: ignore[no-untyped-def]
            another_writer_lands_first()
            config = load_config(ws.root)
            return compute_plan(ws.root, config, read_demand(ws.root, config, None),
                                datetime(2026, 11, 21, 9, tzinfo=timezone.utc), ws.base())

        with pytest.raises(GitError):
            land(ws, make_plan, sleep=remote_goes_away)
    assert git(checkout, "rev-parse", "HEAD") == head
    assert git(checkout, "status", "--porcelain") == ""


NO_COMMITS = ("has no commits yet: commit gitscale.yaml and the manifests first (`gitscale init` "
              "writes and commits them)")


@pytest.mark.parametrize("command", ["plan", "reconcile", "history"])
def test_a_repo_without_a_commit_is_said_so(tmp_path: Path, capsys, command: str) -> None:  # type: ignore[no-untyped-def]
    """`git init`, the files written, nothing committed: `git rev-parse HEAD failed (exit 128):
    fatal: ambiguous argument 'HEAD'…` was the error. A bare repo with no commit (cloned) too."""
    checkout, _ = setup(tmp_path / "model")
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "--quiet", "--initial-branch=main")
    for path in ("gitscale.yaml", "sets/linux.yaml", "demand.yaml"):
        (empty / path).parent.mkdir(parents=True, exist_ok=True)
        (empty / path).write_text((checkout / path).read_text())
    bare = tmp_path / "empty.git"
    git(tmp_path, "init", "--quiet", "--bare", "--initial-branch=main", str(bare))
    demand = ["--demand", str(empty / "demand.yaml")] if command != "history" else []
    for repo in (empty, bare):
        code, out, err = run(capsys, command, "--repo", str(repo), *demand)
        assert (code, out, err) == (1, "", f"error: {repo}: {NO_COMMITS}\n")
        assert git(repo, "rev-list", "--all") == ""
    assert not any(p for p in Path(os.environ["GITSCALE_CACHE_DIR"]).iterdir())
    # `validate` reads the files as they are: a repo not committed yet is checked all the same
    code, out, err = run(capsys, "validate", "--repo", str(empty))
    assert code == 0 and "no commits" not in err, (out, err)


def test_a_pass_refused_for_an_invalid_manifest_teaches_the_cache_nothing(
        tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The state cache took what the pass learnt before the edit was validated: a reconcile
    refused (exit 1, nothing committed) still wrote manifest-state.marshal."""
    from tests.helpers import RUNNERSET, make_repo, simple_config

    state = Path(os.environ["GITSCALE_CACHE_DIR"]) / "manifest-state.marshal"
    manifest = RUNNERSET.format(name="linux", replicas=1)
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "default"}),
        "sets/linux.yaml": manifest.replace("  platform: github", "  platform: jenkins"),
        "demand.yaml": "linux: {queued: 3, running: 0}\n",
    })
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1 and "refusing to commit invalid manifests" in err
    assert not state.exists()
    # the same pass on a valid manifest: it is written (the test can see a write)
    (checkout / "sets/linux.yaml").write_text(manifest)
    git(checkout, "commit", "-qam", "fix the platform")
    git(checkout, "push", "-q")
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, err
    assert state.exists()
