"""Keys of RunnerSets to reconcile, like client-go's work queue with its rate limiter.

A key is queued at most once; a key being reconciled is never handed to a second worker (an
``add`` meanwhile marks it dirty and it comes back when ``done``); ``add_after`` schedules a
key for later (a failed runner's backoff, the 30 s unregister retry, a grace running out).

A set whose passes keep failing backs off (``failed``): its next try waits ``RETRY`` seconds
(or the pass's own floor, such as 30 s for refused credentials), doubling with each failed pass
of the set in a row up to ``RETRY_MAX``; a pass that succeeds (``forget``), or a failure of a
new spec (another ``generation``), starts it over. A watch event still runs a pass at once (it
may be the fix, and it is news); the periodic resync (``resync``) leaves a set alone while it
waits, since its retry is scheduled; and a scheduled retry that a later failure put further
off, or a success made needless, is dropped rather than run.
"""
from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from typing import Callable, Hashable

RETRY = 10.0  # seconds before a failed pass of a set is tried again, doubling ...
RETRY_MAX = 300.0  # ... up to this, while its passes fail in a row


class WorkQueue:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cv = threading.Condition()
        self._ready: deque[str] = deque()
        self._queued: set[str] = set()
        self._active: set[str] = set()
        self._dirty: set[str] = set()
        # (when, seq, key, a retry after a failure): a retry runs only while it is the key's
        # current one (``_retry``)
        self._later: list[tuple[float, int, str, bool]] = []
        self._seq = itertools.count()
        self._closed = False
        self._failures: dict[str, tuple[int, Hashable]] = {}  # key → (in a row, generation)
        self._retry: dict[str, tuple[float, int]] = {}  # key → (when, seq) of its retry

    def add(self, key: str) -> None:
        with self._cv:
            self._add(key)

    def add_after(self, key: str, delay: float) -> None:
        with self._cv:
            if delay <= 0:
                self._add(key)
            else:
                heapq.heappush(self._later, (self._clock() + delay, next(self._seq), key, False))
                self._cv.notify()

    # -- failed passes: a per-set backoff ------------------------------------------------------
    def failed(self, key: str, floor: float = RETRY, generation: Hashable = None) -> float:
        """A pass over ``key`` failed: schedule its retry, ``floor`` seconds doubled for each
        failed pass before it in a row (of the same ``generation`` of the set: a new spec
        starts over), at most ``RETRY_MAX``. Returns the delay."""
        with self._cv:
            count, counted_for = self._failures.get(key, (0, generation))
            count = 1 if counted_for != generation else count + 1
            self._failures[key] = (count, generation)
            delay: float = min(floor * 2.0 ** min(count - 1, 32), max(RETRY_MAX, floor))
            when, seq = self._clock() + delay, next(self._seq)
            self._retry[key] = (when, seq)  # (a retry scheduled before is dropped)
            heapq.heappush(self._later, (when, seq, key, True))
            self._cv.notify()
            return delay

    def forget(self, key: str) -> None:
        """A pass over ``key`` succeeded (or the set is gone): no backoff, no retry pending."""
        with self._cv:
            self._failures.pop(key, None)
            self._retry.pop(key, None)

    def failures(self, key: str) -> int:
        """Failed passes of ``key`` in a row."""
        with self._cv:
            return self._failures.get(key, (0, None))[0]

    def resync(self, key: str) -> None:
        """The periodic resync: ``add``, unless the set waits out its backoff (its retry is
        scheduled; a resync every minute would cut a longer backoff short)."""
        with self._cv:
            retry = self._retry.get(key)
            if retry is None or retry[0] <= self._clock():
                self._add(key)

    # -- workers -------------------------------------------------------------------------------
    def get(self, timeout: float | None = None) -> str | None:
        """The next key (the caller must call ``done``), or None on close or timeout."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cv:
            while True:
                now = self._clock()
                while self._later and self._later[0][0] <= now:
                    _, seq, key, retry = heapq.heappop(self._later)
                    if retry:
                        current = self._retry.get(key)
                        if current is None or current[1] != seq:
                            continue  # put further off since, or no longer needed
                        del self._retry[key]
                    self._add(key)
                if self._ready:
                    key = self._ready.popleft()
                    self._queued.discard(key)
                    self._active.add(key)
                    return key
                if self._closed:
                    return None
                waits = [t - now for t in (deadline,) if t is not None]
                if self._later:
                    waits.append(self._later[0][0] - now)
                if deadline is not None and now >= deadline:
                    return None
                self._cv.wait(max(min(waits), 0.001) if waits else None)

    def done(self, key: str) -> None:
        with self._cv:
            self._active.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._add(key)
            self._cv.notify_all()

    def idle(self) -> bool:
        """Nothing ready and nothing being reconciled (scheduled keys do not count)."""
        with self._cv:
            return not self._ready and not self._active

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def _add(self, key: str) -> None:
        if self._closed:
            return
        if key in self._active:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._ready.append(key)
            self._cv.notify()
