"""Is the controller making progress? What ``/healthz`` answers.

A thread that must keep iterating (an informer, the leader elector) is watched with a bound:
it is stalled when it has not beaten for that long. A worker is stalled when its pass has gone
``bound`` seconds without progress: no Kubernetes call of the pass returned (answered or
failed) and no task of the runner pool finished (a pass's creations may wait in the pool's
queue behind another pass's thousands: while the pool moves, their turn comes). Every call has
a timeout (``kube.py``), so a pass that makes progress beats every few seconds, even against an
API server that does not answer: its calls fail, and fail again. An unreachable API server is
therefore not a stall (liveness must not restart both replicas during a control-plane outage,
which would only add CrashLoopBackOff to the outage); a process whose threads stop moving is.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class Liveness:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._beats: dict[int, float] = {}  # thread ident -> its last sign of progress
        self._loops: dict[int, tuple[str, float]] = {}  # ident -> (name, bound)
        self._passes: dict[int, str] = {}  # ident -> the set its pass is over
        self._pool = float("-inf")  # when a task of the pool last finished
        self._local = threading.local()

    def watch(self, thread: threading.Thread, name: str, bound: float) -> None:
        """``thread`` (started) must beat at least every ``bound`` seconds from now on."""
        assert thread.ident is not None, "watch a thread once it is started"
        with self._lock:
            self._loops[thread.ident] = (name, bound)
            self._beats[thread.ident] = self._clock()

    def beat(self) -> None:
        """The calling thread (or the worker whose task it runs) made progress."""
        owner = getattr(self._local, "owner", None)
        self._stamp(owner if owner is not None else threading.get_ident())

    @contextmanager
    def working(self, what: str) -> Iterator[None]:
        """A pass of the calling thread over ``what``."""
        ident = threading.get_ident()
        with self._lock:
            self._passes[ident] = what
            self._beats[ident] = self._clock()
        try:
            yield
        finally:
            with self._lock:
                self._passes.pop(ident, None)

    def on_behalf(self, fn: Callable[P, T]) -> Callable[P, T]:
        """``fn``, to run in another thread, as progress of the calling thread's pass."""
        owner = threading.get_ident()

        def run(*args: P.args, **kwargs: P.kwargs) -> T:
            self._local.owner = owner
            try:
                return fn(*args, **kwargs)
            finally:
                self._local.owner = None
                self._stamp(owner, pool=True)
        return run

    def stalled(self, bound: float) -> list[str]:
        """What has stopped moving: watched threads past their bound, passes past ``bound``."""
        now = self._clock()
        with self._lock:
            out = [f"{name}: no progress for {now - self._beats[ident]:.0f}s"
                   for ident, (name, limit) in self._loops.items()
                   if now - self._beats[ident] > limit]
            for ident, what in self._passes.items():
                quiet = now - max(self._beats[ident], self._pool)
                if quiet > bound:
                    out.append(f"pass over {what}: no progress for {quiet:.0f}s")
        return out

    def _stamp(self, ident: int, *, pool: bool = False) -> None:
        with self._lock:
            self._beats[ident] = self._clock()
            if pool:
                self._pool = self._beats[ident]


class Pool(ThreadPoolExecutor):
    """The runner I/O pool: each task that finishes is progress of the pass that submitted it."""

    def __init__(self, workers: int, liveness: Liveness, *, thread_name_prefix: str = "") -> None:
        super().__init__(workers, thread_name_prefix=thread_name_prefix)
        self._liveness = liveness

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        return super().submit(self._liveness.on_behalf(fn), *args, **kwargs)
