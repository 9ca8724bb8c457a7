"""A platform that fails — GitHub or Buildkite answering 5xx, or not answering — is not asked
again by any set before a wait is over (``OUTAGE_WAIT`` seconds, doubling with each failure in
a row up to ``OUTAGE_WAIT_MAX``); then one request tries, and the others are not sent until it
has an answer (they are not made to wait for it either: a pass that waited could go on after
its controller lost the Lease).

One ``Outage`` per platform client, so per credentials Secret and scope: every set that shares
the client shares the wait. Without it, a pass of a 300-runner set scaling down during a GitHub
outage sent 300 DELETEs, and every pass after it — a pod event, the 10 s error retry — as many
again, spending the rate limit the sets' registrations need for when GitHub is back. A call
made while the wait runs raises ``NotAsked``, which no request was sent for: the pass treats it
as the failure it stands for (a runner not unregistered keeps its pod; one that stopped goes
without, its registration left to the sweep). A rate limit is not an outage: the HTTP client
keeps it (``clients/http.py``), and the platform answered.
"""
from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Callable, TypeVar

from gitscale.clients.errors import ApiError, RateLimited
from gitscale.controller.errors import PlatformError, PlatformOutage
from gitscale.controller.status import not_asked
from gitscale.timeutil import format_time, utcnow

OUTAGE_WAIT = 5.0  # seconds the platform is not asked after it failed once ...
OUTAGE_WAIT_MAX = 300.0  # ... doubling with each failure in a row, up to this
PROBE_WAIT = 1.0  # seconds before a call not sent while one request tries is worth again

T = TypeVar("T")


class NotAsked(PlatformOutage):
    """Not sent: the platform failed, and its wait is not over (or the request that tries is
    out). Says the failure and when it is asked again; ``after``: in how many seconds."""

    def __init__(self, message: str, after: float) -> None:
        super().__init__(message)
        self.after = after


class Outage:
    """Thread-safe: the passes of every set of one client share it. A request is ``before``
    → ``answered`` or ``failed`` (or ``abandoned``), with the ticket ``before`` gave: requests
    sent together that fail together count as one failure, not as many in a row."""

    def __init__(self, platform: str, *, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime] = utcnow) -> None:
        self.platform = platform
        self._clock, self._wall = clock, wall
        self._lock = threading.Lock()
        self.failures = 0  # in a row
        self._epoch = 0  # failures counted so far, ever: a ticket of an older epoch is late
        self._until = 0.0  # clock() before which nothing is sent
        self._said = ""  # the failure, and when the platform is asked again
        self._trying = False  # the one request after the wait is in flight

    def before(self) -> int:
        """Before a request: ``NotAsked`` while the wait runs; once it is over, the first caller
        goes and the others are ``NotAsked`` until it has an answer. Returns the request's
        ticket."""
        with self._lock:
            if self.failures:
                left = self._until - self._clock()
                if left > 0:
                    raise NotAsked(self._said, left)
                if self._trying:
                    raise NotAsked(f"{self._said}: one request is trying it", PROBE_WAIT)
                self._trying = True
            return self._epoch

    def answered(self, ticket: int) -> None:
        """The platform answered (any answer but a 5xx: a 404 or a 422 is an answer too). One
        sent before the last failure was counted ends nothing."""
        with self._lock:
            if ticket == self._epoch:
                self.failures, self._trying = 0, False

    def abandoned(self, ticket: int) -> None:
        """The request ended without an answer either way (a bug, an interrupt): if it was the
        one that tried, the next caller tries."""
        with self._lock:
            if ticket == self._epoch:
                self._trying = False

    def failed(self, ticket: int, message: str) -> str:
        """A 5xx, or no answer: wait longer before the next request (once for the requests
        sent before the failure was counted). Returns the failure counted, and when the
        platform is asked again: what every request of it says (they are one failure)."""
        with self._lock:
            if ticket != self._epoch:  # (said as the failure counted, while it is waited out)
                return self._said if self.failures else message
            self._epoch += 1
            self.failures += 1
            wait = min(OUTAGE_WAIT * 2 ** (self.failures - 1), OUTAGE_WAIT_MAX)
            self._until = self._clock() + wait
            again = format_time(self._wall() + timedelta(seconds=wait))
            self._said = message + not_asked(self.platform, again, self.failures)
            self._trying = False
            return self._said

    def take_over(self, old: Outage) -> None:
        """What the client this one replaces knew (its credentials were read again)."""
        with old._lock:
            failures, until, said = old.failures, old._until, old._said
        with self._lock:
            self.failures, self._until, self._said = failures, until, said

    def ask(self, call: Callable[[], T], translate: Callable[[ApiError], PlatformError]) -> T:
        """``call``'s answer, its errors as the controller's (``translate``); not sent while
        the wait runs (``NotAsked``). A 5xx or no answer starts or lengthens the wait; a rate
        limit does not (the platform answered). The requests of one failure — sent together,
        or not sent while it is waited out — all say it alike (the first counted, and when the
        platform is asked again), so that a pass says it once."""
        ticket = self.before()
        try:
            answer = call()
        except ApiError as exc:
            error = translate(exc)
            if isinstance(error, PlatformOutage) and not isinstance(exc, RateLimited):
                raise PlatformOutage(self.failed(ticket, str(error))) from None
            self.answered(ticket)
            raise error from None
        except BaseException:
            self.abandoned(ticket)
            raise
        self.answered(ticket)
        return answer
