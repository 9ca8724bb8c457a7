"""Keys of RunnerSets to reconcile, like client-go's work queue.

A key is queued at most once; a key being reconciled is never handed to a second worker (an
``add`` meanwhile marks it dirty and it comes back when ``done``); ``add_after`` schedules a
key for later (backoffs, the 30 s unregister retry, the periodic resync).
"""
from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from typing import Callable


class WorkQueue:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._cv = threading.Condition()
        self._ready: deque[str] = deque()
        self._queued: set[str] = set()
        self._active: set[str] = set()
        self._dirty: set[str] = set()
        self._later: list[tuple[float, int, str]] = []
        self._seq = itertools.count()
        self._closed = False

    def add(self, key: str) -> None:
        with self._cv:
            self._add(key)

    def add_after(self, key: str, delay: float) -> None:
        with self._cv:
            if delay <= 0:
                self._add(key)
            else:
                heapq.heappush(self._later, (self._clock() + delay, next(self._seq), key))
                self._cv.notify()

    def get(self, timeout: float | None = None) -> str | None:
        """The next key (the caller must call ``done``), or None on close or timeout."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cv:
            while True:
                now = self._clock()
                while self._later and self._later[0][0] <= now:
                    self._add(heapq.heappop(self._later)[2])
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
