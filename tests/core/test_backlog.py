"""The backlog under saturation: the shared arithmetic, and when the scaler writes it."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from gitscale.core.backlog import backlog_of, refills_left, uncovered
from gitscale.core.decide import decide
from gitscale.core.model import NO_WHY, Current, Decision, Demand, Reason
from gitscale.core.policy import Policy
from gitscale.runnerset_api import BACKLOG_MAX

NOW = datetime(2026, 11, 23, 9, 30, tzinfo=timezone.utc)
MAX10 = Policy(0, 10, 0)


@pytest.mark.parametrize(("assigned", "replicas", "expected"), [
    pytest.param(15, 10, 5, id="five-beyond-max"),
    pytest.param(10, 10, 0, id="exactly-covered"),
    pytest.param(3, 10, 0, id="fewer-jobs-than-runners"),
    pytest.param(0, 0, 0, id="nothing"),
    pytest.param(BACKLOG_MAX + 50, 10, BACKLOG_MAX, id="capped"),
])
def test_backlog_of(assigned: int, replicas: int, expected: int) -> None:
    assert backlog_of(assigned, replicas) == expected


@pytest.mark.parametrize(("backlog", "refilled", "expected"), [
    pytest.param(5, 0, 5, id="none-used"),
    pytest.param(5, 3, 2, id="some-used"),
    pytest.param(5, 5, 0, id="used-up"),
    pytest.param(5, 9, 0, id="more-completed-than-the-backlog"),
    pytest.param(0, 0, 0, id="no-backlog"),
])
def test_refills_left(backlog: int, refilled: int, expected: int) -> None:
    assert refills_left(backlog, refilled) == expected


@pytest.mark.parametrize(("jobs", "arrived", "replicas", "backlog", "expected"), [
    pytest.param(15, 0, 10, 5, 0, id="the-write-covers-its-jobs"),
    pytest.param(15, 3, 10, 5, 3, id="arrivals-beyond-it"),
    pytest.param(6, 3, 10, 0, 0, id="idle-runners-take-arrivals"),
    pytest.param(10, 3, 10, 0, 3, id="at-max-without-backlog"),
])
def test_uncovered(jobs: int, arrived: int, replicas: int, backlog: int,
                   expected: int) -> None:
    assert uncovered(jobs, arrived, replicas, backlog) == expected


def ids(first: int, last: int) -> frozenset[str]:
    return frozenset(str(i) for i in range(first, last + 1))


def written(replicas: int, backlog: int | None, jobs: frozenset[str], patch: int = 3,
            scaled_up: datetime | None = None) -> Current:
    """A RunnerSet as a write left it (backlog None: a kind without the field)."""
    return Current(replicas, patch, scaled_up, Demand(0, 0, jobs).fingerprint, jobs=jobs,
                   backlog=backlog)


# At max 10: the last write saw jobs 1–15 (10 running, 5 queued) and wrote backlog 5.
AT_WRITE = written(10, 5, ids(1, 15))


@pytest.mark.parametrize(("current", "demand", "expected"), [
    pytest.param(AT_WRITE, Demand(7, 10, ids(3, 17)), None,
                 id="arrivals-beyond-it-but-refills-left-no-commit"),
    pytest.param(AT_WRITE, Demand(2, 10, ids(6, 17)), (10, 4, Reason.REAFFIRM, 2),
                 id="refills-used-up-and-jobs-beyond-it-write-the-new-backlog"),
    pytest.param(AT_WRITE, Demand(0, 10, ids(6, 15)), (10, 4, Reason.REAFFIRM, 0),
                 id="nothing-waits-beyond-the-replicas-the-backlog-is-withdrawn"),
    pytest.param(AT_WRITE, Demand(5, 10, ids(1, 15)), None,
                 id="nothing-changed"),
    pytest.param(AT_WRITE, Demand(0, 6, ids(10, 15)), (6, 4, Reason.SCALE_DOWN, 0),
                 id="queue-drained-scale-down-without-backlog"),
    pytest.param(written(10, 5, ids(1, 15), scaled_up=NOW - timedelta(minutes=1)),
                 Demand(0, 8, ids(8, 15)), (8, 4, Reason.SCALE_DOWN, 0),
                 id="a-scale-down-withdraws-the-backlog"),  # MAX10: no delay
    pytest.param(written(10, 5, ids(1, 15), scaled_up=NOW - timedelta(minutes=1)),
                 Demand(0, 10, ids(1, 10)), (10, 4, Reason.REAFFIRM, 0),
                 id="queued-jobs-cancelled-the-backlog-is-withdrawn"),
    pytest.param(written(10, 0, ids(1, 10)), Demand(2, 10, ids(1, 12)),
                 (10, 4, Reason.REAFFIRM, 2),
                 id="at-max-a-runnerset-writes-the-backlog-before-a-completion"),
    pytest.param(written(10, None, ids(1, 10)), Demand(2, 10, ids(1, 12)), None,
                 id="at-max-a-legacy-kind-waits-for-a-completion"),
    pytest.param(written(10, None, ids(1, 10)), Demand(2, 9, ids(2, 12)),
                 (10, 4, Reason.REAFFIRM, 0),
                 id="a-legacy-kind-re-affirms-without-backlog"),
    pytest.param(Current(0, None, backlog=0), Demand(15, 0, ids(1, 15)),
                 (10, 0, Reason.FIRST_WRITE, 5), id="first-write-carries-the-backlog"),
    pytest.param(written(4, 0, ids(1, 4)), Demand(26, 4, ids(1, 30)),
                 (10, 4, Reason.SCALE_UP, 20), id="scale-up-to-max-carries-the-backlog"),
    pytest.param(Current(10, 3, None, Demand(5, 10).fingerprint, backlog=5),
                 Demand(5, 10, ids(1, 15)), (10, 4, Reason.REAFFIRM, 5),
                 id="job-ids-unknown-any-change-while-jobs-wait"),
])
def test_when_the_scaler_writes_the_backlog(
        current: Current, demand: Demand,
        expected: tuple[int, int, Reason, int] | None) -> None:
    decision = decide(current, demand, MAX10, NOW)
    if expected is None:
        assert not decision.write, decision
    else:
        assert decision.write, decision
        assert (decision.replicas, decision.patch_id, decision.reason,
                decision.backlog) == expected


WITHDRAWN = "; no job waits beyond 10: backlog 5 withdrawn, so no slot is refilled for nobody"


@pytest.mark.parametrize(("demand", "expected"), [
    pytest.param(Demand(0, 8, ids(8, 15)),
                 (8, 4, Reason.SCALE_DOWN, 0, "demand 8 (queued 0, running 8)" + WITHDRAWN),
                 id="queue-drained-written-at-demand-not-held"),
    pytest.param(Demand(0, 10, ids(1, 10)),
                 (10, 4, Reason.REAFFIRM, 0, "demand 10 (queued 0, running 10)" + WITHDRAWN),
                 id="queued-jobs-cancelled"),
])
def test_a_backlog_is_withdrawn_at_demand_while_the_delay_holds(
        demand: Demand, expected: tuple[int, int, Reason, int, str]) -> None:
    """The scaling table's backlog row: "target without the scale-down delay, backlog 0,
    patch + 1"; the delay holds nothing in it (nothing in ``why`` says held)."""
    policy = Policy(0, 10, 0, scale_down_delay=timedelta(minutes=10))
    current = written(10, 5, ids(1, 15), scaled_up=NOW - timedelta(minutes=1))
    decision = decide(current, demand, policy, NOW)
    assert decision.write
    assert (decision.replicas, decision.patch_id, decision.reason, decision.backlog,
            decision.detail) == expected
    assert decision.why == NO_WHY


