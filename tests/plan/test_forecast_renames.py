"""A forecast set renamed with ``previousNames`` learns from its commits under the old names
too (one series, in time order), from the series already read: adding the key costs no git
command. Without it, the fallback says which old name the history holds and what to write."""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from gitscale.config.load import load_config
from gitscale.core.forecast import Forecast
from gitscale.plan.cache import StateCache
from gitscale.plan.forecasts import read_forecasts
from gitscale.record.series import DemandSeries, joined
from gitscale.repo.opening import open_workspace
from tests.helpers import RUNNERSET, git, make_repo
from tests.record.test_series import START, logs, scaling_commit, whole

Series = tuple[list[float], list[int]]


@pytest.mark.parametrize(("series", "expected"), [
    pytest.param([([10.0, 20.0], [1, 2]), ([1.0, 5.0], [7, 8])],
                 ([1.0, 5.0, 10.0, 20.0], [7, 8, 1, 2]), id="a-rename: old before new"),
    pytest.param([([10.0], [1]), ([], []), ([1.0], [7])], ([1.0, 10.0], [7, 1]),
                 id="an-empty-name"),
    pytest.param([([1.0, 3.0], [1, 3]), ([2.0, 4.0], [2, 4])],
                 ([1.0, 2.0, 3.0, 4.0], [1, 2, 3, 4]), id="interleaved"),
    pytest.param([([5.0, 5.0, 6.0], [1, 2, 3]), ([5.0], [9])],
                 ([5.0, 5.0, 5.0, 6.0], [9, 1, 2, 3]),
                 id="one-second: the previous name first, each name's order kept"),
    pytest.param([([5.0], [1]), ([1.0, 5.0], [7, 9])], ([1.0, 5.0, 5.0], [7, 9, 1]),
                 id="touching-ends"),
])
def test_joined_series_are_in_time_order(series: list[Series], expected: Series) -> None:
    assert joined(series) == expected


def test_a_set_and_its_previous_names_are_one_series() -> None:
    series = DemandSeries(sets={"linux-x64": ([30.0], [3]), "linux": ([10.0, 20.0], [1, 2]),
                                "gpu": ([15.0], [9])})
    assert series.of("linux-x64") == ([30.0], [3])
    assert series.of("linux-x64", "linux") == ([10.0, 20.0, 30.0], [1, 2, 3])
    assert series.of("linux-x64", "amd64") == ([30.0], [3])  # a name never seen: nothing
    assert series.of("new", "linux") == ([10.0, 20.0], [1, 2])  # no commit of its own yet
    assert series.of("new", "amd64") == ([], [])


def config(previous: str) -> str:
    return ("runnerSets:\n  - name: linux-x64\n" + previous
            + "    manifest: sets/linux.yaml\n    source: {file: demand.yaml}\n"
            "    policy: {maxReplicas: 50, forecast: {lookback: 14d}}\n")


def test_a_renamed_set_forecasts_from_its_old_commits(tmp_path: Path) -> None:
    """Three Mondays of 40 jobs at 09:00 under ``linux``, renamed ``linux-x64`` on the
    Sunday; the Monday after: reactive, with the hint, until ``previousNames: [linux]`` is
    written, then the old Mondays' cushion, from the series the first pass read."""
    checkout = make_repo(tmp_path, {"gitscale.yaml": config(""),
                                    "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
                                    "demand.yaml": "linux-x64: {queued: 0, running: 0}\n"},
                         bare_remote=False)
    for day in (0, 7, 14):
        scaling_commit(checkout, START + timedelta(days=day, hours=9), 40, 0)
        scaling_commit(checkout, START + timedelta(days=day, hours=9, minutes=20), 0, 0)
    scaling_commit(checkout, START + timedelta(days=20), 1, 0, name="linux-x64")
    now = START + timedelta(days=21, hours=8, minutes=59)  # 09:00 one lead (1m) ahead
    cache = StateCache()
    with open_workspace(str(checkout), None) as ws:
        undeclared = read_forecasts(ws, load_config(ws.root), cache, now)["linux-x64"]
        assert undeclared == Forecast(None, (
            "forecast: 1.4d of history, needs 14d: reactive until then; the history read names "
            "a set gitscale.yaml no longer has, whose commits end before this set's begin: "
            "linux: if it was this set's name, add `previousNames: [linux]` to the set"))
        assert cache.series.logs == 1

        (checkout / "gitscale.yaml").write_text(config("    previousNames: [linux]\n"))
        git(checkout, "commit", "--quiet", "-am", "gitscale.yaml: linux-x64 was linux")
        ws.git.env["GIT_TRACE"] = str(tmp_path / "trace")
        declared = read_forecasts(ws, load_config(ws.root), cache, now)["linux-x64"]
    assert declared == Forecast(40, (
        "forecast +40: q0.9 of the jobs that arrived within 90s, from 08:57–09:02 UTC, on the "
        "last 2 Mondays (40, 40)"))
    # the old name's commits were in the series all along: the second pass read only the
    # commit since the first (the config's), not the whole history again
    read = logs(tmp_path / "trace")
    assert len(read) == 1 and not whole(read[0]) and ".." in read[0], read
