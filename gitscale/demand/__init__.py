"""Where demand comes from. Every source answers one question per set: queued, running, jobs.

A source returns a ``DemandReading``: a Demand per set it could read, and an error per set it
could not. A set with an error is left untouched by the pass (never scaled down on a guess).
The GitHub and Buildkite sources plug in behind the same ``DemandSource`` protocol.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, Sequence

from gitscale.config import RunnerSetConfig
from gitscale.core.model import Demand


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
    def read(self, sets: Sequence[RunnerSetConfig]) -> DemandReading:
        """Demand for each of ``sets``; an error (not an exception) for a set it cannot read."""
        ...
