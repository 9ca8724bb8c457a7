"""A config repo with one set, ``linux`` ({minReplicas: 1, maxReplicas: 3, buffer: 1,
scaleDownDelay: 0s}), a local bare remote, and `gitscale reconcile` run on it in-process with a
pinned clock."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.helpers import RUNNERSET, git, make_repo, run, simple_config

# (queued, running) → (replicas, patch ID) written, one pass a minute from 09:00
SEQUENCE = [((0, 0), 1, 0), ((2, 0), 3, 1), ((0, 0), 1, 2), ((0, 0), 1, 0), ((5, 0), 3, 1)]


def setup(tmp_path: Path) -> tuple[Path, Path]:
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 1, maxReplicas: 3, buffer: 1, "
                                                 "scaleDownDelay: 0s}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=1),
        "demand.yaml": "linux: {queued: 0, running: 0}\n",
    })
    return checkout, tmp_path / "remote.git"


def reconcile(capsys: Any, checkout: Path, tmp_path: Path, queued: int, running: int,
              now: str) -> int:
    demand = tmp_path / f"demand-{queued}-{running}.yaml"
    demand.write_text(f"linux: {{queued: {queued}, running: {running}}}\n")
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand),
                         "--now", now)
    assert code == 0, err
    return code


def spec(remote: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(git(remote, "show", "main:sets/linux.yaml"))["spec"]
    return data


def land_sequence(capsys: Any, checkout: Path, tmp_path: Path) -> None:
    """``SEQUENCE``, checking each write as it lands."""
    for i, ((queued, running), replicas, patch) in enumerate(SEQUENCE):
        reconcile(capsys, checkout, tmp_path, queued, running, f"2026-11-21T09:0{i}:00Z")
        remote = tmp_path / "remote.git"
        assert (spec(remote)["replicas"], spec(remote)["patchID"]) == (replicas, patch)
        assert spec(remote)["effectiveTime"] == f"2026-11-21T09:0{i}:00Z"
