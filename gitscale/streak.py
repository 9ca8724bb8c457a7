"""A failure streak — of `gitscale serve` (its batches, its resync polls), of the controller (a
platform refusing a credential) — told as a person on call needs it: the first failure at once, in full; the same error again only every ``REMIND_EVERY``
seconds while it lasts (a remote down for an hour is a few lines, not one per retry); a new
error at once; and one line when the streak ends, saying how long it lasted.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Callable

REMIND_EVERY = 1800.0  # seconds: an error that lasts is said again this often
# A count or duration in a message ("1,003 runs", "2.5 s"): a number standing alone, not a
# digit of a name (a repo "svc2", a queue "deploy-1", a host "10.0.0.5"), whose messages differ
_COUNTS = re.compile(r"(?<![\w./-])\d[\d,]*(?:\.\d+)?(?![\w-]|[.,]\w)")


# An id a server puts in each answer (a request id, a UUID, a trace id): a word of 16 or more
# letters, digits, '-' and '_' with a digit in it
_IDS = re.compile(r"(?<![\w-])(?=[\w-]*\d)[\w-]{16,}(?![\w-])")


def without_counts(message: str) -> str:
    """``message`` with its counts and durations as ``#``: what tells one lasting condition
    from another when its numbers change at every pass (a warning said once per streak)."""
    return _COUNTS.sub("#", message)


def without_ids(message: str) -> str:
    """``message`` without its counts (``without_counts``) and the ids a server puts in each
    answer, as ``#``: what tells one server's lasting error from another when its answer
    differs at every request."""
    return without_counts(_IDS.sub("#", message))


@dataclass
class Streak:
    """Failures in a row of one kind of work; ``failed`` and ``ended`` say what to log."""

    remind: float = REMIND_EVERY
    clock: Callable[[], float] = time.monotonic
    count: int = 0  # failures in a row
    since: float | None = None  # clock() of the streak's first failure
    said: str | None = None  # the error logged last
    said_at: float = 0.0

    def failed(self, error: str) -> bool:
        """Count one failure; True when it is to be logged: the streak's first, another error
        than the one logged last, or the same one ``remind`` seconds after it was."""
        now = self.clock()
        self.count += 1
        if self.since is None:
            self.since = now
        if error != self.said or now - self.said_at >= self.remind:
            self.said, self.said_at = error, now
            return True
        return False

    def lasted(self) -> str:
        """How long the streak has lasted, e.g. ``4m05s``."""
        return duration(self.clock() - self.since if self.since is not None else 0.0)

    def ended(self) -> tuple[int, str] | None:
        """The streak is over (a success): its failures and how long it lasted, or None when
        there was none. The next failure starts a new streak."""
        if not self.count:
            return None
        ended = (self.count, self.lasted())
        self.count, self.since, self.said = 0, None, None
        return ended


def told(ended: tuple[int, str], one: str, many: str) -> str:
    """A streak that ended (``Streak.ended``) in words: ``1 failed poll in 5s``, ``3 failed
    polls in 2m00s`` (``one``/``many``: the noun for one failure and for several)."""
    count, lasted = ended
    return f"{count} failed {one if count == 1 else many} in {lasted}"


@dataclass(frozen=True)
class Tally:
    """What was dropped since it was last said."""

    count: int = 0
    example: str = ""


@dataclass
class Dropped:
    """Events no served set takes: counted, and said at most every ``every`` seconds (the
    first at once), with an example and how many since the last line — an org webhook sends
    every GitHub-hosted job too, so a line per batch would drown the log."""

    every: float = 600.0
    clock: Callable[[], float] = time.monotonic
    total: int = 0
    unsaid: Tally = field(default_factory=Tally)
    said_at: float | None = None

    def add(self, count: int, example: str) -> Tally | None:
        """Count ``count`` dropped events; what to log now (None: not yet)."""
        if not count:
            return None
        self.total += count
        self.unsaid = Tally(self.unsaid.count + count, self.unsaid.example or example)
        now = self.clock()
        if self.said_at is not None and now - self.said_at < self.every:
            return None
        said, self.unsaid, self.said_at = self.unsaid, Tally(), now
        return said


def duration(seconds: float) -> str:
    """``65`` → ``1m05s``; ``1800`` → ``30m``; ``3700`` → ``1h01m``."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m" + (f"{whole % 60:02d}s" if whole % 60 else "")
    return f"{whole // 3600}h" + (f"{whole % 3600 // 60:02d}m" if whole % 3600 // 60 else "")
