"""`simulate --serve`: webhook mode on traces small enough to follow by hand.

Jobs send ``queued`` as they arrive, ``in_progress`` as a runner takes them and ``completed``
as they end; every window a batch applies them to the set's reservations
(``gitscale.core.reservations``) and decides from their demand; the commit reaches the
cluster after the sync and its runner after the pod start.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import timedelta

import pytest

from gitscale.commands.serve import EXPIRY_CHECK as SERVE_EXPIRY_CHECK
from gitscale.core.model import Decision
from gitscale.core.policy import Policy
from gitscale.core.reservations import Book
from gitscale.simulate.harness import Settings
from gitscale.simulate.strategies import EXPIRY_CHECK, run_all, run_serve
from gitscale.simulate.trace import Trace
from tests.helpers import run
from tests.simulate.util import TARGET, trace_of

SETTINGS = Settings(interval=10, sync_delay=10, pod_start=45, window=10, reservation=600,
                    resync=300)


@dataclass(frozen=True)
class Seen:
    at: float
    jobs: frozenset[int]  # the jobs with a reservation after the batch
    running: frozenset[int]
    replicas: int | None  # what the decision wrote (None: no write)


def batches(trace: Trace, policy: Policy = TARGET, settings: Settings = SETTINGS
            ) -> tuple[list[float], list[Seen]]:
    """The waits, and each batch's reservations and write."""
    seen: list[Seen] = []

    def batched(at: float, name: str, book: Book, decision: Decision) -> None:
        seen.append(Seen(at, frozenset(r.job for r in book.reservations),
                         frozenset(r.job for r in book.reservations if r.running),
                         decision.replicas if decision.write else None))

    outcome = run_serve(trace, {"default": policy}, settings, "target", batched)
    return outcome.waits, seen


def at(seen: list[Seen], when: float) -> Seen:
    """The reservations as of ``when``: its batch's, or the last one's before it (a batch
    runs each window with events, and every EXPIRY_CHECK without)."""
    return [s for s in seen if s.at <= when][-1]


@pytest.mark.parametrize("arrival, window, sync, pod_start, wait", [
    (5, 10, 10, 45, 5 + 10 + 45),  # reserved at the batch at 10
    (10, 10, 10, 45, 0 + 10 + 45),  # arrives just before the batch at 10 runs
    (0.5, 10, 10, 45, 9.5 + 10 + 45),
    (5, 30, 10, 45, 25 + 10 + 45),  # a longer window: the batch at 30
    (31, 30, 0, 20, 29 + 0 + 20),  # the batch at 60, no sync
    (5, 10, 120, 45, 5 + 120 + 45),  # a slow GitOps sync
])
def test_a_queued_job_reserves_within_a_window_plus_sync_plus_pod_start(
        arrival: float, window: float, sync: float, pod_start: float, wait: float) -> None:
    settings = replace(SETTINGS, window=window, sync_delay=sync, pod_start=pod_start)
    waits, seen = batches(trace_of((arrival, 60)), settings=settings)
    assert waits == [wait]
    assert wait <= window + sync + pod_start
    reserved = next(s for s in seen if 0 in s.jobs)
    assert reserved.at - arrival < window and reserved.replicas == 1


# (time of a batch, jobs with a reservation, of them running): two jobs of 60 s at 5 and
# 12; runners ready at 65 and 75, they complete at 125 and 135
FREED = [(0, set(), set()), (10, {0}, set()), (20, {0, 1}, set()), (60, {0, 1}, set()),
         (70, {0, 1}, {0}), (80, {0, 1}, {0, 1}), (120, {0, 1}, {0, 1}),
         (130, {1}, {1}), (140, set(), set()), (600, set(), set())]


@pytest.mark.parametrize("when, jobs, running", FREED)
def test_completed_frees_its_reservation(when: float, jobs: set[int],
                                         running: set[int]) -> None:
    _, seen = batches(trace_of((5, 60), (12, 60)))
    batch = at(seen, when)
    assert (batch.jobs, batch.running) == (jobs, running)


