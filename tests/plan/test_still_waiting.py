"""Jobs that still wait 10 minutes after a RunnerSet's last write, its count covering them, are
re-affirmed for (``core.decide.still_waiting``): the controller holds the slot of a runner that
finished after the write's effectiveTime, and one whose pod exited a few seconds after GitHub
marked its job completed (or on a cluster clock ahead of the scaler's) looks so although the
write counted its job as gone — the job queued in its place waited for the next job event,
in a quiet set for ever. Real reconciles of a checkout, the clock pinned, the state cache on
disk between them (a remembered answer expires when the re-affirm is due)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from gitscale.core.decide import STILL_WAITING
from gitscale.core.model import Current, Demand
from gitscale.core.decide import still_waiting
from tests.helpers import RUNNERSET, git, make_repo, run, simple_config

T0 = datetime(2026, 11, 27, 9, 0, tzinfo=timezone.utc)


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_jobs_still_waiting_after_ten_minutes_are_re_affirmed_for_once_per_ten_minutes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{maxReplicas: 5, scaleDownDelay: 1m}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 1, running: 0}\n",
    })
    subjects = []
    for minute in (0, 1, 9, 10, 11, 19.5, 20):
        code, out, err = run(capsys, "reconcile", "--repo", str(checkout), "--now", at(minute))
        assert code == 0, err
        subjects.append(git(checkout, "log", "-1", "--format=%s"))
    spec = yaml.safe_load((checkout / "sets/linux.yaml").read_text())["spec"]
    assert (spec["replicas"], spec["patchID"], spec["effectiveTime"]) == (1, 2, at(20))
    body = git(checkout, "log", "-1", "--format=%b")
    assert ("jobs still wait 10m after the last write, with runners counted for them: "
            "re-affirm so that slots held by runners that finished as it was written refill"
            ) in body, body
    # one commit at 0 (the first write), then one each 10 minutes the job still waits
    # the first write at 0; a re-affirm at 10 and at 20 (the job still waits), none between
    assert subjects == ["gitscale: linux 0→1"] * 3 + ["gitscale: linux 1 (patch 1)"] * 3 + [
        "gitscale: linux 1 (patch 2)"], subjects


@pytest.mark.parametrize(("backlog", "queued", "running", "have", "minutes", "expected"), [
    pytest.param(0, 1, 0, 1, 10, True, id="waiting-10m-covered"),
    pytest.param(0, 1, 0, 1, 9.9, False, id="not-yet"),
    pytest.param(0, 0, 1, 1, 60, False, id="nothing-queued"),
    pytest.param(0, 3, 0, 2, 60, False, id="saturated:-the-backlog-serves"),
    pytest.param(None, 1, 0, 1, 60, False, id="no-backlog-field:-not-a-RunnerSet"),
])
def test_still_waiting(backlog: int | None, queued: int, running: int, have: int,
                       minutes: float, expected: bool) -> None:
    current = Current(have, 3, None, "f", backlog=backlog,
                      written_at=T0 if backlog is not None else None)
    now = T0 + timedelta(minutes=minutes)
    assert still_waiting(current, Demand(queued, running), have, now) is expected
    assert STILL_WAITING == timedelta(minutes=10)
