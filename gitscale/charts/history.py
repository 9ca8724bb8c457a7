"""`history --chart`: the scaling history as chart panels, and the time window worth drawing.

Pure: entries in, panels and a window out (matplotlib is only touched by :mod:`gitscale.charts.render`).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from typing import Sequence

from gitscale.charts.render import Panel, Series
from gitscale.record.history import Entry, oldest_first

TITLE = "Runner sets: replicas and demand"
QUIET_SHARE = 4   # a gap longer than 1/4 of the whole span splits the commits into stretches
NARROW_SHARE = 3  # zoom when the busiest stretch spans less than 1/3 of the whole span


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime
    note: str | None  # says so when the window hides commits the user did not ask to hide


def _label(name: str) -> str:
    """A set's name as a chart's title shows it: it comes from commit messages, which anyone
    can write: a control character as its escape (``\\x1b``: the font has no glyph for it,
    and a terminal would act on it in the warning that says so), a ``$`` kept as text (not
    the start of matplotlib's math)."""
    if not name.isprintable():
        name = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                       for c in name)
    return name.replace("$", r"\$")


def history_panels(entries: Sequence[Entry]) -> list[Panel]:
    """One panel per set (in name order): replicas, demand (queued + running), running jobs.
    ``entries`` in git's order, newest first (``read_history``)."""
    panels = []
    ordered = oldest_first(entries)
    for name in sorted({e.set for e in entries}):
        mine = [e for e in ordered if e.set == name]
        times = [e.when for e in mine]
        nan = float("nan")
        demand = [nan if e.queued is None or e.running is None else float(e.queued + e.running)
                  for e in mine]
        running = [nan if e.running is None else float(e.running) for e in mine]
        commits = f"{len(mine)} scaling commit{'s' if len(mine) != 1 else ''}"
        panels.append(Panel(f"{_label(name)}  ({commits})", [
            Series("replicas (runners)", times, [float(e.replicas) for e in mine]),
            Series("demand (queued + running jobs)", times, demand, style="dashed"),
            Series("running jobs", times, running, style="area"),
        ], ylabel="runners / jobs"))
    return panels


def busiest_stretch(times: Sequence[datetime]) -> tuple[datetime, datetime] | None:
    """The first and last time of the stretch of commits worth the chart's width, or None when
    drawing every commit is readable.

    Commits separated by a quiet gap longer than a quarter of the whole span fall into different
    stretches; the one holding the most commits (the later one on a tie), if it spans less than a
    third of the whole, is the stretch: fourteen quiet hours then do not squash a busy morning
    into a smear at the right edge.
    """
    ordered = sorted(times)
    if len(ordered) < 3 or ordered[0] == ordered[-1]:
        return None
    span = ordered[-1] - ordered[0]
    stretches: list[list[datetime]] = [[ordered[0]]]
    for previous, current in zip(ordered, ordered[1:]):
        if current - previous > span / QUIET_SHARE:
            stretches.append([])
        stretches[-1].append(current)
    best = max(reversed(stretches), key=len)
    if len(stretches) == 1 or len(best) < 2 or (best[-1] - best[0]) * NARROW_SHARE > span:
        return None
    return best[0], best[-1]


def choose_window(entries: Sequence[Entry], since: datetime | None, until: datetime | None,
                  tz: tzinfo) -> Window:
    """--since/--until when given; otherwise every commit, or the busiest stretch with a note
    saying how many commits it shows."""
    times = sorted(e.when for e in entries)
    if not times:
        raise ValueError("a history chart needs at least one entry")
    first, last = times[0], times[-1]
    if since is not None or until is not None:
        lo = since if since is not None else min(first, until or first) - _pad(first, last)
        hi = until if until is not None else max(last, lo) + _pad(first, last)
        return Window(lo, hi, None)
    stretch = busiest_stretch(times)
    if stretch is None:
        return Window(first - _pad(first, last), last + _pad(first, last), None)
    lo, hi = stretch
    start, end = lo - _pad(lo, hi), hi + _pad(lo, hi)
    if start <= first and last <= end:
        # the room around the stretch holds every commit (two passes a second apart): drawn
        # whole, with no note claiming that some are hidden
        return Window(first - _pad(first, last), last + _pad(first, last), None)
    shown = {e.commit for e in entries if start <= e.when <= end}
    local_lo, local_hi = lo.astimezone(tz), hi.astimezone(tz)
    clock = "%H:%M" if local_lo.date() == local_hi.date() else "%d %b %H:%M"
    note = (f"zoomed on the busiest stretch, {local_lo.strftime(clock)}–"
            f"{local_hi.strftime(clock)}: {len(shown)} of {len({e.commit for e in entries})} "
            "commits (--since/--until choose the window)")
    return Window(start, end, note)


def _pad(first: datetime, last: datetime) -> timedelta:
    """Room on either side of the commits: 5 % of their span, at least five minutes."""
    return max((last - first) / 20, timedelta(minutes=5))
