"""Whether a loop of passes still moves — `gitscale run`'s passes (``GET /healthz`` on its
``--metrics-listen`` port), `serve`'s batches (its ``/healthz``) — for a liveness probe.

A pass is bounded — each git command by ``GITSCALE_GIT_TIMEOUT``, each HTTP request by its
client's timeouts, lost push races by 120 s — so a pass that has run for much longer than all of
those together is a wedged loop (a bug, a hang no timeout covers), which only a restart ends.
The time between passes is not counted: a GitHub rate limit may hold the next pass for up to an
hour, and a loop that waits is healthy.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from gitscale.repo.deadline import git_timeout

STALL_MIN = 900.0  # seconds: a pass running longer than this (or 5 git timeouts) is stuck


def stall_limit() -> float:
    """Seconds a pass may run before the loop is said stuck."""
    return max(STALL_MIN, 5 * git_timeout())


@dataclass
class PassWatch:
    """The passes (or batches) as ``/healthz`` reports them (set by the loop's thread, read by
    the listener's)."""

    stall: float
    clock: Callable[[], float] = time.monotonic
    passes: int = 0  # passes ended, whatever their result
    began: float | None = None  # clock() of the pass in progress
    ended: float | None = None  # clock() of the last pass's end

    def begin(self) -> None:
        self.began = self.clock()

    def end(self) -> None:
        self.began, self.ended = None, self.clock()
        self.passes += 1

    def health(self) -> tuple[int, dict[str, Any]]:
        """200 while the loop moves; 503 once a pass has run past ``stall``."""
        now, began, ended = self.clock(), self.began, self.ended
        body: dict[str, Any] = {"status": "ok", "passes": self.passes}
        if ended is not None:
            body["last_pass_ended_seconds_ago"] = round(now - ended, 1)
        if began is not None:
            running = now - began
            body["pass_running_seconds"] = round(running, 1)
            if running > self.stall:
                body["status"] = "stuck"
                body["error"] = (f"a pass has run for {running:.0f} s, more than the "
                                 f"{self.stall:.0f} s every pass ends within: the loop is stuck")
                return 503, body
        return 200, body
