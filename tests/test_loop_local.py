"""reconcile, history and drain on a checkout with a local bare remote."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.helpers import RUNNERSET, git, make_repo, run, simple_config


def setup(tmp_path: Path) -> tuple[Path, Path]:
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 1, maxReplicas: 3, buffer: 1}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=1),
        "demand.yaml": "linux: {queued: 0, running: 0}\n",
    })
    return checkout, tmp_path / "remote.git"


def reconcile(capsys, checkout: Path, tmp_path: Path, queued: int, running: int,  # type: ignore[no-untyped-def]
              now: str) -> int:
    demand = tmp_path / f"demand-{queued}-{running}.yaml"
    demand.write_text(f"linux: {{queued: {queued}, running: {running}}}\n")
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand),
                         "--now", now)
    assert code == 0, err
    return code


def spec(remote: Path) -> dict:  # type: ignore[type-arg]
    return yaml.safe_load(git(remote, "show", "main:sets/linux.yaml"))["spec"]


def test_sequence_lands_as_commits_and_history(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout, remote = setup(tmp_path)
    steps = [((0, 0), 1, 0), ((2, 0), 3, 1), ((0, 0), 1, 2), ((0, 0), 1, 0), ((5, 0), 3, 1)]
    for i, ((queued, running), replicas, patch) in enumerate(steps):
        reconcile(capsys, checkout, tmp_path, queued, running, f"2026-11-21T09:0{i}:00Z")
        assert (spec(remote)["replicas"], spec(remote)["patchID"]) == (replicas, patch)
        assert spec(remote)["effectiveTime"] == f"2026-11-21T09:0{i}:00Z"
    # the same demand again: no commit
    count = git(remote, "rev-list", "--count", "main")
    reconcile(capsys, checkout, tmp_path, 5, 0, "2026-11-21T09:09:00Z")
    assert git(remote, "rev-list", "--count", "main") == count
    assert count == "6"

    code, out, _ = run(capsys, "history", "--repo", str(checkout), "--output", "json")
    entries = json.loads(out)
    assert [(e["previous"], e["replicas"], e["patch"]) for e in reversed(entries)] == [
        (1, 1, 0), (1, 3, 1), (3, 1, 2), (1, 1, 0), (1, 3, 1)]
    assert entries[0]["queued"] == 5 and entries[0]["running"] == 0
    assert entries[0]["reason"] == "scale-up" and entries[0]["time"] == "2026-11-21T09:04:00Z"
    assert entries[1]["reason"] == "quiet-reset"

    code, out, _ = run(capsys, "history", "--repo", str(checkout), "--since",
                       "2026-11-21T09:03:00Z", "--chart", str(tmp_path / "c.svg"))
    assert code == 0
    assert out.count("linux") == 2 and "TIME" in out
    assert (tmp_path / "c.svg").read_text().count('<g id="axes_') == 1

    # the commit message: subject `gitscale: SET old→new`, then Gitscale-Set/-Base trailers
    message = git(remote, "log", "-1", "--format=%B", "main")
    assert message.splitlines()[0] == "gitscale: linux 1→3"
    assert "Gitscale-Set: linux replicas=3 previous=1 patch=1 queued=5 running=0" in message
    parent = git(remote, "rev-parse", "main~1")
    assert message.rstrip().endswith(f"Gitscale-Base: {parent}")


def test_drain_and_resume(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout, remote = setup(tmp_path)
    reconcile(capsys, checkout, tmp_path, 2, 0, "2026-11-21T09:00:00Z")
    code, out, err = run(capsys, "drain", "--repo", str(checkout), "linux")
    assert code == 0, err
    assert (spec(remote)["replicas"], spec(remote)["patchID"]) == (0, 0)
    assert "gitscale: linux 3→0" in git(remote, "log", "-1", "--format=%s", "main")
    # a drained set stays at 0 whatever the demand
    reconcile(capsys, checkout, tmp_path, 9, 0, "2026-11-21T09:05:00Z")
    assert spec(remote)["replicas"] == 0
    assert run(capsys, "drain", "--repo", str(checkout), "linux", "--resume")[0] == 0
    reconcile(capsys, checkout, tmp_path, 1, 0, "2026-11-21T09:06:00Z")
    assert spec(remote)["replicas"] == 2


def test_no_push_commits_locally(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout, remote = setup(tmp_path)
    before = git(remote, "rev-parse", "main")
    demand = tmp_path / "d.yaml"
    demand.write_text("linux: {queued: 2, running: 0}\n")
    code, out, _ = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand),
                       "--no-push")
    assert code == 0 and "not pushed" in out
    assert git(remote, "rev-parse", "main") == before
    assert git(checkout, "rev-parse", "HEAD") != before
    # a later pushing run refuses to build on unpushed commits it could lose in a race
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand))
    assert code == 1 and "push them first" in err


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

    from gitscale.config import load_config
    from gitscale.demand.resolve import read_demand
    from gitscale.engine import compute_plan
    from gitscale.errors import GitError
    from gitscale.landing import land
    from gitscale.workspace import open_workspace

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
