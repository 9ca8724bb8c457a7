"""`simulate --serve` commits when `gitscale serve` would: a trace's webhooks (each job's
``queued`` at its arrival, ``in_progress`` at its start, ``completed`` at its end, from the
simulation's waits) and its resyncs' listings, replayed at the simulation's batch times through
serve's own batch (``batch_plan`` with a ``Hold``, over a config directory, as
tests/webhooks/test_hold.py drives it), and the commits of both counted."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from gitscale.core.model import Decision
from gitscale.core.reservations import Action, Book
from gitscale.plan.cache import StateCache
from gitscale.simulate.harness import Settings
from gitscale.simulate.strategies import run_serve
from gitscale.simulate.trace import Trace
from gitscale.webhooks.batch import batch_plan
from gitscale.webhooks.delivery import JobEvent
from gitscale.webhooks.hold import Hold
from gitscale.webhooks.resync import Listing
from tests.helpers import RUNNERSET
from tests.simulate.util import TARGET, trace_of

SETTINGS = Settings(interval=10, sync_delay=10, pod_start=45, window=10, reservation=600,
                    resync=300)
STATE = ".gitscale/reservations.yaml"
LABELS = ("self-hosted", "linux")
CONFIG = ("runnerSets:\n  - name: default\n    manifest: sets/default.yaml\n"
          f"    source: {{github: {{org: octo-org, labels: [{', '.join(LABELS)}]}}}}\n"
          "    policy: {minReplicas: 0, maxReplicas: 200, scaleDownDelay: 5m}\n")  # TARGET


def commits_of_both(trace: Trace, settings: Settings, tmp_path: Path) -> tuple[int, int]:
    """(simulate's commits, serve's commits) for ``trace`` (one set, ``TARGET``; no event of
    the trace at a batch's time: which comes first would be the clock's order)."""
    times: list[float] = []

    def batched(at: float, name: str, book: Book, decision: Decision) -> None:
        times.append(at)

    outcome = run_serve(trace, {"default": TARGET}, settings, "target", batched)
    sent: list[tuple[float, int, Action]] = []  # (when, job, action); GitHub's ids start at 1
    spans: dict[int, tuple[float, float, float]] = {}  # job → arrival, start, end
    for job, wait in zip(trace.jobs, outcome.waits, strict=True):
        start = job.arrival + wait
        spans[job.id + 1] = (job.arrival, start, start + job.duration)
        sent += [(job.arrival, job.id + 1, Action.QUEUED),
                 (start, job.id + 1, Action.IN_PROGRESS),
                 (start + job.duration, job.id + 1, Action.COMPLETED)]
    sent.sort()
    assert not {when for when, _, _ in sent} & set(times), "an event at a batch's time"
    root = tmp_path / "config"
    (root / "sets").mkdir(parents=True)
    (root / "sets/default.yaml").write_text(RUNNERSET.format(name="default", replicas=0))
    (root / "gitscale.yaml").write_text(CONFIG)
    cache, hold = StateCache.load(tmp_path / "cache"), Hold(timedelta(seconds=settings.hold))
    commits, listed = 0, None
    for at in sorted(set(times)):
        now = trace.start + timedelta(seconds=at)
        due = [s for s in sent if s[0] < at]
        sent = sent[len(due):]
        listing = None
        if settings.resync and (listed is None or at - listed >= settings.resync):
            listed = at
            listing = Listing(now, {"default": {job: start <= at for job, (arrival, start, end)
                                                in spans.items() if arrival <= at < end}})
        plan = batch_plan(root, "base", "gitscale.yaml",
                          [JobEvent(job, action, LABELS, "octo-org/app", "octo-org",
                                    trace.start + timedelta(seconds=when))
                           for when, job, action in due],
                          now, timedelta(seconds=settings.reservation), STATE, cache, listing,
                          hold=hold)
        for rel, (_, new) in plan.files.items():
            (root / rel).parent.mkdir(exist_ok=True)
            (root / rel).write_text(new)
        cache.apply(plan.cache_writes)
        hold.landed()
        commits += bool(plan.changed_paths) and at >= settings.report_from
    assert outcome.commits is not None
    return outcome.commits, commits


@pytest.mark.parametrize("jobs", [
    # queued, running, completed, the scale-down and its patch 0; the tombstone runs out a
    # reservation after the completion, with nothing else to commit
    [(5, 60)],
    # three tombstones: the first two forgotten in the scale-down's patch 0, the last alone
    [(5, 60), (12, 60), (401, 30)],
    [(5, 900)],  # a job running past --reservation: the resyncs renew it
])
@pytest.mark.parametrize("hold", [300.0, 0.0])
def test_simulate_commits_when_serve_would(jobs: list[tuple[float, float]], hold: float,
                                           tmp_path: Path) -> None:
    simulated, served = commits_of_both(trace_of(*jobs), replace(SETTINGS, hold=hold),
                                        tmp_path)
    assert simulated == served
