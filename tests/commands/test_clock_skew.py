"""A pass from a host whose clock ran years ahead, then passes at the real time: the future
last scale-up holds no scale-down, and every output says why (`gitscale.core.decide`'s
``CLOCK_SKEW_TOLERANCE``). A clock pinned with `--now` is the user's "now", not a skewed host
clock: a last scale-up after it holds the scale-down, as the delay says."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import yaml

from tests.helpers import RUNNERSET, git, make_repo, run, simple_config

FUTURE = "2099-01-01T00:00:00Z"  # a host clock far ahead (of any day these tests run on)
SKEW = "clock skew: last scale-up 2099-01-01T00:00:00+00:00"


def _repo(tmp_path: Path) -> tuple[Path, Path, Path]:
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 20, "
                                        "scaleDownDelay: 10m}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 0, running: 0}\n",
    })
    busy, idle = tmp_path / "busy.yaml", tmp_path / "idle.yaml"
    busy.write_text("linux: {queued: 6, running: 0}\n")
    idle.write_text("linux: {queued: 0, running: 0}\n")
    return checkout, busy, idle


def test_a_scale_up_stamped_in_the_future_does_not_hold_the_scale_down(
        tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout, busy, idle = _repo(tmp_path)
    remote = tmp_path / "remote.git"
    repo = ("--repo", str(checkout))
    assert run(capsys, "reconcile", *repo, "--demand", str(idle), "--now",
               "2026-11-26T09:00:00Z")[0] == 0  # first write
    assert run(capsys, "reconcile", *repo, "--demand", str(busy), "--now",
               FUTURE)[0] == 0  # the host with the clock years ahead
    spec = yaml.safe_load(git(remote, "show", "main:sets/linux.yaml"))
    assert spec["metadata"]["annotations"]["gitscale.dev/last-scale-up"] == FUTURE

    later = ("--demand", str(idle))  # this host's clock, not pinned
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
    before = datetime.now(timezone.utc).replace(microsecond=0)
    assert run(capsys, "reconcile", *repo, "--demand", str(busy))[0] == 0
    spec = yaml.safe_load(git(remote, "show", "main:sets/linux.yaml"))
    stamp = spec["metadata"]["annotations"]["gitscale.dev/last-scale-up"]
    assert before <= datetime.fromisoformat(stamp) <= datetime.now(timezone.utc)


def test_a_pinned_clock_before_the_last_scale_up_holds_the_scale_down(
        tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """`plan --now 09:00` after a 09:30 scale-up — "what if the queue were empty at 9:00?" —
    is not a host clock running behind: the delay holds (it was `linux 6 → 0`, and
    `reconcile` moved `effectiveTime` back to 09:00)."""
    checkout, busy, idle = _repo(tmp_path)
    remote = tmp_path / "remote.git"
    repo = ("--repo", str(checkout))
    assert run(capsys, "reconcile", *repo, "--demand", str(busy), "--now",
               "2026-11-26T09:30:00Z")[0] == 0
    written = git(remote, "rev-parse", "main")
    what_if = ("--demand", str(idle), "--now", "2026-11-26T09:00:00Z")
    code, out, err = run(capsys, "plan", *repo, *what_if, "--output", "json")
    assert code == 0, err
    assert json.loads(out)["changes"] == []
    code, out, err = run(capsys, "plan", *repo, *what_if)
    assert code == 0, err
    assert "unchanged: scale-down held until 2026-11-26 09:40:00 UTC (scaleDownDelay)" in out
    assert "clock skew" not in out
    code, out, err = run(capsys, "reconcile", *repo, *what_if)
    assert code == 0, err
    assert git(remote, "rev-parse", "main") == written  # nothing written, nothing moved back
    spec = yaml.safe_load(git(remote, "show", "main:sets/linux.yaml"))
    assert spec["spec"]["replicas"] == 6
    # once the delay has run out, on the same pinned clock, it scales down
    code, out, err = run(capsys, "plan", *repo, "--demand", str(idle), "--now",
                         "2026-11-26T09:41:00Z", "--output", "json")
    assert code == 2, err
    (change,) = json.loads(out)["changes"]
    assert (change["to"]["replicas"], change["reason"]) == (0, "scale-down")
