"""Jobs that still wait 10 minutes after a RunnerSet's last write, its count covering them, are
re-affirmed for (``core.still_waiting``), then 20, 40, 80 minutes and at most 2 hours after
each re-affirm while the same jobs wait: the controller holds the slot of a runner that
finished after the write's effectiveTime, and one whose pod exited a few seconds after GitHub
marked its job completed (or on a cluster clock ahead of the scaler's) looks so although the
write counted its job as gone — the job queued in its place waited for the next job event,
in a quiet set for ever. Real reconciles of a checkout, the clock pinned, the state cache on
disk between them (a remembered answer expires when the re-affirm is due)."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from gitscale.core.still_waiting import STILL_WAITING, still_waiting
from gitscale.core.model import Current, Demand
from tests.helpers import git, make_repo, run, simple_config

T0 = datetime(2026, 11, 27, 9, 0, tzinfo=timezone.utc)


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


MANIFEST = """\
# linux runners: the count is gitscale's, the rest ours
apiVersion: gitscale.dev/v1alpha1
kind: RunnerSet
metadata:
  name: linux
  annotations:
    team: ci   # who to ask
spec:
  replicas: 0  # written by gitscale
  platform: github
  github: {configURL: "https://github.com/example", credentialsSecret: github-app}
  template:
    spec:
      containers:
        - name: runner
          image: runner:1
"""


# MANIFEST after the re-affirm at minute 390, every byte but gitscale's fields as it was:
# the comments, the quotes, the order, a person's annotation (the new ones go first)
AFTER_390 = """\
# linux runners: the count is gitscale's, the rest ours
apiVersion: gitscale.dev/v1alpha1
kind: RunnerSet
metadata:
  name: linux
  annotations:
    gitscale.dev/still-waiting: "6"
    gitscale.dev/jobs: "{jobs}"
    gitscale.dev/last-scale-up: "2026-11-27T09:00:00Z"
    team: ci   # who to ask
spec:
  replicas: 1  # written by gitscale
  patchID: {patch}
  effectiveTime: "{time}"
  platform: github
  github: {{configURL: "https://github.com/example", credentialsSecret: github-app}}
  template:
    spec:
      containers:
        - name: runner
          image: runner:1
"""


def test_re_affirms_for_jobs_that_still_wait_back_off_10_20_40_80_minutes_then_2_hours(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Job 7 never starts (its pods cannot, or GitHub routes it elsewhere): reconcile at each
    time a re-affirm is due and the pass before it, the clock pinned, the state cache on disk
    between runs (a remembered answer expires when the next re-affirm is due). A job that
    takes its place is written for at once (a normal re-affirm, which ends the count: its
    annotation's line goes), and its wait backs off from 10 minutes again."""
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{maxReplicas: 5, scaleDownDelay: 1m}"}),
        "sets/linux.yaml": MANIFEST,
        "demand.yaml": "linux: {queued: 1, running: 0, jobs: [7]}\n",
    })
    manifest = checkout / "sets/linux.yaml"

    def reconcile(*minutes: int) -> None:
        for minute in minutes:
            code, _, err = run(capsys, "reconcile", "--repo", str(checkout), "--now",
                               at(minute))
            assert code == 0, err

    reconcile(0, 9, 10)
    # `plan` between two re-affirms says when the next comes, as text and as a value
    code, out, err = run(capsys, "plan", "--repo", str(checkout), "--now", at(29))
    assert (code, err) == (0, ""), err
    assert out.splitlines()[0].split(None, 3) == [
        "linux", "1", "unchanged:", "jobs wait with runners counted for them: re-affirm at "
        "2026-11-27 09:30:00 UTC if they still wait"], out
    code, out, _ = run(capsys, "plan", "--repo", str(checkout), "--now", at(29), "--output",
                       "json")
    assert json.loads(out)["unchanged"][0]["why"]["reaffirm_at"] == at(30)
    reconcile(29, 30, 69, 70, 149, 150, 269, 270, 389, 390)
    seven = Demand(1, 0, frozenset({"7"})).fingerprint
    assert manifest.read_text() == AFTER_390.format(jobs=seven, patch=6, time=at(390))
    # job 7 was cancelled and job 8 queued in its place: a normal re-affirm, then 10, 20...
    (checkout / "demand.yaml").write_text("linux: {queued: 1, running: 0, jobs: [8]}\n")
    git(checkout, "commit", "--quiet", "-am", "job 8")
    git(checkout, "push", "--quiet")
    reconcile(391)
    eight = Demand(1, 0, frozenset({"8"})).fingerprint
    assert manifest.read_text() == AFTER_390.format(jobs=eight, patch=7, time=at(391)).replace(
        '    gitscale.dev/still-waiting: "6"\n', "")
    reconcile(400, 401, 420, 421)

    rows = []
    for line in git(checkout, "log", "--reverse", "--format=%cI %h %s",
                    "--grep=^gitscale:").splitlines():
        when, commit, subject = line.split(" ", 2)
        text = git(checkout, "show", f"{commit}:sets/linux.yaml")
        annotations = yaml.safe_load(text)["metadata"]["annotations"]
        minute = (datetime.fromisoformat(when) - T0) / timedelta(minutes=1)
        body = git(checkout, "log", "-1", "--format=%b", commit).splitlines()[0]
        said = body.split("refill; ")[1] if "still wait" in body else body.split("; ")[-1]
        rows.append((minute, subject, annotations.get("gitscale.dev/still-waiting"), said))
    assert rows == [
        (0, "gitscale: linux 0→1", None, "first write forces the state (patch 0)"),
        (10, "gitscale: linux 1 (patch 1)", "1",
         "next re-affirm in 20m if they still wait (1 in a row for these jobs)"),
        (30, "gitscale: linux 1 (patch 2)", "2",
         "next re-affirm in 40m if they still wait (2 in a row for these jobs)"),
        (70, "gitscale: linux 1 (patch 3)", "3",
         "next re-affirm in 1h20m if they still wait (3 in a row for these jobs)"),
        (150, "gitscale: linux 1 (patch 4)", "4",
         "next re-affirm in 2h if they still wait (4 in a row for these jobs)"),
        (270, "gitscale: linux 1 (patch 5)", "5",
         "next re-affirm in 2h if they still wait (5 in a row for these jobs)"),
        (390, "gitscale: linux 1 (patch 6)", "6",
         "next re-affirm in 2h if they still wait (6 in a row for these jobs)"),
        (391, "gitscale: linux 1 (patch 7)", None,
         "jobs wait and others started or completed: re-affirm so finished slots refill"),
        (401, "gitscale: linux 1 (patch 8)", "1",
         "next re-affirm in 20m if they still wait (1 in a row for these jobs)"),
        (421, "gitscale: linux 1 (patch 9)", "2",
         "next re-affirm in 40m if they still wait (2 in a row for these jobs)"),
    ], rows


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
