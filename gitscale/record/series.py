"""Each set's demand over time, from the ``Gitscale-Set`` trailers: what a forecast learns from.

Read once per process, then incrementally: ``DemandSeries.update`` asks git only for the
commits newer than the last one it read (``git log LAST..HEAD``), and nothing at all when HEAD
has not moved. `run` and `serve` keep the series in memory; a CLI run keeps it in the state
cache (``gitscale.plan.cache``), keyed by that last commit, so a cron job reads only the
commits since its last run. The first read walks back only as far as the forecasts need (the
lookback, a bin and a week more, for the level that held when the window opens).

A clone of a URL has one commit (a pass needs no more); the reader deepens it to the time it
needs (``git fetch --shallow-since``), the commits and their trees only as the clone already
fetches them. A history rewritten under the reader (a force push: the last commit read is no
longer an ancestor of HEAD) is read again whole, and so is a shallow checkout's once more of
its history is fetched (its first read stopped at the cut: ``since`` says so).
"""
from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from gitscale.repo.git import Git, filters_by_date
from gitscale.timeutil import format_time

MARGIN = timedelta(days=7)  # read this far before the window: the level that held as it opened
SKEW = timedelta(hours=1)  # commit dates a little out of order still read when deepening

# (head, head time, read since, {set: (times, levels)}): plain data for the state cache
State = tuple["str | None", float, float, dict[str, tuple[list[float], list[int]]]]


