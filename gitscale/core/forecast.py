"""The forecast: the demand a set saw at the same weekday and time of day in past weeks. Pure.

A set's history is its ``Gitscale-Set`` trailers: each scaling commit records queued and
running at the moment it was written, so demand is known only at commits. Between two commits
the level recorded by the first *holds* (a step series): no commit means the decision saw no
reason to write, and when demand rose it did write (a scale-up is a commit). So the series is
exact on the rise, which is what a forecast needs, and late on the fall (a completed job needs
no commit; the fall is recorded by the next write).

Sampling: the day is cut into bins of ``BIN`` (one minute) of wall-clock time in the policy's
time zone. The value of a bin on a past day is the highest level in it: the level at the bin's
start and each commit inside it, where a rise holds from its commit on (a rise is written
within one pass: a scale-up is a commit) and a fall is spread evenly between the two commits
around it (jobs complete one by one, and a completed job needs no commit, so the next commit
is late). For the time ``now + lead`` the forecast takes the bin it falls in on each of the
past weeks the lookback covers (the same weekday; across a daylight-saving change the same
wall-clock time, so a 09:00 burst stays at 09:00), and the ``quantile`` of those values,
nearest rank (of two Mondays, 0.9 is the larger).

Why one minute: it is about what a pass can act on (decisions every 10–30 s, a pod start of
~45 s), so the target follows the shape of past bursts; each minute more of a bin holds the
burst's runners idle that much longer before it. Measured with ``gitscale simulate
--synthetic weekly`` (seed 1, day 15): 5-minute bins cost 2.0× the oracle's runner-minutes,
2-minute bins 1.5×, 1-minute bins 1.37×, at the same p95 wait. A burst that comes earlier
than on every past week is served reactively for the difference; ``quantile`` and ``lead``
trade that against idle runners.
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo

BIN = timedelta(minutes=1)
WEEK = timedelta(days=7)
MIN_LOOKBACK = WEEK  # one past week at least: fewer holds no weekday to learn from
MAX_LOOKBACK = timedelta(days=91)  # thirteen weeks: the series a process keeps stays bounded


@dataclass(frozen=True)
class ForecastPolicy:
    """``policy.forecast``: ``{lookback: 14d, quantile: 0.9, lead: 2m, timezone: …}``."""

    lookback: timedelta = timedelta(days=14)
    quantile: float = 0.9
    lead: timedelta = timedelta(minutes=2)
    timezone: str | None = None  # IANA name; None: UTC

    @property
    def weeks(self) -> int:
        return self.lookback // WEEK

    def history_needed(self, now: datetime) -> datetime:
        """The oldest moment whose demand a forecast at ``now`` reads (with a bin's margin):
        what a reader of the history must keep."""
        return now - self.lookback - BIN


@dataclass(frozen=True)
class Forecast:
    """What the history predicts for one set at one time. ``level`` None: not enough history
    (the decision is reactive, and ``detail`` says why)."""

    level: int | None
    detail: str


def forecast(times: Sequence[float], levels: Sequence[int], policy: ForecastPolicy,
             now: datetime) -> Forecast:
    """The forecast at ``now`` from a set's step series: ``times`` (POSIX seconds, ascending)
    and the demand ``levels`` (queued + running) recorded at them."""
    zone = _zone(policy.timezone)
    at = (now + policy.lead).astimezone(zone)
    start = at.replace(second=0, microsecond=0)  # the bin (a minute) ``now + lead`` is in
    weeks = policy.weeks
    oldest = start - weeks * WEEK  # wall-clock arithmetic: the same local time that day
    if weeks == 0 or not times or times[0] > oldest.timestamp():
        held = 0.0 if not times else max(now.timestamp() - times[0], 0.0) / 86400
        return Forecast(None, f"forecast: {held:.1f}d of history, needs "
                        f"{_days(policy.lookback)}: reactive until then")
    samples = []
    for week in range(weeks, 0, -1):  # the oldest first
        first = start - week * WEEK
        samples.append(peak(times, levels, first.timestamp(), (first + BIN).timestamp()))
    level = quantile(samples, policy.quantile)
    when = f"{start:%H:%M}"
    zone_name = policy.timezone or "UTC"
    shown = ", ".join(str(s) for s in samples)
    return Forecast(level, f"forecast {level}: q{policy.quantile:g} of demand at {when} "
                    f"{zone_name} on the last {weeks} {start:%A}s ({shown}), "
                    f"{_short(policy.lead)} ahead")


def peak(times: Sequence[float], levels: Sequence[int], start: float, end: float) -> int:
    """The highest level during [start, end): a rise holds from its commit on, a fall is
    spread evenly between the two commits around it (``level_at``)."""
    first = bisect_right(times, start)
    last = bisect_left(times, end)
    high = level_at(times, levels, start, first)
    if first < last:
        high = max(high, max(levels[first:last]))
    return high


def level_at(times: Sequence[float], levels: Sequence[int], at: float,
             after: int | None = None) -> int:
    """The level at ``at``; ``after``: the index of the first commit later than ``at``."""
    if after is None:
        after = bisect_right(times, at)
    if after == 0:
        return 0
    before = levels[after - 1]
    if after == len(times) or levels[after] >= before:
        return before
    # a fall between two commits: jobs completed one by one in between
    span = times[after] - times[after - 1]
    share = (at - times[after - 1]) / span if span > 0 else 1.0
    return math.ceil(before - (before - levels[after]) * share)


def quantile(values: Sequence[int], q: float) -> int:
    """Nearest rank: the smallest value at least ``q`` of the values are ≤ to."""
    ordered = sorted(values)
    rank = max(1, math.ceil(round(q * len(ordered), 9)))
    return ordered[min(rank, len(ordered)) - 1]


def _zone(name: str | None) -> tzinfo:
    if name is None:
        return timezone.utc
    from zoneinfo import ZoneInfo  # (imported by the policies that name a zone)

    return ZoneInfo(name)


def _days(value: timedelta) -> str:
    return f"{value / timedelta(days=1):g}d"


def _short(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    if seconds % 60:
        return f"{seconds}s"
    return f"{seconds // 60}m"
