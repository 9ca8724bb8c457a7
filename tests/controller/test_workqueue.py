"""The work queue is the controller's per-set lock: a set is never in two passes at once."""
from __future__ import annotations

import collections
import random
import threading
import time

from gitscale.controller.workqueue import RETRY_MAX, WorkQueue


class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_key_in_a_pass_is_not_handed_out_again_until_done() -> None:
    queue = WorkQueue()
    queue.add("ns/a")
    queue.add("ns/a")  # queued once
    assert queue.get(0) == "ns/a"
    queue.add("ns/a")  # an event during the pass: marked dirty, not handed to a second worker
    queue.add("ns/b")
    assert queue.get(0) == "ns/b"
    assert queue.get(0) is None
    queue.done("ns/a")  # back once the pass is over
    assert queue.get(0) == "ns/a"
    queue.done("ns/a")
    queue.done("ns/b")
    assert queue.get(0) is None and queue.idle()


def test_add_after_waits_for_its_time() -> None:
    ticks = Ticks()
    queue = WorkQueue(clock=ticks)
    queue.add_after("ns/a", 30)
    assert queue.get(0) is None
    ticks.now += 29.9
    assert queue.get(0) is None
    ticks.now += 0.1
    assert queue.get(0) == "ns/a"


def test_workers_never_run_one_set_in_two_passes_at_once() -> None:
    queue = WorkQueue()
    active: collections.Counter[str] = collections.Counter()
    passes: collections.Counter[str] = collections.Counter()
    overlaps: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        while (key := queue.get()) is not None:
            with lock:
                active[key] += 1
                if active[key] > 1:
                    overlaps.append(key)
            time.sleep(0.001)
            with lock:
                active[key] -= 1
                passes[key] += 1
            queue.done(key)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(8)]
    for thread in threads:
        thread.start()
    rng = random.Random(4)
    for n in range(600):  # events keep coming while passes run
        queue.add(f"ns/set-{rng.randrange(3)}")
        if n % 3 == 0:
            time.sleep(0.0005)
    deadline = time.monotonic() + 10
    while not queue.idle() and time.monotonic() < deadline:
        time.sleep(0.01)
    queue.close()
    for thread in threads:
        thread.join(5)
    assert overlaps == []
    assert set(passes) == {"ns/set-0", "ns/set-1", "ns/set-2"}


def _due(queue: WorkQueue) -> list[str]:
    """The keys handed out now (each done at once)."""
    keys = []
    while (key := queue.get(0)) is not None:
        keys.append(key)
        queue.done(key)
    return keys


def test_a_set_whose_passes_keep_failing_backs_off_doubling_to_5_minutes() -> None:
    ticks = Ticks()
    queue = WorkQueue(clock=ticks)
    delays = [queue.failed("ns/a", generation=1) for _ in range(8)]
    assert delays == [10, 20, 40, 80, 160, RETRY_MAX, RETRY_MAX, RETRY_MAX]
    assert queue.failures("ns/a") == 8
    # Only the latest retry runs: those it put further off are dropped.
    ticks.now += RETRY_MAX - 0.1
    assert _due(queue) == []
    ticks.now += 0.1
    assert _due(queue) == ["ns/a"]
    ticks.now += 10 * RETRY_MAX
    assert _due(queue) == []


def test_a_floor_doubles_too() -> None:
    queue = WorkQueue(clock=Ticks())
    assert [queue.failed("ns/a", 30.0) for _ in range(5)] == [30, 60, 120, 240, 300]


def test_a_pass_that_succeeds_or_a_new_spec_starts_the_backoff_over() -> None:
    ticks = Ticks()
    queue = WorkQueue(clock=ticks)
    queue.failed("ns/a", generation=1)
    queue.failed("ns/a", generation=1)
    queue.forget("ns/a")  # a pass succeeded: its retry is no longer needed either
    ticks.now += 3600
    assert _due(queue) == [] and queue.failures("ns/a") == 0
    assert queue.failed("ns/a", generation=1) == 10
    assert queue.failed("ns/a", generation=1) == 20
    assert queue.failed("ns/a", generation=2) == 10  # a spec written since: a first failure
    assert queue.failed("ns/b", generation=2) == 10  # (per set)


def test_the_resync_leaves_a_set_alone_while_it_backs_off_and_events_do_not() -> None:
    ticks = Ticks()
    queue = WorkQueue(clock=ticks)
    for _ in range(4):
        queue.failed("ns/a")  # the next try in 80 s
    queue.resync("ns/a")
    queue.resync("ns/b")
    assert _due(queue) == ["ns/b"]
    queue.add("ns/a")  # a watch event: news, a pass at once
    assert _due(queue) == ["ns/a"]
    ticks.now += 80
    queue.resync("ns/a")  # (its retry is due as well: one pass)
    assert _due(queue) == ["ns/a"]
    queue.resync("ns/a")  # its backoff is over: the resync queues it again
    assert _due(queue) == ["ns/a"]
