"""The forecast: the demand a set saw at the same weekday and time of day in past weeks. Pure.

A set's history is its ``Gitscale-Set`` trailers: each scaling commit records queued and
running at the moment it was written, so demand is known only at commits. Between two commits
the level recorded by the first *holds* (a step series): no commit means the decision saw no
reason to write, and when demand rose it did write (a scale-up is a commit). So the series is
exact on the rise, which is what a forecast needs, and late on the fall (a completed job needs
no commit; the fall is recorded by the next write).

Sampling: a rise holds from its commit on (a rise is written within one pass: a scale-up is a
commit), and a fall is spread evenly between the two commits around it (jobs complete one by
one, and a completed job needs no commit, so the next commit is late). Read back against the
demand a simulated past day really had (``gitscale simulate --synthetic weekly``), the fall
read this way is within 3 jobs of it minute by minute: after the scale-down delay every pass
that sees a completion writes.

The window: the count a pass writes must serve the demand from when its runners are ready
(``lead`` ahead: the sync and a pod start) until the next pass can write again. So the forecast
is the highest level the past weeks saw in ``[now + lead, now + lead + window)`` — the same
weekday and wall-clock time in the policy's time zone (across a daylight-saving change the same
local time, so a 09:00 burst stays at 09:00) — and the ``quantile`` of those values over the
weeks the lookback covers, nearest rank (of two Mondays, 0.9 is the larger). ``window`` is the
time between passes (`run`'s ``--interval``, `simulate`'s), or ``DEFAULT_WINDOW`` for a caller
that does not know it.

Why so narrow, and why a lead of one minute: measured with ``gitscale simulate`` on a weekly
trace whose two past Mondays are exact copies of the day forecast (20 seeds), the window of the
decision interval (10 s) and a 1m lead give 1.00× the oracle's runner-minutes and a p95 wait of
4–5 s on all 20 (``benchmarks/forecast_seeds.py --days repeat``); wall-clock minutes and a 2m
lead (the first design) 1.16× and a p95 over 30 s on 6 of them. A longer lead or a wider window holds runners idle before the burst, and also stops
the count rising before the burst's last arrivals: the runners of jobs that finish meanwhile
leave slots that no write refills, and the last arrivals wait a pod start.
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo

DEFAULT_WINDOW = timedelta(minutes=1)  # the time between passes, when the caller cannot say
WEEK = timedelta(days=7)
MIN_LOOKBACK = WEEK  # one past week at least: fewer holds no weekday to learn from
MAX_LOOKBACK = timedelta(days=91)  # thirteen weeks: the series a process keeps stays bounded


@dataclass(frozen=True)
class ForecastPolicy:
    """``policy.forecast``: ``{lookback: 14d, quantile: 0.9, lead: 1m, timezone: …}``."""

    lookback: timedelta = timedelta(days=14)
    quantile: float = 0.9
    # a write's runners are ready a sync and a pod start later (10 s + 45 s at the outcome
    # targets' settings): the lead asks for them that far ahead, and no further
    lead: timedelta = timedelta(minutes=1)
    timezone: str | None = None  # IANA name; None: UTC

    @property
    def weeks(self) -> int:
        return self.lookback // WEEK

    def history_needed(self, now: datetime) -> datetime:
        """The oldest moment whose demand a forecast at ``now`` reads (``now + lead`` a
        lookback ago, or earlier): what a reader of the history must keep."""
        return now - self.lookback


@dataclass(frozen=True)
class Forecast:
    """What the history predicts for one set at one time. ``level`` None: not enough history
    (the decision is reactive, and ``detail`` says why)."""

    level: int | None
    detail: str


def forecast(times: Sequence[float], levels: Sequence[int], policy: ForecastPolicy,
             now: datetime, window: timedelta = DEFAULT_WINDOW) -> Forecast:
    """The forecast at ``now`` from a set's step series: ``times`` (POSIX seconds, ascending)
    and the demand ``levels`` (queued + running) recorded at them. ``window``: the time until
    the next pass can write again (the count written now must serve that long)."""
    zone = _zone(policy.timezone)
    at = (now + policy.lead).astimezone(zone)
    weeks = policy.weeks
    oldest = at - weeks * WEEK  # wall-clock arithmetic: the same local time that day
    if weeks == 0 or not times or times[0] > oldest.timestamp():
        held = 0.0 if not times else max(now.timestamp() - times[0], 0.0) / 86400
        return Forecast(None, f"forecast: {held:.1f}d of history, needs "
                        f"{_days(policy.lookback)}: reactive until then")
    samples = []
    span = window.total_seconds()
    for week in range(weeks, 0, -1):  # the oldest first
        first = (at - week * WEEK).timestamp()
        samples.append(peak(times, levels, first, first + span))
    level = quantile(samples, policy.quantile)
    when = f"{at:%H:%M:%S}–{at + window:%H:%M:%S}"
    zone_name = policy.timezone or "UTC"
    shown = ", ".join(str(s) for s in samples)
    return Forecast(level, f"forecast {level}: q{policy.quantile:g} of demand at {when} "
                    f"{zone_name} on the last {weeks} {at:%A}s ({shown}), "
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
