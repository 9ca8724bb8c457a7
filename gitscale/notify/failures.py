"""The failed notifications of a long-running `run` or `serve`, said as their other persistent
failures are (``gitscale.streak``): a target that keeps failing — its secret not set, its
engine unreachable — is said at its first failure, then again only when the error changes or
every ``REMIND_EVERY`` while it lasts, and once more when it accepts again; not after every push.
`reconcile` and `drain` notify once and say each failure (no streak). The metric
``gitscale_notifications_total`` counts every failure either way.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from gitscale.streak import REMIND_EVERY, Streak, duration, told, without_ids

POLL_STILL = "the engine's own poll still applies"


@dataclass
class NotifyStreaks:
    """Each target's failed notifications in a row, by its label (kind and host)."""

    remind: float = REMIND_EVERY
    clock: Callable[[], float] = time.monotonic
    streaks: dict[str, Streak] = field(default_factory=dict)

    def failed(self, label: str, problem: str) -> str | None:
        """The line to log for this failure, or None: said already in this streak (the same
        error: an answer that differs only by a request id or a count is the same)."""
        streak = self.streaks.setdefault(label, Streak(self.remind, self.clock))
        if not streak.failed(_same(problem)):
            return None
        if streak.count == 1:
            return (f"notify {label} failed: {problem}; {POLL_STILL} (said again when the error "
                    f"changes, every {duration(streak.remind)} while it lasts, and when it "
                    "works again)")
        return (f"notify {label} still failing, {streak.count} pushes in a row for "
                f"{streak.lasted()}: {problem}; {POLL_STILL}")

    def sent(self, label: str) -> str | None:
        """The line to log when ``label`` accepted: the end of its streak, or None."""
        streak = self.streaks.get(label)
        ended = streak.ended() if streak is not None else None
        if ended is None:
            return None
        return f"notify {label} works again, after {told(ended, 'push', 'pushes')}"


def _same(problem: str) -> str:
    """What tells one failure from another: the answer's status, and its text without the
    counts and ids a server changes at every request."""
    status, colon, text = problem.partition(": ")
    if status.startswith("HTTP "):
        return status + colon + without_ids(text)
    return without_ids(problem)
