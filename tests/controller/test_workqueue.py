"""The work queue is the controller's per-set lock: a set is never in two passes at once."""
from __future__ import annotations

import collections
import random
import threading
import time

from gitscale.controller.workqueue import WorkQueue


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
