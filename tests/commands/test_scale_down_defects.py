"""Issue 7's two scale-down defects, replayed through `gitscale reconcile` on a real repo."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.helpers import RUNNERSET, git, make_repo, run, simple_config


def replay(tmp_path: Path, capsys, policy: str,  # type: ignore[no-untyped-def]
           steps: list[tuple[str, int, int]]) -> list[tuple[int, int]]:
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": policy}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 0, running: 0}\n",
    })
    remote, seen = tmp_path / "remote.git", []
    for clock, queued, running in steps:
        demand = tmp_path / "what-if.yaml"
        demand.write_text(f"linux: {{queued: {queued}, running: {running}}}\n")
        code, _, err = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand),
                           "--now", f"2026-11-23T{clock}Z")
        assert code == 0, err
        spec = yaml.safe_load(git(remote, "show", "main:sets/linux.yaml"))["spec"]
        seen.append((spec["replicas"], spec["patchID"]))
    return seen


@pytest.mark.parametrize("policy", ["{minReplicas: 0, maxReplicas: 100, buffer: 0, "
                                    "scaleDownDelay: 5m}"])
def test_defect_1_no_refill_during_delay_and_patch_0_after(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                           policy: str) -> None:
    seen = replay(tmp_path, capsys, policy, [
        ("09:00:00", 0, 0), ("09:00:30", 50, 0), ("09:02:00", 0, 50), ("09:04:00", 0, 30),
        ("09:06:00", 0, 3), ("09:06:30", 0, 3)])
    # 09:02 and 09:04 write nothing (before: re-affirms that refilled ~20 idle runners);
    # the scale-down is followed by patch 0 once nothing waits (before: only at 09:31:30).
    assert seen == [(0, 0), (50, 1), (50, 1), (50, 1), (3, 2), (3, 0)]


def test_defect_2_buffer_above_min_gets_patch_0(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    seen = replay(tmp_path, capsys, "{minReplicas: 0, maxReplicas: 100, buffer: 2, "
                  "scaleDownDelay: 5m}", [
                      ("09:00:00", 0, 0), ("09:00:30", 40, 0), ("09:06:00", 0, 0),
                      ("09:06:30", 0, 0), ("09:07:00", 0, 0), ("10:07:00", 0, 0)])
    assert seen == [(2, 0), (42, 1), (2, 2), (2, 0), (2, 0), (2, 0)]
