"""Where demand comes from. Every source answers one question per set: queued, running, jobs.

A pass reads each source once per group of sets (``demand/registry.py``) and gets a
``DemandReading``: a Demand per set it could read, and an error per set it could not. A set with
an error is left untouched by the pass (never scaled down on a guess).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Callable, Protocol, Sequence

from gitscale.clients.errors import RateLimited as RateLimited
from gitscale.core.model import Demand
from gitscale.errors import GitscaleError
from gitscale.streak import without_counts

if TYPE_CHECKING:
    from gitscale.config.load import RunnerSetConfig


class SourceError(GitscaleError):
    """An answer a source cannot use (not the shape it reads). ``str()`` names the URL and
    what went wrong. What the API itself refused or failed is the client's ``ApiError``
    (``gitscale.clients.errors``), and a rate limit its ``RateLimited``, re-exported here."""


REMIND = 1800.0  # seconds: a loop's warning of the same shape is said again this often


def warner(report: Callable[[str], None] | None,
           said: dict[str, tuple[float, float]] | None = None,
           clock: Callable[[], float] = time.monotonic) -> Callable[[str], None]:
    """How a source says a warning (what it counted otherwise than as read, such as runs an
    API would not list): through the loop's log (timestamped) in `run` and `serve`, straight
    to stderr in a CLI run. A loop says each warning once and then every ``REMIND`` seconds
    while it comes back (``said``: when each was last said and last seen, by its words with
    the numbers left out, kept by the loop's ``Sources``), not once a pass. One not seen for
    more than ``REMIND`` seconds has ended: back, it is said as new, not as lasting."""
    if report is not None:
        def say(message: str) -> None:
            if said is not None:
                shape, now = without_counts(message), clock()
                last, seen = said.get(shape, (None, None))
                if seen is not None and now - seen > REMIND:
                    last = None  # it ended (no pass saw it for that long): a new one
                if last is not None and now - last < REMIND:
                    said[shape] = (last, now)
                    return
                said[shape] = (now, now)
                message += (" (said again every 30 min while it lasts)" if last is None
                            else " (still, 30 min on)")
            report(f"warning: {message}")
        return say

    def echo(message: str) -> None:
        import click

        click.echo(f"warning: {message}", err=True)

    return echo


@dataclass
class DemandReading:
    demands: dict[str, Demand] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    retry_at: datetime | None = None  # a rate limit lifts then: the loop waits for it
    min_interval: float | None = None  # seconds; an API asked not to be polled faster

    def merge(self, other: "DemandReading") -> None:
        self.demands.update(other.demands)
        self.errors.update(other.errors)
        if other.retry_at and (self.retry_at is None or other.retry_at > self.retry_at):
            self.retry_at = other.retry_at
        if other.min_interval and (self.min_interval is None
                                   or other.min_interval > self.min_interval):
            self.min_interval = other.min_interval


class DemandSource(Protocol):
    """What a source's client factory (in the registry) returns: a reader of its sets."""

    def read(self, sets: Sequence[RunnerSetConfig]) -> DemandReading:
        """Demand for ``sets``, whose settings share one group key (one read serves them all):
        a Demand for each set found in what was read, an error for each set that was not.
        When nothing can be read (no answer, a refusal, a bad credential or file) it raises a
        ``GitscaleError`` naming the source (``RateLimited`` says when to try again), and
        ``read_demand`` gives every set of the group that error."""
        ...
