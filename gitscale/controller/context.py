"""What a pass over a RunnerSet is given (``Context``: the API, the informers' stores, the
platforms, the shared thread pool, what passes remember, the clock, and the events that stop it)
and what it did (``Report``: logged, counted in the metrics, turned into Events, kept for the
tests and the benchmark). ``reconcile.py`` runs the pass; ``registered.py`` and
``runnerset_writes.py`` are its helpers.
"""
from __future__ import annotations

import threading
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable

from gitscale.controller.cache import Store
from gitscale.controller.decide import Actions, Status
from gitscale.controller.kube import Kube
from gitscale.controller.leftovers import GRACE
from gitscale.controller.memory import Memory
from gitscale.controller.platforms import Platforms
from gitscale.controller.workqueue import RETRY

ERROR_RETRY = RETRY  # seconds before a pass that failed is tried again (doubling, per set)


@dataclass
class Context:
    kube: Kube
    runnersets: Store
    pods: Store
    platforms: Platforms
    pool: Executor
    memory: Memory
    clock: Callable[[], datetime]
    halt: threading.Event = field(default_factory=threading.Event)  # stop creating (shutdown)
    # Set while this replica does not hold the Lease (lost in the middle of a pass): the pass
    # writes no status, sweeps no leftover registration and adds or lifts no finalizer any
    # more, as it starts no creation or removal (``halt`` is set with it): the new leader does.
    # Each term as leader gets new ones (``Controller._lead``), which a pass keeps from its
    # start: one in flight when the Lease went stays stopped if the Lease comes back.
    deposed: threading.Event = field(default_factory=threading.Event)
    leftover_grace: timedelta = GRACE


@dataclass
class Report:
    """What a pass did (logged, kept for tests and the benchmark)."""

    key: str
    actions: Actions | None = None
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)
    # Failed by the registration timeout, but online and idle in a list read again: kept
    online: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # Failed calls not listed in ``errors`` (said within another error, or only in the log:
    # the sweep of Secrets left behind), counted in the metrics all the same
    folded: int = 0
    leftovers: list[str] = field(default_factory=list)  # registrations removed (no pod)
    unheard: str | None = None  # why the platform could not say who is idle or busy
    reason: str | None = None  # Ready's reason for its errors, when not ApplyFailed
    counts: Status | None = None  # the set at the end of the pass (None: it could not count)
    unschedulable: int = 0  # pending runners left whose pods the scheduler could not place
    unapplied: str = ""  # a count written by hand the gate does not act on (``st.unapplied``)
    before: dict[str, Any] = field(default_factory=dict, repr=False)  # status at the start
    status_written: bool = False
    # The set was written since the pass read it (a 409 on a write conditional on that
    # version): the pass stopped, or left its status unwritten; no error, no Event of the
    # status (the next pass, on the new version, says what holds)
    stale: bool = False
    requeue_after: float | None = None  # seconds until the pass is due again (a timer, a backoff)
    # The pass failed: it is tried again after this many seconds, doubled for each failed pass
    # of the set before it in a row (``WorkQueue.failed``; None: it did not fail)
    error_retry: float | None = None
    started: float = 0.0  # time.monotonic() at the start of the pass
    seconds: float = 0.0

    def failed(self, floor: float = ERROR_RETRY) -> None:
        """The pass failed: tried again after ``floor`` seconds at the least (``error_retry``;
        the loop doubles it while the set's passes fail in a row)."""
        self.error_retry = floor if self.error_retry is None else min(self.error_retry, floor)
