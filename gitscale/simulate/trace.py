"""Job traces: a CSV file, a seeded synthetic shape, or the config repo's own history.

A trace is a list of jobs, each with an arrival time, a duration and the runner set it runs on.
Times are seconds from the trace's start; the start is a real time so that scheduled policies
(business hours) see the clock they would see live.
"""
from __future__ import annotations

import csv
import math
import random
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from gitscale.errors import InputError
from gitscale.timeutil import parse_duration, parse_time

SHAPES = ("steady", "spiky", "burst", "weekly")
DEFAULT_START = datetime(2026, 1, 5, 8, 0, tzinfo=timezone.utc)  # a Monday, 08:00 UTC
WEEKLY_START = datetime(2026, 1, 5, tzinfo=timezone.utc)  # the weekly shape: Monday 00:00 UTC
WEEKLY_HOURS = 15 * 24.0  # two weeks to learn from, and the Monday after
MAX_TRACE_BYTES = 64 * 1024 * 1024
MAX_DURATION = 7 * 24 * 3600.0
# A replay steps through the whole span, one decision interval at a time (a year at 10 s: 47 s
# of CPU and 640 MB, baselines included): a trace spanning a century was a hang, not an error.
MAX_SPAN_DAYS = 366


class TraceError(InputError):
    """A trace file cannot be used: names the file and line."""


@dataclass(frozen=True)
class Job:
    id: int
    set: str
    arrival: float  # seconds from the trace start
    duration: float  # seconds on its runner


@dataclass(frozen=True)
class Trace:
    name: str
    start: datetime
    jobs: tuple[Job, ...]
    hours: float  # the span the trace describes (arrivals fall inside it)

    @property
    def sets(self) -> list[str]:
        return sorted({job.set for job in self.jobs})

    def time(self, seconds: float) -> datetime:
        return self.start + timedelta(seconds=seconds)


