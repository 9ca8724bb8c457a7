"""`gitscale drain SET` and `--resume` on a checkout with a local bare remote."""
from __future__ import annotations

from pathlib import Path

from tests.helpers import git, run
from tests.one_set import reconcile, setup, spec


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
