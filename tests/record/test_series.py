"""The demand series a forecast learns from, read from a real git repo: once, then only the
commits newer than the last one read; a rewritten history read again; a shallow clone deepened
to the time needed; and no git at all for a config without a forecast."""
from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gitscale.config.load import load_config
from gitscale.core.forecast import Forecast, ForecastPolicy, forecast
from gitscale.plan.cache import StateCache
from gitscale.plan.forecasts import read_forecasts
from gitscale.record.commitmsg import SetLine, format_message
from gitscale.record import series as series_module
from gitscale.record.series import DemandSeries
from gitscale.repo.git import Git, filters_by_date
from gitscale.repo.opening import open_workspace
from tests.helpers import RUNNERSET, git, make_repo, simple_config

START = datetime(2026, 1, 5, tzinfo=timezone.utc)


def scaling_commit(checkout: Path, when: datetime, queued: int, running: int,
                   name: str = "linux") -> str:
    line = SetLine(name, queued + running, 0, 1, queued, running, "scale-up", "")
    stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    env = {**os.environ, "GIT_COMMITTER_DATE": stamp, "GIT_AUTHOR_DATE": stamp}
    subprocess.run(["git", "commit", "--quiet", "--allow-empty", "-F", "-"], cwd=checkout,
                   input=format_message([line], "0" * 40), text=True, check=True, env=env)
    return git(checkout, "rev-parse", "HEAD")


def traced(checkout: Path, trace: Path) -> Git:
    return Git(checkout, {"GIT_TRACE": str(trace)})


def logs(trace: Path) -> list[str]:
    if not trace.exists():
        return []
    return [line.split("trace: built-in: ", 1)[1] for line in trace.read_text().splitlines()
            if "trace: built-in: git log" in line]


def whole(log: str) -> bool:
    """A `git log` of the whole history back to a time, not of the commits since the last
    one read (``LAST..HEAD``)."""
    return "--since" in log and ".." not in log.rsplit(" ", 1)[-1]


def test_read_once_then_only_the_new_commits(tmp_path: Path) -> None:
    checkout = make_repo(tmp_path, {"README": "x\n"}, bare_remote=False)
    for hour in range(5):
        scaling_commit(checkout, START + timedelta(hours=hour), hour, 1)
    series = DemandSeries()
    trace = tmp_path / "trace"
    needed = START + timedelta(hours=1)
    assert series.update(traced(checkout, trace), needed)
    assert list(series.of("linux")[1]) == [1, 2, 3, 4, 5]
    assert len(logs(trace)) == 1 and whole(logs(trace)[0])
    assert series.logs == 1

    # nothing new: no git log at all
    assert not series.update(traced(checkout, trace), needed)
    assert len(logs(trace)) == 1

    old = series.head
    new = [scaling_commit(checkout, START + timedelta(hours=h), 10 * h, 0) for h in (6, 7)]
    assert series.update(traced(checkout, trace), needed)
    assert logs(trace)[-1].endswith(f"{old}..{new[-1]}")  # only what came since
    assert list(series.of("linux")[1]) == [1, 2, 3, 4, 5, 60, 70]
    assert series.head == new[-1] and series.logs == 2

    # a rewritten history (the last commit amended) is read again whole
    git(checkout, "reset", "--quiet", "--hard", "HEAD~2")
    scaling_commit(checkout, START + timedelta(hours=6), 99, 0)
    assert series.update(traced(checkout, trace), needed)
    assert list(series.of("linux")[1]) == [1, 2, 3, 4, 5, 99]
    assert whole(logs(trace)[-1])


def test_the_series_survives_the_state_cache(tmp_path: Path) -> None:
    checkout = make_repo(tmp_path, {"README": "x\n"}, bare_remote=False)
    scaling_commit(checkout, START, 3, 0)
    cache = StateCache.load(tmp_path / "cache")
    cache.series.update(Git(checkout), START)
    cache.dirty = True
    cache.save()
    again = StateCache.load(tmp_path / "cache")
    assert again.series.head == git(checkout, "rev-parse", "HEAD")
    assert list(again.series.of("linux")[1]) == [3]
    trace = tmp_path / "trace"
    assert not again.series.update(traced(checkout, trace), START)  # a CLI run: no git log
    assert logs(trace) == []


