"""What /healthz counts as a stall (liveness.py), on a clock the test moves."""
from __future__ import annotations

import threading
from concurrent.futures import wait

from gitscale.controller.liveness import Liveness, Pool


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_watched_loop_stalls_when_it_stops_beating() -> None:
    clock = Clock()
    live = Liveness(clock)
    ready, go, done = threading.Event(), threading.Event(), threading.Event()

    def loop() -> None:
        ready.set()
        go.wait(5)
        live.beat()
        done.set()

    thread = threading.Thread(target=loop)
    thread.start()
    ready.wait(5)
    live.watch(thread, "informer pods", 60)
    clock.now += 61
    assert live.stalled(300) == ["informer pods: no progress for 61s"]
    go.set()
    done.wait(5)
    assert live.stalled(300) == []
    thread.join(5)


def test_a_pass_stalls_only_without_progress_of_its_own_or_of_the_pool() -> None:
    clock = Clock()
    live = Liveness(clock)
    pool = Pool(2, live)
    try:
        with live.working("default/rs"):
            clock.now += 299
            assert live.stalled(300) == []
            clock.now += 2
            assert live.stalled(300) == ["pass over default/rs: no progress for 301s"]
            live.beat()  # a call of the pass returned
            assert live.stalled(300) == []
            clock.now += 301
            wait([pool.submit(lambda: None)])  # a creation finished: progress too
            assert live.stalled(300) == []
            clock.now += 301
        assert live.stalled(300) == []  # no pass, nothing to stall
    finally:
        pool.shutdown()


def test_a_call_in_a_pool_task_beats_for_the_pass_that_submitted_it() -> None:
    clock = Clock()
    live = Liveness(clock)
    pool = Pool(1, live)
    called, release = threading.Event(), threading.Event()

    def create() -> None:
        live.beat()  # a Kubernetes call returned, in the pool's thread
        called.set()
        release.wait(5)  # the next call of the task hangs

    try:
        with live.working("default/rs"):
            clock.now += 301
            task = pool.submit(create)
            called.wait(5)
            clock.now += 299
            assert live.stalled(300) == []
            clock.now += 2
            assert live.stalled(300) == ["pass over default/rs: no progress for 301s"]
            release.set()
            wait([task])
            assert live.stalled(300) == []
    finally:
        release.set()
        pool.shutdown()