def test_the_backlog_is_read_back_as_written() -> None:
    decision = decide(AT_WRITE, Demand(2, 10, ids(6, 17)), MAX10, NOW)
    after = AT_WRITE.after(decision, Demand(2, 10, ids(6, 17)), NOW)
    assert after.backlog == 2 and after.jobs == ids(6, 17)
    legacy = written(10, None, ids(1, 10))
    assert legacy.after(Decision(True, 10, 4, Reason.REAFFIRM, ""), None, NOW).backlog is None


def test_a_saturated_queue_costs_a_commit_per_backlog_not_per_job() -> None:
    """Max 10, 40 jobs at once and one more a minute, each job taking 5 minutes: the first
    write covers 30 jobs beyond the runners; the next is needed only once those refills are
    used up (minute 15) and jobs that came since wait beyond them. Without a backlog every
    batch of completions (every 5 minutes) would need its own re-affirming commit."""
    state = Current(0, None, backlog=0)
    queue = [str(i) for i in range(40)]
    commits = []
    running: list[tuple[str, int]] = []
    arrivals = 40
    for minute in range(30):
        now = NOW + timedelta(minutes=minute)
        if minute:
            queue.append(str(arrivals))
            arrivals += 1
        running = [(job, until) for job, until in running if until > minute]
        while queue and len(running) < 10:
            running.append((queue.pop(0), minute + 5))
        demand = Demand(len(queue), len(running),
                        frozenset(queue) | frozenset(job for job, _ in running))
        decision = decide(state, demand, MAX10, now)
        if decision.write:
            commits.append((minute, decision.reason, decision.backlog))
        state = state.after(decision, demand, now)
    assert commits[0] == (0, Reason.FIRST_WRITE, 30)
    # 30 refills last 15 minutes (10 runners every 5 minutes); by then 15 jobs came and wait
    # beyond the 10 running (backlog 15), which last 10 minutes more; then 5 are left
    assert commits[1:] == [(15, Reason.REAFFIRM, 15), (25, Reason.REAFFIRM, 5)]
