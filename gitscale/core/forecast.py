"""The forecast: the jobs a set saw *arrive* at the same weekday and time of day in past
weeks (or on every past workday, or every past day: ``days``), as runners kept ready ahead of
demand. Pure.

A set's history is its ``Gitscale-Set`` trailers: each scaling commit records queued and
running when it was written. A rise between two commits is jobs that arrived (a scale-up is a
commit, so a rise is written within one pass); a fall needs no commit. So the history is read
for its **rises**: the arrivals it shows, at the commits that showed them (a job that arrived
and finished between two commits is not seen; under a burst every pass writes).

**The cushion.** ``target = reactive target + cushion``. A job that finds no idle runner waits
for the next pass, the sync and a pod start: ``window + lead`` at most (``window``: the time
between passes; ``lead``: a write to a ready runner). For it to wait at most ``wait``, a runner
must already be idle for every job that arrives within ``reach = window + lead − wait`` of
another: the cushion is the most jobs the past weeks saw arrive within one ``reach``, from
a start in ``[now − jitter, now + lead + jitter]`` (the time of the pattern moves from week to
week), the ``quantile`` of those over the past days of the lookback (nearest rank; of two
Mondays, 0.9 is the larger). Which past days: by default the same weekday of each past week;
``days: workdays`` reads every past Monday–Friday (a pattern every workday has, learned from
five times the samples: a burst later or denser than both past Mondays was seen on some other
day), ``daily`` every past day. The span reaches one ``lead`` ahead so that a write's runners are ready
when the first of those jobs come, and starts at ``now`` so that a later write does not take
away the runners an earlier one made for jobs that have not come yet. The demand itself stays
reactive: the day's own jobs raise the count as they come, and the cushion keeps runners
ready for the next ones.

Why a cushion and not a level: the first design forecast the *demand* (queued + running) the
past weeks had, ``target = max(reactive, level)``. A level holds runners for the past weeks'
jobs for as long as those ran, whether or not today's come: on the weekly trace (a 09:00
burst of 100–140 jobs whose centre moves ±3 min a day, 20 seeds, ``benchmarks/
forecast_seeds.py``) it met p95 ≤ 30 s at ≤ 1.30× the oracle's runner-minutes on 5 seeds and
a holiday cost 1,318 runner-minutes; the cushion meets both on 16 and a holiday costs 256.
"""
from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Literal, get_args

# which past days hold the pattern of today: the same weekday of each past week, every past
# Monday–Friday on a workday (Saturday–Sunday on a weekend day), or every past day
Days = Literal["weekday", "workdays", "daily"]
DAYS: tuple[Days, ...] = get_args(Days)

DEFAULT_WINDOW = timedelta(minutes=1)  # the time between passes, when the caller cannot say
DAY = timedelta(days=1)
WEEK = timedelta(days=7)
# one past week at least, fewer holds no weekday (or no weekend) to learn from; a day for daily
MIN_LOOKBACK: dict[Days, timedelta] = {"weekday": WEEK, "workdays": WEEK, "daily": DAY}
MAX_LOOKBACK = timedelta(days=91)  # thirteen weeks: the series a process keeps stays bounded


