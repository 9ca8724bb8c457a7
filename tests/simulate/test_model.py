"""The cluster model on its own: a Pool driven by a hand-made strategy, every figure by hand."""
from __future__ import annotations

import pytest

from gitscale.controller.decide import Phase
from gitscale.simulate.model import Clock, Pool
from gitscale.simulate.trace import DEFAULT_START, Job


def phases(pool: Pool) -> dict[str, str]:
    return {name: pod.phase.value for name, pod in pool.pods.items()}


def test_hand_computed_scenario() -> None:
    clock = Clock(DEFAULT_START)
    seen: list[tuple[float, int, int]] = []
    pool = Pool(clock, "p", pod_start=45.0,
                on_change=lambda p: seen.append((clock.now, len(p.queue), len(p.running))))
    jobs = [Job(0, "p", 60, 100), Job(1, "p", 70, 50), Job(2, "p", 80, 30), Job(3, "p", 85, 10),
            Job(4, "p", 200, 1000)]
    for job in jobs:
        clock.at(job.arrival, pool.arrive, job)
    # The strategy: pods created and deleted at fixed times.
    for at in (0, 0, 90, 100, 110, 170, 220):
        clock.at(at, pool.create)
    clock.at(112, pool.delete, "p-5")  # p-5 (created at 110) is still pending

    clock.run(44.9)
    assert phases(pool) == {"p-1": "pending", "p-2": "pending"}  # pod start not over yet
    clock.run(45)
    assert phases(pool) == {"p-1": "idle", "p-2": "idle"}
    clock.run(85)
    # p-1 idled 15 s and took job 0 at 60, p-2 idled 25 s and took job 1 at 70; 2 and 3 wait
    assert phases(pool) == {"p-1": "busy", "p-2": "busy"}
    assert [j.id for j in pool.queue] == [2, 3] and sorted(pool.running) == [0, 1]
    assert pool.waits == {0: 0.0, 1: 0.0}
    clock.run(134)
    assert "p-5" not in pool.pods  # deleted while pending
    assert phases(pool) == {"p-1": "busy", "p-2": "finished", "p-3": "pending",
                            "p-4": "pending"}
    clock.run(135)
    # FIFO: the first runner ready (p-3 at 135) takes the oldest job (2), p-4 at 145 job 3
    assert [j.id for j in pool.queue] == [3] and pool.waits[2] == 55.0
    clock.run(300)
    pool.close(300)
    assert pool.waits == {0: 0.0, 1: 0.0, 2: 55.0, 3: 60.0, 4: 15.0}
    assert phases(pool) == {"p-1": "finished", "p-2": "finished", "p-3": "finished",
                            "p-4": "finished", "p-6": "busy", "p-7": "idle"}
    assert pool.created == 7
    # created → finished (or → the end at 300, or → deleted):
    # p-1 0→160, p-2 0→120, p-3 90→165, p-4 100→155, p-5 110→112, p-6 170→300, p-7 220→300
    assert pool.runner_seconds == 160 + 120 + 75 + 55 + 2 + 130 + 80
    # idle: p-1 45→60, p-2 45→70, p-7 265→300 (p-3, p-4, p-6 had a job waiting when ready)
    assert pool.idle_seconds == 15 + 25 + 35
    # on_change: each arrival, each ready runner, each completion
    assert [at for at, _, _ in seen] == [45, 45, 60, 70, 80, 85, 120, 135, 145, 155, 160, 165,
                                         200, 215, 265]
    assert seen[-3:] == [(200, 1, 0), (215, 0, 1), (265, 0, 1)]


def test_jobs_that_never_start_wait_until_the_end() -> None:
    clock = Clock(DEFAULT_START)
    pool = Pool(clock, "p", pod_start=45.0)
    clock.at(10, pool.arrive, Job(0, "p", 10, 60))
    clock.at(20, pool.create)
    clock.at(30, pool.arrive, Job(1, "p", 30, 60))
    clock.run(500)
    pool.close(500)
    assert pool.waits == {0: 55.0, 1: 470.0}
    assert pool.runner_seconds == 45 + 60 and pool.idle_seconds == 0
    assert pool.demand() == (1, 0, frozenset({"1"}))


def test_demand_reports_queued_running_and_ids() -> None:
    clock = Clock(DEFAULT_START)
    pool = Pool(clock, "p", pod_start=0.0)
    pool.create()
    clock.run(0)
    for job in (Job(7, "p", 0, 60), Job(8, "p", 0, 60)):
        pool.arrive(job)
    assert pool.demand() == (1, 1, frozenset({"7", "8"}))
    pool.sample()
    assert [(s.at, s.runners, s.queued, s.running) for s in pool.samples] == [(0.0, 1, 1, 1)]


def test_deleting_a_busy_runner_raises_and_finished_ones_cost_nothing_more() -> None:
    clock = Clock(DEFAULT_START)
    pool = Pool(clock, "p", pod_start=10.0)
    pool.create()
    pool.create()
    clock.at(0, pool.arrive, Job(0, "p", 0, 30))
    clock.at(0, pool.arrive, Job(1, "p", 0, 5))
    clock.run(20)
    assert phases(pool) == {"p-1": "busy", "p-2": "finished"}
    with pytest.raises(AssertionError, match="p-1 is busy"):
        pool.delete("p-1")
    assert pool.pods["p-1"].phase is Phase.BUSY
    before = pool.runner_seconds
    assert before == 15.0  # p-2: created 0, finished at 15
    pool.delete("p-2")
    pool.delete("no-such-pod")
    assert "p-2" not in pool.pods and pool.runner_seconds == before


def test_clock_runs_in_time_order_and_ties_in_the_order_given() -> None:
    clock = Clock(DEFAULT_START)
    order: list[str] = []
    clock.at(5, order.append, "b")
    clock.at(1, order.append, "a")
    clock.at(5, order.append, "c")
    clock.at(9, order.append, "late")
    clock.run(5)
    assert order == ["a", "b", "c"] and clock.now == 5
    clock.at(2, order.append, "past")  # never before now
    clock.run(10)
    assert order == ["a", "b", "c", "past", "late"]
