"""The reported metrics (``gitscale.simulate.report``) on traces small enough to compute by hand.

Waits are nearest-rank percentiles; runner-minutes count every pod from its creation (pending
included, as the oracle's pod start per job is) to its finish or deletion; idle minutes count
only the time a started runner waited for a job (never its pod start); × oracle is
runner-minutes over Σ(pod start + duration); commits per hour are over the hours reported.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from gitscale.simulate.report import Metrics, metrics, percentile
from gitscale.simulate.baselines import oracle, run_listener
from gitscale.simulate.harness import Settings
from gitscale.simulate.strategies import run_gitscale
from tests.simulate.util import TARGET, trace_of


@pytest.mark.parametrize(("values", "fraction", "expected"), [
    pytest.param([], 0.95, 0.0, id="no jobs: 0"),
    pytest.param([7.0], 0.95, 7.0, id="one value is every percentile"),
    pytest.param([3.0, 1.0], 0.50, 1.0, id="p50 of two: the lower (nearest rank 1)"),
    pytest.param([float(v) for v in range(1, 21)], 0.95, 19.0, id="p95 of 20: rank 19"),
    pytest.param([float(v) for v in range(1, 22)], 0.95, 20.0, id="p95 of 21: rank 20 (19.95 up)"),
    pytest.param([float(v) for v in range(1, 21)], 0.50, 10.0, id="p50 of 20: rank 10"),
    pytest.param([0.0, 0.0, 40.0], 0.95, 40.0, id="p95 of 3: the max"),
])
def test_percentile_is_nearest_rank(values: list[float], fraction: float,
                                    expected: float) -> None:
    assert percentile(values, fraction) == expected


# Jobs of 60 s at 5 s, 100 s and 1003 s; pod start 45 s, decisions every 10 s, sync 10 s.
TRACE = trace_of((5, 60), (100, 60), (1003, 60))
SETTINGS = Settings(interval=10, sync_delay=10, pod_start=45)
WARM = {"default": replace(TARGET, min_replicas=2)}


def row(name: str, settings: Settings = SETTINGS) -> Metrics:
    runs = {"gitscale": lambda: run_gitscale(TRACE, {"default": TARGET}, settings, "target"),
            "listener, min 2": lambda: run_listener(TRACE, WARM, settings)}
    rows = metrics([runs[name](), oracle(TRACE, settings)], TRACE, settings.report_from)
    return rows[0]


@pytest.mark.parametrize(("name", "settings", "expected"), [
    # waits 60, 55, 62 (decision + sync + pod start); each runner lives pod start + its job:
    # 3 × 105 s = the oracle; 8 commits in the 1-hour trace (test_strategies counts them)
    pytest.param("gitscale", SETTINGS, dict(
        jobs=3, wait_p50=60.0, wait_p95=62.0, wait_max=62.0, runner_minutes=5.2,
        vs_oracle=1.0, idle_runner_minutes=0.0, pods_created=3, commits=8,
        commits_per_hour=8.0), id="gitscale: the oracle's cost, commits per trace hour"),
    # Reported from 900 s: job 2 alone (decided 1010, synced 1020, ready 1065, done 1125:
    # 105 s, the oracle's); commits from 900 on: 1 at 1010, 0 at 1310 and its patch 0 at 1320,
    # over the 0.75 h reported
    pytest.param("gitscale", replace(SETTINGS, report_from=900), dict(
        jobs=1, wait_p50=62.0, wait_p95=62.0, wait_max=62.0, runner_minutes=1.8,
        vs_oracle=1.0, idle_runner_minutes=0.0, pods_created=1, commits=3,
        commits_per_hour=4.0), id="report-from: jobs, runners, commits and hours after it"),
    # minRunners 2: p1, p2 at 0 (ready 45: p1 takes job 0, wait 40; p2 idles 45→100 and
    # takes job 1); p3 at 5 for job 0 (ready 50, idles to 1003, takes job 2); p4 at 100 for
    # job 1 (ready 145, idle to the end, 5400 = the hour + 30 min); p5 at 1003 for job 2
    # (ready 1048, idle to the end). Runner time: p1 0→105, p2 0→160, p3 5→1063, p4 100→5400,
    # p5 1003→5400 = 11020 s; idle 55 + 953 + 5255 + 4352 = 10615 s: the 5 pod starts
    # (225 s) are runner time but not idle time (11020 = 225 + 180 of jobs + 10615)
    pytest.param("listener, min 2", SETTINGS, dict(
        jobs=3, wait_p50=0.0, wait_p95=40.0, wait_max=40.0, runner_minutes=183.7,
        vs_oracle=34.984, idle_runner_minutes=176.9, pods_created=5, commits=None,
        commits_per_hour=None), id="listener min 2: pod starts are runner time, not idle"),
])
def test_metrics_by_hand(name: str, settings: Settings, expected: dict[str, object]) -> None:
    got = row(name, settings)
    assert {key: getattr(got, key) for key in expected} == expected