@dataclass(frozen=True)
class ForecastPolicy:
    """``policy.forecast``: ``{lookback: 14d, quantile: 0.9, lead: 1m, jitter: 2m, wait: 30s,
    timezone: …}``."""

    lookback: timedelta = timedelta(days=14)
    quantile: float = 0.9
    # a write's runners are ready a sync and a pod start later (10 s + 45 s at the outcome
    # targets' settings): the cushion is asked for that far ahead
    lead: timedelta = timedelta(minutes=1)
    # how far the pattern's time moves from one week to the next (±): the cushion is held
    # that much earlier and later than the past weeks had their jobs
    jitter: timedelta = timedelta(minutes=2)
    # the wait the cushion aims for: a job may wait this long for a write's runner
    wait: timedelta = timedelta(seconds=30)
    timezone: str | None = None  # IANA name; None: UTC
    days: Days = "weekday"

    def past_days(self, at: datetime) -> list[datetime]:
        """The same local time as ``at`` on each past day the pattern is read from, within
        the lookback, the oldest first (wall-clock arithmetic: across a daylight-saving change
        the same wall time)."""
        if self.days == "weekday":
            return [at - week * WEEK for week in range(self.lookback // WEEK, 0, -1)]
        days = [at - day * DAY for day in range(self.lookback // DAY, 0, -1)]
        if self.days == "workdays":
            return [day for day in days if _workday(day) == _workday(at)]
        return days

    def history_needed(self, now: datetime) -> datetime:
        """The oldest moment whose commits a forecast at ``now`` reads (or earlier): what a
        reader of the history must keep. The stretches sit on the past weeks' wall clock, so
        an hour more: across a change to winter time the same wall time was an hour earlier."""
        return now - self.lookback - self.jitter - timedelta(hours=1)

    def reach(self, window: timedelta) -> timedelta:
        """How close together arrivals must come to need a runner each that is already up:
        a job without one waits up to ``window + lead``, and may wait ``wait``."""
        return window + self.lead - self.wait


@dataclass(frozen=True)
class Forecast:
    """What the history predicts for one set at one time: ``extra`` runners on top of the
    reactive target (None: not enough history, the decision is reactive; ``detail`` says
    why)."""

    extra: int | None
    detail: str


def forecast(times: Sequence[float], levels: Sequence[int], policy: ForecastPolicy,
             now: datetime, window: timedelta = DEFAULT_WINDOW) -> Forecast:
    """The forecast at ``now`` from a set's series: ``times`` (POSIX seconds, ascending) and
    the demand ``levels`` (queued + running) recorded at them. ``window``: the time until the
    next pass can write again."""
    zone = _zone(policy.timezone)
    at = (now + policy.lead).astimezone(zone)
    past = policy.past_days(at)
    if not past or not times or times[0] > past[0].timestamp():
        needs = f"needs {_days(policy.lookback)}: reactive until then"
        if not times:
            # (gitscale commits a change only: a set quiet for that long has none either)
            return Forecast(None, "forecast: no scaling commit of this set in the history read "
                            "(a new set, one that has not scaled in that time, or a renamed "
                            "one: its commits name the old name, which `previousNames: [OLD]` "
                            f"on the set makes its own), {needs}")
        held = max(now.timestamp() - times[0], 0.0) / 86400
        return Forecast(None, f"forecast: {held:.1f}d of history, {needs}")
    reach = policy.reach(window).total_seconds()
    if reach <= 0:
        return Forecast(0, f"forecast: none needed, a write's runners come within "
                        f"wait {_short(policy.wait)}")
    jitter, lead = policy.jitter.total_seconds(), policy.lead.total_seconds()
    samples = []
    for day in past:  # the same local time that day, one lead from now
        ahead = day.timestamp()
        samples.append(arrivals(times, levels, ahead - lead - jitter, ahead + jitter, reach))
    extra = quantile(samples, policy.quantile)
    first, last = at - policy.lead - policy.jitter, at + policy.jitter
    clock = "%H:%M" if first.second == last.second == 0 else "%H:%M:%S"
    shown = ", ".join(str(s) for s in samples)
    days = _named(policy.days, at, len(past))
    return Forecast(extra, f"forecast +{extra}: q{policy.quantile:g} of the jobs that "
                    f"arrived within {_short(timedelta(seconds=reach))}, from "
                    f"{first:{clock}}–{last:{clock}} {policy.timezone or 'UTC'}, on the {days} "
                    f"({shown})")


def arrivals(times: Sequence[float], levels: Sequence[int], first: float, last: float,
             reach: float) -> int:
    """The most jobs that arrived (the rises of the level, at the commits that show them)
    within ``reach`` seconds of each other, the earliest at ``first``…``last``."""
    start = max(bisect_left(times, first), 1)  # the first commit shows no rise
    end = bisect_left(times, last + reach)
    best = total = 0
    tail = start
    for i in range(start, end):
        total += max(levels[i] - levels[i - 1], 0)
        while times[i] - times[tail] >= reach:
            total -= max(levels[tail] - levels[tail - 1], 0)
            tail += 1
        best = max(best, total)  # (a stretch from min(times[tail], last) holds them)
    return best


def quantile(values: Sequence[int], q: float) -> int:
    """Nearest rank: the smallest value at least ``q`` of the values are ≤ to."""
    ordered = sorted(values)
    rank = max(1, math.ceil(round(q * len(ordered), 9)))
    return ordered[min(rank, len(ordered)) - 1]


def _workday(day: datetime) -> bool:
    return day.weekday() < 5


def _named(days: Days, at: datetime, count: int) -> str:
    """``last 2 Mondays``, ``last 10 workdays``, ``last 4 weekend days``, ``last 14 days``."""
    if days == "weekday":
        return f"last {count} {at:%A}s" if count > 1 else f"last {at:%A}"
    kind = {"daily": "day", "workdays": "workday" if _workday(at) else "weekend day"}[days]
    return f"last {count} {kind}s" if count > 1 else f"last {kind}"


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
