"""`serve`'s shared state: the events accepted and not yet landed, and what ``/healthz`` reports.

The HTTP thread adds to it (``endpoints``), the batch thread takes from it and records how each
batch went (``batch_loop``); one lock between them.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from gitscale.plan.pass_watch import PassWatch, stall_limit
from gitscale.webhooks.delivery import JobEvent


@dataclass
class Batcher:
    """Events waiting for the next window, and what /healthz reports."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    pending: list[JobEvent] = field(default_factory=list)
    writing: int = 0  # taken by the batch being written
    last_batch: str | None = None
    last_error: str | None = None
    failures: int = 0
    commits: int = 0
    dropped: int = 0  # events landed batches dropped: jobs no served set takes
    held_since: str | None = None  # the first batch whose reservations serve holds (--hold)
    # batches begun and ended: /healthz fails once one has run past every bound a batch has
    watch: PassWatch = field(default_factory=lambda: PassWatch(stall_limit()))

    def add(self, event: JobEvent) -> None:
        with self.lock:
            self.pending.append(event)

    def take(self) -> list[JobEvent]:
        with self.lock:
            taken, self.pending = self.pending, []
            self.writing = len(taken)
            return taken

    def give_back(self, events: list[JobEvent]) -> None:
        with self.lock:
            self.pending = events + self.pending  # keep delivery order
            self.writing = 0

    def health(self) -> tuple[int, dict[str, Any]]:
        """``pending_events``: accepted and not yet landed (queued, or in the batch being
        written). 503 ``stuck`` once a batch has run past every bound a batch has
        (``PassWatch``): a restart, then the resync at the start, recovers its events."""
        code, watched = self.watch.health()
        with self.lock:
            answer = {"status": "degraded" if self.failures else "ok",
                      "pending_events": len(self.pending) + self.writing,
                      "last_batch": self.last_batch, "last_error": self.last_error,
                      "commits": self.commits, "dropped_events": self.dropped,
                      "reservations_held_since": self.held_since}
        if code != 200:
            answer.update(status=watched["status"], error=watched["error"],
                          batch_running_seconds=watched["pass_running_seconds"])
        return code, answer