def test_old_points_are_forgotten_but_the_level_that_held(tmp_path: Path) -> None:
    series = DemandSeries(sets={"linux": ([0.0, 10.0, 20.0, 30.0], [1, 2, 3, 4])})
    series.trim(25.0)
    assert series.of("linux") == ([20.0, 30.0], [3, 4])


def forecast_repo(tmp_path: Path, policy: str, before: Sequence[datetime] = ()) -> Path:
    """Two Mondays (START and a week later) of 40 jobs at 09:00, gone by 09:20; ``before``:
    earlier scaling commits (of no demand) under them."""
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": policy}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 0, running: 0}\n",
    })
    for when in before:
        scaling_commit(checkout, when, 0, 0)
    for day in (0, 7):
        scaling_commit(checkout, START + timedelta(days=day, hours=9), 40, 0)
        scaling_commit(checkout, START + timedelta(days=day, hours=9, minutes=20), 0, 0)
    git(checkout, "push", "--quiet", "origin", "main")
    return checkout


def test_a_config_without_forecast_runs_no_git(tmp_path: Path) -> None:
    checkout = forecast_repo(tmp_path, "{maxReplicas: 50}")
    trace = tmp_path / "trace"
    with open_workspace(str(checkout), None) as ws:
        config = load_config(ws.root)
        ws.git.env["GIT_TRACE"] = str(trace)
        cache = StateCache()
        assert read_forecasts(ws, config, cache, START + timedelta(days=14)) == {}
    assert not trace.exists()  # not one git command
    assert cache.series.logs == 0


def test_a_shallow_clone_is_deepened_to_the_time_needed(tmp_path: Path) -> None:
    checkout = forecast_repo(tmp_path, "{maxReplicas: 50, forecast: {lookback: 7d}}")
    url = f"file://{tmp_path / 'remote.git'}"
    now = START + timedelta(days=14, hours=8, minutes=59)  # 09:00 one lead (1m) ahead
    config = load_config(checkout)  # (a sparse clone checks out no file until a pass asks)
    with open_workspace(url, None, sparse=True) as ws:
        assert ws.git.is_shallow()
        found = read_forecasts(ws, config, StateCache(), now)
    # lookback 7d: the Monday a week before, stretches starting 08:57–09:02 (now - 2m jitter
    # to now + 1m lead + 2m). Its 40 jobs at 09:00 show as a rise only against the commit
    # before them (day 0, 09:20: 0), which the deepening must bring too (the oldest commit read
    # counts no rise): at window 1m, reach 1m + 1m - 30s = 90s
    assert found["linux"] == Forecast(40, (
        "forecast +40: q0.9 of the jobs that arrived within 90s, from 08:57–09:02 UTC, on the "
        "last Monday (40)"))


def test_a_series_trimmed_to_the_history_needed_forecasts_the_same() -> None:
    """What a reader keeps (``trim`` at ``history_needed``: the points from then on and the
    one before) holds the oldest stretch's rises and the level each rose from. Day 0's jobs
    arrive at 08:57, the start of its earliest stretch (now, 08:59, less the 2m jitter): their
    rise is against 08:56's level, which ``now - lookback`` (08:59) or ``now + lead - lookback
    - jitter`` (08:58, where the stretches used to start) would cut."""
    policy = ForecastPolicy(quantile=0.5)
    now = START + timedelta(days=14, hours=8, minutes=59)

    def at(day: int, hour: int, minute: int) -> float:
        return (START + timedelta(days=day, hours=hour, minutes=minute)).timestamp()

    times = [at(0, 0, 0), at(0, 8, 56), at(0, 8, 57), at(0, 9, 20), at(7, 9, 0), at(7, 9, 20)]
    levels = [0, 10, 90, 0, 120, 0]
    series = DemandSeries(sets={"linux": (list(times), list(levels))})
    series.trim(policy.history_needed(now).timestamp())
    kept = series.of("linux")
    assert kept[0][0] < at(0, 8, 57)  # the level before the rise is kept
    assert forecast(*kept, policy, now).extra == forecast(times, levels, policy, now).extra == 80
    for cut in (at(0, 8, 59), at(0, 8, 58)):  # (what the test tells apart: either loses it)
        short = DemandSeries(sets={"linux": (list(times), list(levels))})
        short.trim(cut)
        assert forecast(*short.of("linux"), policy, now).extra == 0


