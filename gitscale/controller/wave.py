"""When a pass's creations stop before they are all tried: the rule ``create.py`` applies to
each creation's failure, and the README's "The controller" states.

Every creation of a GitHub set costs two content-creating requests when it fails (the
registration, then its removal), where GitHub allows about 80 a minute and answers more with a
secondary rate limit that blocks every set. So the creations of a pass not started yet are not
tried (``Wave.stop``) after:

- a refusal every creation would meet (``for_all``): the API server refusing the object (a
  4xx), taking no connection at all, or the platform refusing a registration;
- ``WAVE_FAILURES`` server failures in a row (``server_failure``: a 5xx, a 429 or 408, no
  answer on a connection made), a creation of the pass succeeding between two of them ending
  the row: a brownout, every creation answered 503 for a minute, costs a pass about
  ``WAVE_FAILURES`` + ``--concurrency`` registrations, not one per runner missing. One such
  failure, or a few, is one request's: the others go on (a hiccup must not stall a
  10,000-runner wave), and so does a wave that meets them among successes — one API server of
  three failing behind a load balancer costs as many failures whatever the pace, and its
  runners are needed.
"""
from __future__ import annotations

import threading

from gitscale.controller.errors import (
    Conflict,
    ControllerError,
    KubeError,
    PlatformError,
    PlatformOutage,
    RunnerNameTaken,
)

WAVE_FAILURES = 8  # server failures in a row that end a pass's creations not started yet


def for_all(exc: ControllerError) -> bool:
    """Would every creation of the set meet this refusal: the API server refusing the object
    (a 4xx: a quota, a webhook, validation, RBAC; not a 409, one name taken, nor a 408 or a
    429, one request timed out or throttled by API priority and fairness), the API server not
    reachable at all (no connection made: down, restarting — each creation not started would
    register its runner with the platform, then unregister it), or the platform refusing a
    registration (its credentials, its answer; not a name taken)? A 5xx or no answer on a
    connection made may be one request's (``server_failure``: counted, not final); the
    platform's own outages stop its calls in ``outage.py``; and Interrupted stops the others
    by itself."""
    if isinstance(exc, KubeError):
        return exc.unreachable or (400 <= exc.status < 500 and exc.status not in (408, 429)
                                   and not isinstance(exc, Conflict))
    return isinstance(exc, PlatformError) and not isinstance(exc, (PlatformOutage,
                                                                   RunnerNameTaken))


def server_failure(exc: ControllerError) -> bool:
    """The API server failing the request rather than refusing the object: a 5xx, a 429 or a
    408, or no answer on a connection made (a timeout, a connection reset)."""
    return isinstance(exc, KubeError) and not exc.unreachable and (
        exc.status >= 500 or exc.status in (0, 408, 429))


class Wave:
    """What the creations of one pass share across the pool's threads: whether those not
    started yet are tried (``stop``), and the server failures in a row so far, in the order
    their answers came."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._in_a_row = 0
        self.browned_out = False  # stopped by WAVE_FAILURES server failures in a row

    def created(self) -> None:
        with self._lock:
            self._in_a_row = 0

    def failed(self, exc: ControllerError) -> None:
        if for_all(exc):
            self.stop.set()
        elif server_failure(exc):
            with self._lock:
                self._in_a_row += 1
                if self._in_a_row >= WAVE_FAILURES and not self.stop.is_set():
                    self.browned_out = True
                    self.stop.set()
