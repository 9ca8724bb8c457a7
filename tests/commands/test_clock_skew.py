"""A pass from a host whose clock ran years ahead, then passes at the real time: the future
last scale-up holds no scale-down, and every output says why (`gitscale.core.decide`'s
``CLOCK_SKEW_TOLERANCE``)."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.helpers import RUNNERSET, git, make_repo, run, simple_config

SKEW = "clock skew: last scale-up 2030-01-01T00:00:00+00:00"


def test_a_scale_up_stamped_in_the_future_does_not_hold_the_scale_down(
        tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 20, "
                                        "scaleDownDelay: 10m}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 0, running: 0}\n",
    })
    remote = tmp_path / "remote.git"
    busy, idle = tmp_path / "busy.yaml", tmp_path / "idle.yaml"
    busy.write_text("linux: {queued: 6, running: 0}\n")
    idle.write_text("linux: {queued: 0, running: 0}\n")
    repo = ("--repo", str(checkout))
    assert run(capsys, "reconcile", *repo, "--demand", str(idle), "--now",
               "2026-11-26T09:00:00Z")[0] == 0  # first write
    assert run(capsys, "reconcile", *repo, "--demand", str(busy), "--now",
               "2030-01-01T00:00:00Z")[0] == 0  # the host with the clock years ahead
    spec = yaml.safe_load(git(remote, "show", "main:sets/linux.yaml"))
    assert spec["metadata"]["annotations"]["gitscale.dev/last-scale-up"] == "2030-01-01T00:00:00Z"

    later = ("--demand", str(idle), "--now", "2026-11-26T10:00:00Z")
    code, out, err = run(capsys, "plan", *repo, *later, "--output", "json")
    assert code == 2, err
    (change,) = json.loads(out)["changes"]
    assert (change["to"]["replicas"], change["reason"]) == (0, "scale-down")
    assert SKEW in change["detail"] and "held until" not in change["detail"]
    code, out, err = run(capsys, "plan", *repo, *later)
    assert code == 2 and SKEW in out, err
    code, out, err = run(capsys, "reconcile", *repo, *later)
    assert code == 0, err
    body = git(remote, "log", "-1", "--format=%B", "main")
    assert body.startswith("gitscale: linux 6→0") and SKEW in body
    # the next scale-up writes this clock's time: the skew is gone
    assert run(capsys, "reconcile", *repo, "--demand", str(busy), "--now",
               "2026-11-26T10:01:00Z")[0] == 0
    spec = yaml.safe_load(git(remote, "show", "main:sets/linux.yaml"))
    assert spec["metadata"]["annotations"]["gitscale.dev/last-scale-up"] == "2026-11-26T10:01:00Z"
