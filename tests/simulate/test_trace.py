"""Traces: the CSV format, bad files through the CLI, the synthetic shapes, history rebuilt."""
from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gitscale.errors import InputError
from gitscale.simulate.trace import (DEFAULT_START, Observation, TraceError, from_observations,
                                     load_csv, synthetic)
from tests.helpers import run
from tests.simulate.util import config_dir

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def two_sets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return config_dir(tmp_path_factory.mktemp("config"), {"linux": "{maxReplicas: 10}",
                                                          "windows": "{maxReplicas: 10}"})


@pytest.mark.parametrize("text, start, jobs", [
    # seconds from the trace's start, durations in seconds
    ("0,60\n30,90\n", DEFAULT_START, [(0.0, 60.0, "linux"), (30.0, 90.0, "linux")]),
    # a header, comments, blank lines, a duration like 5m, and the set column
    ("arrival,duration,set\n# a comment, with a comma\n\n10,5m,windows\n0,1m30s,\n",
     DEFAULT_START, [(0.0, 90.0, "linux"), (10.0, 300.0, "windows")]),
    # a comment first, then the header; spaces around cells; rows out of order are sorted
    ("# exported 2026-03-02\n Arrival , Duration \n 120 , 45s \n 60 , 2m \n",
     DEFAULT_START, [(60.0, 120.0, "linux"), (120.0, 45.0, "linux")]),
    # RFC 3339: the earliest arrival is the trace start, other offsets count from it
    ("2026-03-02T09:05:00Z,60\n2026-03-02T09:00:00Z,1h\n2026-03-02T10:00:30+01:00,30s,windows\n",
     T0, [(0.0, 3600.0, "linux"), (30.0, 30.0, "windows"), (300.0, 60.0, "linux")]),
    # a quote in a comment does not swallow the lines after it
    ('0,60\n# "unbalanced, quote\n10,30\n', DEFAULT_START,
     [(0.0, 60.0, "linux"), (10.0, 30.0, "linux")]),
    # a byte-order mark and CRLF line ends
    ("\ufeffarrival,duration\r\n0,60\r\n", DEFAULT_START, [(0.0, 60.0, "linux")]),
])
def test_csv_parses(tmp_path: Path, text: str, start: datetime,
                    jobs: list[tuple[float, float, str]]) -> None:
    path = tmp_path / "jobs.csv"
    path.write_bytes(text.encode())
    trace = load_csv(path, "linux", ["linux", "windows"])
    assert trace.start == start
    assert [(j.arrival, j.duration, j.set) for j in trace.jobs] == jobs
    assert [j.arrival for j in trace.jobs] == sorted(j.arrival for j in trace.jobs)
    assert len({j.id for j in trace.jobs}) == len(jobs)
    assert trace.hours == max(max(a for a, _, _ in jobs) / 3600, 0.1)