def test_completed_frees_only_its_job_never_below_zero() -> None:
    """Job 0's queued reservation expires (its runner takes 200 s to start, a reservation
    lasts 60 s); when it runs (210) in_progress books it again, and its completion (240)
    removes its own reservation, not job 1's, queued at 225."""
    settings = replace(SETTINGS, pod_start=200, reservation=60, resync=0)
    _, seen = batches(trace_of((0, 30), (225, 60)), settings=settings)
    assert at(seen, 0).jobs == {0}
    assert at(seen, 60).jobs == set()  # expired at the batch 60 s on (no events till then)
    assert (at(seen, 210).jobs, at(seen, 210).running) == ({0}, {0})
    assert (at(seen, 230).jobs, at(seen, 230).running) == ({0, 1}, {0})
    assert (at(seen, 240).jobs, at(seen, 240).running) == ({1}, set())
    assert all(s.replicas is None or s.replicas >= 0 for s in seen)


# Three jobs at 5 s, job 0 the oldest; a reservation lasts 60 s, runners start in 200 s (all
# three still wait at 200). At each batch the queued reservations past max are starved and
# kept (their expiry pushed back to the batch + 60 s); the others expire. The batch at 70:
# those at 10 expire unless starved; at 130 the oldest starved one is within max now, and
# expires in turn (it waited past its reservation for a runner: the next resync books it).
@pytest.mark.parametrize("max_replicas, when, kept", [
    (1, 70, {1, 2}),  # jobs 1 and 2 past max 1: starved, kept
    (2, 70, {2}),
    (3, 70, set()),  # nobody starved: every queued reservation expired
    (1, 130, {2}),
    (2, 130, set()),
    (1, 190, set()),
])
def test_past_max_starved_jobs_keep_their_reservation(max_replicas: int, when: float,
                                                      kept: set[int]) -> None:
    policy = replace(TARGET, max_replicas=max_replicas)
    settings = replace(SETTINGS, pod_start=200, reservation=60, resync=0)
    _, seen = batches(trace_of((5, 1000), (5, 100), (5, 100)), policy, settings)
    assert at(seen, 10).jobs == {0, 1, 2}
    assert at(seen, when).at == when and at(seen, when).jobs == kept
    assert max(s.replicas or 0 for s in seen) <= max_replicas


@pytest.mark.parametrize("resync, booked", [
    (300, [0, 300, 600, 900]),  # each resync lists the waiting job: booked again
    (600, [0, 600]),
    (0, [0]),  # no resync: never again
])
def test_a_resync_books_a_waiting_job_again(resync: float, booked: list[float]) -> None:
    """A reservation (60 s) shorter than the pod start (200 s), no scale-down delay: the job's
    reservation expires, its pending runner is scaled away, and only a resync books it again
    — for 60 s, so it never gets a runner (serve's --reservation must outlast a pod start)."""
    settings = replace(SETTINGS, pod_start=200, reservation=60, resync=resync)
    policy = replace(TARGET, scale_down_delay=timedelta(0))
    waits, seen = batches(trace_of((0, 50)), policy, settings)
    assert [s.at for s in seen if 0 in s.jobs and s.at < 1000] == booked
    assert at(seen, 60).jobs == set() and at(seen, 60).replicas == 0
    assert waits[0] > 3600


def test_expiry_check_is_serves() -> None:
    assert EXPIRY_CHECK == SERVE_EXPIRY_CHECK


