"""The chart's axes: time ticks a person can read a time off, and a whole-number value axis.

Imported only by :mod:`gitscale.charts.render` once matplotlib is known to be installed.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any, Sequence

from matplotlib import dates as mdates  # its locators are not annotated: no-untyped-call below
from matplotlib.axes import Axes
from matplotlib.ticker import Formatter, Locator, MaxNLocator

MAX_TICKS = 10
# (major, minor) tick steps in minutes, fine to coarse: the first that gives at most MAX_TICKS
# labels wins. The minor gridlines fall on round times (09:05), so a time can be read off.
_STEPS = [(1, None), (2, 1), (5, 1), (10, 5), (15, 5), (30, 10), (60, 15), (120, 30),
          (180, 60), (360, 60), (720, 180), (1440, 360), (2880, 1440), (10080, 1440)]


def _locator(minutes: int, tz: tzinfo) -> Locator:
    made: Locator
    if minutes < 60:
        every = range(0, 60, minutes)
        made = mdates.MinuteLocator(byminute=every, tz=tz)  # type: ignore[no-untyped-call]
    elif minutes < 1440:
        hours = range(0, 24, minutes // 60)
        made = mdates.HourLocator(byhour=hours, tz=tz)  # type: ignore[no-untyped-call]
    elif minutes == 10080:
        made = mdates.WeekdayLocator(byweekday=mdates.MO, tz=tz)  # type: ignore[no-untyped-call]
    else:
        made = mdates.DayLocator(interval=minutes // 1440, tz=tz)  # type: ignore[no-untyped-call]
    return made


class TimeFormatter(Formatter):
    """``09:15`` under every tick; the date under the first tick and wherever the date changes."""

    def __init__(self, tz: tzinfo) -> None:
        self.tz = tz

    def __call__(self, x: float, pos: int | None = None) -> str:
        return self.format_ticks([x])[0]

    def format_ticks(self, values: Sequence[float]) -> list[str]:
        times = [mdates.num2date(v, tz=self.tz) for v in values]  # type: ignore[no-untyped-call]
        steps = [b - a for a, b in zip(times, times[1:])]
        daily = all(t.hour == t.minute == 0 for t in times) and min(steps, default=timedelta(
            days=1)) >= timedelta(days=1)
        clock = "%H:%M:%S" if any(t.second for t in times) else "%H:%M"
        labels, previous = [], None
        for t in times:
            day = t.strftime("%a %d %b" if previous and previous.year == t.year else "%a %d %b %Y")
            if daily:
                labels.append(day)
            elif previous is None or previous.date() != t.date():
                labels.append(f"{t.strftime(clock)}\n{day}")
            else:
                labels.append(t.strftime(clock))
            previous = t
        return labels


def time_axis(ax: Axes, lo: datetime, hi: datetime, tz: tzinfo) -> None:
    """Ticks and gridlines for the window [lo, hi]; every panel shares this axis."""
    span = (hi - lo).total_seconds() / 60
    for major, minor in _STEPS:
        if span / major <= MAX_TICKS:
            ax.xaxis.set_major_locator(_locator(major, tz))
            if minor is not None:
                ax.xaxis.set_minor_locator(_locator(minor, tz))
            break
    else:
        auto = mdates.AutoDateLocator(tz=tz, maxticks=MAX_TICKS)  # type: ignore[no-untyped-call]
        ax.xaxis.set_major_locator(auto)
    ax.xaxis.set_major_formatter(TimeFormatter(tz))
    ax.set_xlim(lo, hi)  # type: ignore[arg-type]
    ax.grid(True, which="major", axis="both", color="#d0d0d0", linewidth=0.8)
    ax.grid(True, which="minor", axis="x", color="#ececec", linewidth=0.6)


def value_axis(ax: Axes, top: float, label: str) -> None:
    """Whole-number ticks from 0 with some headroom above the highest visible value."""
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=6, min_n_ticks=2))
    ax.set_ylim(0, max(top * 1.15 + 0.2, 2.5))
    ax.set_ylabel(label)


def zone_name(tz: tzinfo, at: datetime) -> str:
    """What the time axis label calls the zone: ``UTC``, ``Europe/Berlin`` or ``CET``."""
    if tz is timezone.utc:
        return "UTC"
    key: Any = getattr(tz, "key", None)  # zoneinfo.ZoneInfo
    return str(key) if key else at.astimezone(tz).tzname() or at.astimezone(tz).strftime("%z")