@pytest.mark.parametrize("text, line, message", [
    ("0,60\nten,60\n", 2, "arrival: 'ten' is not an RFC 3339 time"),
    ("0,60\n5\n", 2, "expected arrival,duration[,set], got 1 fields"),
    ("0,60\n5,60,linux,extra\n", 2, "got 4 fields"),
    ("0,60\n# fine\n5,-3\n", 3, "duration: '-3' is not a time in seconds"),
    ("0,60\n5,0\n", 2, "duration must be positive, got '0'"),
    ("0,0s\n", 1, "duration must be positive, got '0s'"),
    ("0,60\n5,soon\n", 2, "duration: 'soon' is not a duration"),
    ("0,60\n5,nan\n", 2, "duration: 'nan' is not a time in seconds"),
    ("0,60\n5,10000000\n", 2, "longer than a week"),
    ("-5,60\n", 1, "arrival: '-5' is not a time in seconds"),
    ("2026-03-02T09:00:00,60\n", 1, "has no UTC offset"),
    ("0,60\n5,60,macos\n", 2, "unknown runner set 'macos' (known: linux, windows)"),
    ("0,60\n2026-03-02T09:00:00Z,60\n", 2, "mixes RFC 3339 arrivals and arrivals in seconds"),
    ("2026-03-02T09:00:00Z,60\n# x\n30,60\n", 3, "mixes RFC 3339 arrivals"),
    ("arrival,duration\n0,60\narrival,duration\n", 3, "arrival: 'arrival' is not"),
    # a replay steps through the whole span: a century was a hang, not an error
    ("2026-01-01T09:00:00Z,60\n2126-01-01T09:00:00Z,60\n2026-02-01T09:00:00Z,60\n", 2,
     "its jobs span 36,524 days (this line's arrival is the latest); a replay covers at most "
     "366 days: split the trace"),
    ("0,60\n1e308,60\n", 2, "its jobs span 1.16e+303 days"),
    (f"{366 * 86400 + 1},60\n", 1, "its jobs span 367 days"),
])
def test_bad_csv_exits_1_naming_file_and_line(tmp_path: Path, capsys, two_sets: Path,  # type: ignore[no-untyped-def]
                                              text: str, line: int, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    code, out, err = run(capsys, "simulate", "--repo", str(two_sets), "--trace", str(path))
    assert code == 1
    assert out == ""
    assert err.startswith(f"error: {path}:{line}: ")
    assert message in err
    assert "Traceback" not in err and len(err.splitlines()) == 1


def test_unknown_set_without_a_config_repo_names_the_default(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                             monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # no gitscale.yaml here: one set, "default"
    (tmp_path / "t.csv").write_text("0,60,linux\n")
    code, _, err = run(capsys, "simulate", "--trace", "t.csv")
    assert code == 1
    assert err == "error: t.csv:1: unknown runner set 'linux' (known: default)\n"


def test_unreadable_trace_files(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)  # opening it would block forever: it must be refused before
    empty = tmp_path / "empty.csv"
    empty.write_text("# only a comment\narrival,duration\n")
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"0,60\n\xff\xfe\n")
    cases = [(tmp_path, "not a regular file"), (fifo, "not a regular file"),
             (tmp_path / "missing.csv", "no such file"), (empty, "holds no jobs"),
             (binary, "is not UTF-8 text")]
    for path, message in cases:
        code, out, err = run(capsys, "simulate", "--trace", str(path))
        assert (code, out, err) == (1, "", f"error: {path}: {message}\n")


def test_synthetic_is_deterministic_per_seed() -> None:
    for shape in ("steady", "spiky", "burst"):
        one = synthetic(shape, seed=1, hours=2, sets=["a", "b"])
        assert one == synthetic(shape, seed=1, hours=2, sets=["a", "b"])
        other = synthetic(shape, seed=2, hours=2, sets=["a", "b"])
        assert [(j.arrival, j.duration) for j in one.jobs] != \
               [(j.arrival, j.duration) for j in other.jobs]
        assert one.hours == 2 and one.sets == ["a", "b"]
        assert all(0 <= j.arrival < 2 * 3600 and 30 <= j.duration <= 3600 for j in one.jobs)
        assert [j.arrival for j in one.jobs] == sorted(j.arrival for j in one.jobs)
        assert [j.id for j in one.jobs] == list(range(len(one.jobs)))
        # each set gets its own stream, not a copy of the other's
        a = [(j.arrival, j.duration) for j in one.jobs if j.set == "a"]
        b = [(j.arrival, j.duration) for j in one.jobs if j.set == "b"]
        assert a and b and a != b


@pytest.mark.parametrize("shape, low, high", [
    ("steady", 1.2, 1.8),  # 1.5 jobs a minute
    ("spiky", 1.0, 2.5),  # 1 a minute plus spikes
    ("burst", 0.3, 0.7 + 120 / 240),  # 0.5 a minute plus the burst's 120
])
def test_synthetic_rates(shape: str, low: float, high: float) -> None:
    trace = synthetic(shape, seed=1, hours=4, sets=["default"])
    assert low <= len(trace.jobs) / 240 <= high


def test_burst_has_120_jobs_in_five_minutes() -> None:
    for seed in (1, 2, 3):
        trace = synthetic("burst", seed=seed, hours=4, sets=["default"])
        arrivals = [j.arrival for j in trace.jobs]
        inside = [a for a in arrivals if 3600 <= a < 3900]  # 09:00-09:05 with the default start
        assert 120 <= len(inside) <= 130
        assert trace.time(3600) == DEFAULT_START + timedelta(hours=1)
        # outside the burst, no 5 minutes hold more than a handful
        outside = [a for a in arrivals if not 3600 <= a < 3900]
        assert max(sum(t <= a < t + 300 for a in outside) for t in outside) < 15


def test_unknown_shape() -> None:
    with pytest.raises(InputError, match="unknown shape 'wavy'"):
        synthetic("wavy", seed=1, hours=1, sets=["default"])


def obs(minute: float, queued: int, running: int, name: str = "linux") -> Observation:
    return Observation(T0 + timedelta(minutes=minute), name, queued, running)


def test_from_observations_rebuilds_arrivals_and_completions() -> None:
    trace = from_observations([
        obs(4, 0, 1),  # out of order on purpose: sorted by time
        obs(0, 0, 0), obs(1, 3, 0), obs(2, 1, 2),  # 3 arrive at 1; none come or go at 2
        obs(3, 0, 2), obs(0.5, 2, 0, "windows"),
        obs(5, 2, 0),
        obs(3, 0, 0, "windows"),
    ], "history")
    got = sorted((j.set, j.arrival, j.duration) for j in trace.jobs)
    assert got == sorted([
        # linux: +3 at 1 min; 3 → 2 at 3 min (the oldest completes); 2 → 1 at 4; 1 → 2 at 5
        ("linux", 60.0, 120.0), ("linux", 60.0, 180.0),
        # still open at the last commit (5 min): at least the median rebuilt duration (150 s)
        ("linux", 60.0, 240.0), ("linux", 300.0, 150.0),
        # windows: +2 at 30 s, both gone at 3 min
        ("windows", 30.0, 150.0), ("windows", 30.0, 150.0),
    ])
    assert trace.start == T0
    assert trace.hours == 0.1  # 5 minutes, raised to the floor of 0.1 h
    assert "rebuilt from 8 trailers" in trace.name


def test_from_observations_of_more_than_a_year_ask_for_since() -> None:
    """Months of scaling commits replay (a year at 10 s: under a minute of CPU);
    more is refused, pointing at --since, instead of running for hours."""
    year = 366 * 24 * 60
    assert from_observations([obs(0, 1, 0), obs(year, 0, 0)], "history").hours == 366 * 24
    with pytest.raises(InputError, match=r"--from-history: the scaling commits span 367 days "
                       r"\(from 2026-.* to 2027-.*\); a replay covers at most 366 days: give --since "
                       r"or --until"):
        from_observations([obs(0, 1, 0), obs(year + 24 * 60, 0, 0)], "history")


def test_from_observations_needs_one() -> None:
    with pytest.raises(InputError, match="--from-history: no scaling commits"):
        from_observations([], "history")


def test_trace_error_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("0,60\n0,x\n")
    with pytest.raises(TraceError) as caught:
        load_csv(path, "default")
    assert (caught.value.source, caught.value.line) == (str(path), 2)