@pytest.mark.parametrize("as_filter", [pytest.param(True, id="since-as-filter"),
                                       pytest.param(False, id="older-git")])
def test_a_commit_dated_before_the_window_does_not_hide_the_history_behind_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, as_filter: bool) -> None:
    """`git log --since` stops walking at the first commit older than the date: one commit
    made with a clock in the past (or by `git rebase --committer-date-is-author-date` of an
    old branch) hid every scaling commit behind it from the first read. Read with git's
    filter (2.38+), or without a date at all on an older git, and trimmed here."""
    if as_filter and not filters_by_date():
        pytest.skip("this git has no log --since-as-filter")
    monkeypatch.setattr(series_module, "filters_by_date", lambda: as_filter)
    checkout = make_repo(tmp_path, {"README": "x\n"}, bare_remote=False)
    scaling_commit(checkout, START - timedelta(days=30), 7, 0)  # before what is read
    for day in (0, 7):
        scaling_commit(checkout, START + timedelta(days=day, hours=9), 40, 0)
        scaling_commit(checkout, START + timedelta(days=day, hours=9, minutes=20), 0, 0)
    env = {**os.environ, "GIT_COMMITTER_DATE": "2020-01-01T00:00:00Z"}
    subprocess.run(["git", "commit", "--quiet", "--allow-empty", "-m", "from a dead RTC"],
                   cwd=checkout, env=env, check=True)
    series = DemandSeries()
    series.update(Git(checkout), START)
    assert list(series.of("linux")[1]) == [40, 0, 40, 0]


def test_a_pass_with_a_later_clock_does_not_leave_the_next_ones_without_history(
        tmp_path: Path) -> None:
    """A `plan --now` days ahead (a what-if), or a run on a host whose clock is ahead, shares
    the state cache with the passes on time: what it forgot (the commits before its own
    window) is read again when a pass needs them, not taken as history that is not there."""
    checkout = forecast_repo(tmp_path, "{maxReplicas: 50, forecast: {lookback: 14d}}")
    policy = ForecastPolicy()
    on_time = START + timedelta(days=14, hours=8, minutes=59)  # the third Monday, 08:59
    cache = StateCache.load(tmp_path / "cache")
    cache.series.update(Git(checkout), policy.history_needed(on_time))
    times, levels = cache.series.of("linux")
    expected = forecast(times, levels, policy, on_time)
    assert expected.extra == 40  # both past Mondays saw 40 jobs arrive at 09:00
    scaling_commit(checkout, START + timedelta(days=13), 1, 0)  # a commit since: HEAD moves
    ahead = on_time + timedelta(days=10)
    assert cache.series.update(Git(checkout), policy.history_needed(ahead))
    cache.dirty = True
    cache.save()

    again = StateCache.load(tmp_path / "cache")  # the next pass on time
    again.series.update(Git(checkout), policy.history_needed(on_time))
    times, levels = again.series.of("linux")
    assert forecast(times, levels, policy, on_time) == expected


def test_a_set_quiet_for_longer_than_the_history_read_is_not_said_to_be_new(
        tmp_path: Path) -> None:
    """A set whose last scaling commit is older than what a forecast reads (the lookback and
    a week: quiet at its count over a month's holidays, gitscale commits only a change) has no
    commit in the history read, as a new or renamed set has: the fallback says that it may
    not have scaled, not only that it is new or renamed (a rename to look for)."""
    checkout = make_repo(tmp_path, {"README": "x\n"}, bare_remote=False)
    scaling_commit(checkout, START, 3, 0)
    now = START + timedelta(days=30)
    policy = ForecastPolicy()
    series = DemandSeries()
    series.update(Git(checkout), policy.history_needed(now))
    found = forecast(*series.of("linux"), policy, now)
    assert found.extra is None
    assert found.detail == (
        "forecast: no scaling commit of this set in the history read (a new set, one that has "
        "not scaled in that time, or a renamed one: its commits name the old name, which "
        "`previousNames: [OLD]` on the set makes its own), needs 14d: reactive until then")