@dataclass
class DemandSeries:
    """Per set, the demand (queued + running) at each scaling commit, oldest first."""

    head: str | None = None  # the newest commit read
    head_time: float = 0.0  # its committer time (POSIX seconds)
    # commits from this time on have been read: the time needed, or a shallow repo's cut
    since: float = float("inf")
    sets: dict[str, tuple[list[float], list[int]]] = field(default_factory=dict)
    logs: int = 0  # `git log` runs so far (the tests count them)

    def of(self, name: str, *previous: str) -> tuple[Sequence[float], Sequence[int]]:
        """(times, levels) of one set; empty when it has no scaling commit read. With the
        names it had before a rename (``previousNames``), their commits are its own too:
        one series, in time order. (Every name's commits are read and kept, whatever the
        config says, so a name added to ``previousNames`` needs no read of git.)"""
        found = [self.sets[n] for n in (name, *previous) if n in self.sets]
        if len(found) <= 1:
            return found[0] if found else ([], [])
        return joined(found)

    def update(self, git: Git, needed: datetime,
               deepen: Callable[[datetime], None] | None = None) -> bool:
        """Read what is new since the last update, back to ``needed`` at least. ``deepen``
        (a shallow clone) fetches the commits from a time on. True when git was asked."""
        head, _, seconds = git.out("show", "-s", "--format=%H %ct", "HEAD").partition(" ")
        want = needed.timestamp() - MARGIN.total_seconds()
        # (a clone of a URL is gitscale's own, one commit deep until deepened: its cut says
        # nothing of what was read, and it is deepened to what is needed)
        held = self.since <= want or (self.head is not None and deepen is None
                                      and self._still_cut(git))
        if head == self.head and held:
            return False
        if self.head is not None and held and self._reaches(git, head, deepen):
            self._read(git, f"{self.head}..{head}", None)
        else:
            self.sets = {}
            if deepen is not None:
                deepen(datetime.fromtimestamp(want, timezone.utc))
            self._read(git, head, want)
            # a shallow checkout's history stops at its cut: what is before it was not read
            # (a clone was deepened to ``want``: its cut is the oldest commit after it)
            cut = git.shallow_cut() if deepen is None else None
            self.since = want if cut is None else max(want, cut)
        self.head, self.head_time = head, float(seconds or 0)
        self.trim(want)
        return True

    def _still_cut(self, git: Git) -> bool:
        """The last whole read stopped at a shallow repo's cut after the time it needed: is
        the history still cut there? Once the rest is fetched (``git fetch --unshallow``),
        it is read again whole, not only the commits after the last one read."""
        cut = git.shallow_cut()
        return cut is not None and cut >= self.since

    def _reaches(self, git: Git, head: str, deepen: Callable[[datetime], None] | None) -> bool:
        """Is the last commit read an ancestor of ``head`` in this clone (after deepening a
        shallow one to its time)?"""
        assert self.head is not None
        if git.is_ancestor(self.head, head):
            return True
        if deepen is None:
            return False
        deepen(datetime.fromtimestamp(self.head_time - SKEW.total_seconds(), timezone.utc))
        return git.is_ancestor(self.head, head)

    def _read(self, git: Git, revisions: str, since: float | None) -> None:
        # imported here: the history reader (its regexes, its table of 3,600 times) is for
        # forecast sets only, and a pass with none never reads a commit
        from gitscale.record.history import LOG_ARGS, parse_record

        args = [*LOG_ARGS, revisions]
        # Not --since: it stops the walk at the first commit older than the date, so one
        # commit made with a clock in the past hid the whole history behind it. git's filter
        # (2.38+) looks at every commit; an older git gives them all, filtered here.
        if since is not None and filters_by_date():
            date = format_time(datetime.fromtimestamp(since, timezone.utc))
            args.insert(1, f"--since-as-filter={date}")
        oldest = float("-inf") if since is None else since
        self.logs += 1
        found: dict[str, list[tuple[float, int]]] = {}
        for record in git.records(*args, separator="\x1e"):
            fields = record.strip("\n").split("\x1f", 2)
            if len(fields) != 3 or float(fields[1]) < oldest:
                continue
            when = float(fields[1])
            for entry in parse_record(record, details=False):
                if entry.queued is not None and entry.running is not None:
                    found.setdefault(entry.set, []).append((when, entry.queued + entry.running))
        for name, points in found.items():
            points.reverse()  # git log gives the newest first
            points.sort(key=lambda p: p[0])  # (stable: commits of one second keep their order)
            times, levels = self.sets.setdefault(name, ([], []))
            for when, level in points:
                add(times, levels, when, level)

    def trim(self, since: float) -> None:
        """Forget what is older than ``since``, but the last level before it (it held then).
        What is held then starts there: a later pass that needs more (a pass before it, whose
        clock is behind a `plan --now` days ahead or a host's clock that ran ahead, sharing
        the state cache) reads the history again whole, not a series that stops short."""
        self.since = max(self.since, since)
        for times, levels in self.sets.values():
            cut = bisect_left(times, since) - 1
            if cut > 0:
                del times[:cut]
                del levels[:cut]

    def state(self) -> State:
        return (self.head, self.head_time, self.since, self.sets)

    @classmethod
    def from_state(cls, state: object) -> "DemandSeries":
        """A series from the state cache; an empty one when the state is not one."""
        if not (isinstance(state, tuple) and len(state) == 4
                and isinstance(state[3], dict)):
            return cls()
        head, head_time, since, sets = state
        if not all(type(points) is tuple and len(points) == 2 and type(points[0]) is list
                   and type(points[1]) is list and len(points[0]) == len(points[1])
                   for points in sets.values()):
            return cls()  # read from git again
        return cls(head if isinstance(head, str) else None, float(head_time), float(since),
                   sets)


def joined(series: Sequence[tuple[Sequence[float], Sequence[int]]]
           ) -> tuple[list[float], list[int]]:
    """Several names' series as one, in time order. Within one second the later name in
    ``series`` comes first (``previousNames`` after the name: a rename's older name before
    the commits of the name it took), each name's own order kept."""
    spans = sorted(((times[0], times[-1], -rank) for rank, (times, _) in enumerate(series)
                    if times))
    if all(earlier[1] < later[0] for earlier, later in zip(spans, spans[1:])):
        # a rename: one name's commits end before the next one's begin (nearly always)
        times_out: list[float] = []
        levels_out: list[int] = []
        for _, _, rank in spans:
            times_out += series[-rank][0]
            levels_out += series[-rank][1]
        return times_out, levels_out
    points = sorted((when, -rank, index) for rank, (times, _) in enumerate(series)
                    for index, when in enumerate(times))
    return ([when for when, _, _ in points],
            [series[-negated][1][index] for _, negated, index in points])


def add(times: list[float], levels: list[int], when: float, level: int) -> None:
    """Insert one commit's level in time order (git log gives the newest first)."""
    if not times or when >= times[-1]:
        times.append(when)
        levels.append(level)
        return
    at = bisect_left(times, when)
    insort(times, when)
    levels.insert(at, level)