def load_csv(path: Path, default_set: str, known_sets: Sequence[str] | None = None) -> Trace:
    """``arrival,duration[,set]`` per line; a header line and ``#`` comments are allowed.

    ``arrival`` is RFC 3339 (the earliest is the trace's start) or seconds from the trace's
    start; ``duration`` is seconds or a duration such as ``90s``/``5m``. A missing set column
    means ``default_set``. The header, if any, is the first line that is not a comment.
    """
    name = str(path)
    try:
        if not path.exists():
            raise TraceError(name, "no such file")
        if not path.is_file():
            raise TraceError(name, "not a regular file")
        if path.stat().st_size > MAX_TRACE_BYTES:
            raise TraceError(name, f"larger than {MAX_TRACE_BYTES // 2**20} MiB")
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise TraceError(name, f"cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise TraceError(name, "is not UTF-8 text") from None
    rows: list[tuple[int, datetime | float, float, str]] = []
    header_allowed = True
    # Line by line, so that a quote in a comment cannot swallow the lines after it and every
    # error names the line it is on.
    for number, line in enumerate(text.splitlines(), start=1):
        cells = [cell.strip() for cell in next(csv.reader([line]), [])]
        if not cells or not any(cells) or cells[0].startswith("#"):
            continue
        if header_allowed and cells[0].lower() == "arrival":
            header_allowed = False
            continue
        header_allowed = False
        if len(cells) not in (2, 3):
            raise TraceError(name, f"expected arrival,duration[,set], got {len(cells)} fields",
                             number)
        arrival = _arrival(cells[0], name, number)
        duration = _duration(cells[1], name, number)
        set_name = cells[2] if len(cells) == 3 and cells[2] else default_set
        if known_sets is not None and set_name not in known_sets:
            raise TraceError(name, f"unknown runner set {set_name!r} (known: "
                             f"{', '.join(known_sets) or 'none'})", number)
        if rows and isinstance(arrival, datetime) != isinstance(rows[0][1], datetime):
            raise TraceError(name, f"mixes RFC 3339 arrivals and arrivals in seconds (line "
                             f"{rows[0][0]} has the other kind)", number)
        rows.append((number, arrival, duration, set_name))
    if not rows:
        raise TraceError(name, "holds no jobs")
    if isinstance(rows[0][1], datetime):
        start = min(arrival for _, arrival, _, _ in rows if isinstance(arrival, datetime))
        offsets = [((a - start).total_seconds() if isinstance(a, datetime) else 0.0)
                   for _, a, _, _ in rows]
    else:
        start = DEFAULT_START
        offsets = [float(a) for _, a, _, _ in rows if not isinstance(a, datetime)]
    latest = max(range(len(rows)), key=lambda i: offsets[i])
    if offsets[latest] > MAX_SPAN_DAYS * 86400:  # (from the trace's start: offsets are ≥ 0)
        raise TraceError(name, f"its jobs span {_days(offsets[latest])} (this "
                         f"line's arrival is the latest); a replay covers at most "
                         f"{MAX_SPAN_DAYS} days: split the trace", rows[latest][0])
    jobs = sorted((Job(i, s, off, d) for i, ((_, _, d, s), off) in enumerate(zip(rows, offsets))),
                  key=lambda j: (j.arrival, j.id))
    # At least 0.1 h (as for a trace from history), so per-hour rates of a tiny trace stay sane.
    return Trace(path.name, start, tuple(jobs), max(max(j.arrival for j in jobs) / 3600, 0.1))


def only(trace: Trace, sets: set[str], source: str) -> Trace:
    """The trace's jobs of ``sets`` only; refused (naming ``source``) when none is left."""
    jobs = tuple(job for job in trace.jobs if job.set in sets)
    if not jobs:
        raise TraceError(source, f"holds no jobs of {', '.join(sorted(sets))}")
    return Trace(trace.name, trace.start, jobs, trace.hours)


def _arrival(cell: str, name: str, line: int) -> datetime | float:
    try:
        return float(cell) if _numeric(cell) else parse_time(cell)
    except ValueError as exc:
        raise TraceError(name, f"arrival: {exc}", line) from None


def _duration(cell: str, name: str, line: int) -> float:
    try:
        value = float(cell) if _numeric(cell) else parse_duration(cell).total_seconds()
    except ValueError as exc:
        raise TraceError(name, f"duration: {exc}", line) from None
    if not math.isfinite(value) or value <= 0:
        raise TraceError(name, f"duration must be positive, got {cell!r}", line)
    if value > MAX_DURATION:
        raise TraceError(name, f"duration {cell!r} is longer than a week", line)
    return value


def _numeric(cell: str) -> bool:
    try:
        value = float(cell)
    except ValueError:
        return False
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{cell!r} is not a time in seconds (finite, not negative)")
    return True


def synthetic(shape: str, *, seed: int, hours: float, sets: Sequence[str],
              start: datetime | None = None) -> Trace:
    """Seeded job traces of three shapes, per set (the same shape, an independent stream each).

    - steady: Poisson arrivals, 1.5 jobs a minute; durations log-normal, median 6 min;
    - spiky: 1 job a minute, plus every 15–45 min a spike of 15–40 jobs within a minute;
      median 4 min;
    - burst: 0.5 jobs a minute, plus a morning burst of 120 jobs in 5 minutes one hour in
      (09:00 with the default start); median 6 min.
    - weekly: from Monday 00:00 UTC, each weekday a burst of 100–140 jobs within 5 minutes
      centred on 09:00 ± 3 min (the centre drawn each day), and a light background: Poisson,
      one job every 6 hours between 07:00 and 19:00 on weekdays and one a day otherwise (weekends are quiet); median 6 min. The shape a forecast learns from.
    Durations are clipped to 30 s – 60 min.
    """
    if shape not in SHAPES:
        raise InputError("--synthetic", f"unknown shape {shape!r} (use {', '.join(SHAPES)})")
    span = hours * 3600
    jobs: list[tuple[float, float, str]] = []
    for index, set_name in enumerate(sets):
        rng = random.Random(f"{seed}/{index}/{shape}")
        if shape == "steady":
            arrivals = _poisson(rng, 1.5 / 60, span)
            median = 360.0
        elif shape == "spiky":
            arrivals = _poisson(rng, 1.0 / 60, span)
            at = rng.uniform(5, 20) * 60
            while at < span:
                arrivals += [at + rng.uniform(0, 60) for _ in range(rng.randint(15, 40))]
                at += rng.uniform(15, 45) * 60
            median = 240.0
        elif shape == "weekly":
            arrivals = _weekly(rng, span)
            median = 360.0
        else:
            arrivals = _poisson(rng, 0.5 / 60, span)
            burst = min(3600.0, span / 3)
            arrivals += [burst + rng.uniform(0, 300) for _ in range(120)]
            median = 360.0
        for arrival in arrivals:
            if arrival < span:
                duration = min(max(rng.lognormvariate(math.log(median), 0.6), 30.0), 3600.0)
                jobs.append((arrival, round(duration, 1), set_name))
    jobs.sort()
    if start is None:
        start = WEEKLY_START if shape == "weekly" else DEFAULT_START
    return Trace(f"{shape} (seed {seed})", start,
                 tuple(Job(i, s, round(a, 1), d) for i, (a, d, s) in enumerate(jobs)), hours)


def _weekly(rng: random.Random, span: float) -> list[float]:
    """Arrivals of the weekly shape, in seconds from a Monday 00:00."""
    day = 86400.0
    arrivals = []
    for number in range(math.ceil(span / day)):
        start = number * day
        if number % 7 < 5:  # Monday to Friday
            centre = start + 9 * 3600 + rng.uniform(-180, 180)
            arrivals += [centre + rng.uniform(-150, 150) for _ in range(rng.randint(100, 140))]
            arrivals += [start + a for a in _poisson(rng, 1 / (6 * 3600), day)
                         if 7 * 3600 <= a < 19 * 3600]
            arrivals += [start + a for a in _poisson(rng, 1 / (24 * 3600), day)
                         if not 7 * 3600 <= a < 19 * 3600]
        else:
            arrivals += [start + a for a in _poisson(rng, 1 / (24 * 3600), day)]
    return arrivals


def _poisson(rng: random.Random, rate: float, span: float) -> list[float]:
    times, at = [], rng.expovariate(rate)
    while at < span:
        times.append(at)
        at += rng.expovariate(rate)
    return times


@dataclass(frozen=True)
class Observation:
    """One Gitscale-Set trailer: the demand a pass saw for one set."""

    time: datetime
    set: str
    queued: int
    running: int


def from_observations(observations: Iterable[Observation], name: str) -> Trace:
    """Jobs rebuilt from the demand counts of scaling commits (oldest first).

    Between two commits of a set, a rise of queued + running is that many jobs arriving at the
    later commit, a fall is that many of the oldest open jobs completing then; jobs still open
    at the last commit run for the median duration of the jobs rebuilt before them (5 minutes
    when there are none). Churn between two commits (a job that came and went, or one
    arriving as another completed) is invisible, and times are those of the commits: the trace
    is coarser than the real one, and says so in its name.
    """
    seen = sorted(observations, key=lambda o: o.time)
    if not seen:
        raise InputError("--from-history", "no scaling commits with demand counts found")
    start = seen[0].time
    span = (seen[-1].time - start).total_seconds()
    if span > MAX_SPAN_DAYS * 86400:
        raise InputError("--from-history", f"the scaling commits span {_days(span)} (from "
                         f"{start.isoformat()} to {seen[-1].time.isoformat()}); a replay "
                         f"covers at most {MAX_SPAN_DAYS} days: give --since or --until")
    open_jobs: dict[str, deque[float]] = {}
    jobs: list[tuple[float, float, str]] = []
    for obs in seen:
        at = (obs.time - start).total_seconds()
        queue = open_jobs.setdefault(obs.set, deque())
        assigned = obs.queued + obs.running
        while len(queue) < assigned:
            queue.append(at)
        while len(queue) > assigned:
            arrived = queue.popleft()
            jobs.append((arrived, max(at - arrived, 1.0), obs.set))
    end = (seen[-1].time - start).total_seconds()
    durations = sorted(d for _, d, _ in jobs)
    typical = durations[len(durations) // 2] if durations else 300.0
    for set_name, queue in open_jobs.items():
        jobs += [(arrived, max(end - arrived, typical), set_name) for arrived in queue]
    jobs.sort()
    return Trace(f"{name} (rebuilt from {len(seen)} trailers)", start,
                 tuple(Job(i, s, a, d) for i, (a, d, s) in enumerate(jobs)), max(end / 3600, 0.1))


def _days(seconds: float) -> str:
    days = seconds / 86400
    return f"{math.ceil(days):,} days" if days < 1e9 else f"{days:.3g} days"  # (366 d 1 s: 367)