def test_serve_holds_a_change_to_the_reservations_alone() -> None:
    """Job 0 queued (the batch at 10 scales 0→1), running (70), completed (130); the scale-down
    (360, after the 5-minute delay), patch 0 (420); its tombstone forgotten a reservation after
    its completion. ``hold=0``: each reservation change is a commit of its own (6 with the
    first pass's patch 0). The default hold: the changes at 70 and 130 land with the scale-down
    at 360 (4, as polling). The tombstone's forgetting is no commit either way: `serve` leaves
    it for the next commit made for anything else (it was counted as one, 5 and 7, until
    simulate shared serve's rule, ``without_unseen``; test_serve_commits replays serve's own
    batches). Same waits."""
    unheld = run_serve(trace_of((5, 60)), {"default": TARGET}, replace(SETTINGS, hold=0),
                       "target")
    gitscale = run_all(trace_of((5, 60)), [("target", {"default": TARGET})], SETTINGS,
                       baselines=False, serve=True)
    assert [o.name for o in gitscale] == ["gitscale", "gitscale serve", "oracle"]
    assert gitscale[1].waits == unheld.waits == [60.0]
    assert (gitscale[0].commits, gitscale[1].commits, unheld.commits) == (4, 4, 6)
    assert unheld.patch_only_commits == gitscale[1].patch_only_commits == 2


def test_serve_under_saturation_commits_the_reservations_every_hold() -> None:
    """Ten jobs of 20 minutes at a max of 2, one a minute: the backlog covers them, so serve's
    batches change the reservations only (starts, completions, expiries pushed on); with the
    hold they land every 5 minutes or with a write, not every window."""
    trace = trace_of(*((60.0 * i, 1200) for i in range(10)))
    policy = replace(TARGET, max_replicas=2)
    unheld = run_serve(trace, {"default": policy}, replace(SETTINGS, hold=0), "target")
    held = run_serve(trace, {"default": policy}, SETTINGS, "target")
    assert held.waits == unheld.waits and held.runner_seconds == unheld.runner_seconds
    assert held.commits is not None and unheld.commits is not None
    assert held.commits * 2 < unheld.commits, (held.commits, unheld.commits)


def test_cli_serve_rows_and_bad_window(capsys, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "simulate", "--synthetic", "burst", "--hours", "2",
                         "--policy", "{maxReplicas: 200, scaleDownDelay: 5m}", "--serve",
                         "--window", "30s", "--output", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["settings"]["window"] == 30 and doc["settings"]["reservation"] == 600
    assert doc["settings"]["resync"] == 300
    names = [r["name"] for r in doc["results"]]
    assert names[:2] == ["gitscale", "gitscale serve"] and "arc-listener" in names
    serve = doc["results"][1]
    assert serve["wait_max"] <= 30 + 10 + 45 and serve["commits"] > 0
    code, out, err = run(capsys, "simulate", "--synthetic", "burst", "--serve",
                         "--window", "0s")
    assert code == 1 and "--window" in err and "Traceback" not in err and out == ""
    code, _, err = run(capsys, "simulate", "--synthetic", "burst", "--serve",
                       "--reservation", "30s")
    assert code == 1 and "--reservation" in err
    code, _, err = run(capsys, "simulate", "--synthetic", "burst", "--serve", "--resync", "5s")
    assert code == 1 and "--resync" in err
    code, out, _ = run(capsys, "simulate", "--synthetic", "steady", "--hours", "1", "--serve",
                       "--resync", "0", "--hold", "0", "--no-baselines", "--output", "json")
    assert code == 0 and json.loads(out)["settings"]["resync"] == 0
    assert json.loads(out)["settings"]["hold"] == 0
    code, out, _ = run(capsys, "simulate", "--synthetic", "steady", "--hours", "1", "--serve",
                       "--resync", "0", "--no-baselines", "--output", "json")
    assert code == 0 and json.loads(out)["settings"]["hold"] == 0, "serve's default: no resync"
    code, out, _ = run(capsys, "simulate", "--synthetic", "steady", "--hours", "1", "--serve",
                       "--no-baselines", "--output", "json")
    assert code == 0 and json.loads(out)["settings"]["hold"] == 300
    code, _, err = run(capsys, "simulate", "--synthetic", "burst", "--serve", "--hold", "soon")
    assert code == 1 and "--hold" in err and "Traceback" not in err


def test_no_serve_rows_without_the_flag(capsys, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "simulate", "--synthetic", "steady", "--hours", "1",
                       "--no-baselines", "--output", "json")
    assert code == 0
    assert [r["name"] for r in json.loads(out)["results"]] == ["gitscale", "oracle"]

