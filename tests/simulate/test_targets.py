"""The outcome targets of the scaler and controller together, as a regression test.

Outcomes, not speed: the three synthetic shapes, seed 1, 4 hours; pod start 45 s, sync 10 s,
decisions every 10 s; policy {minReplicas: 0, maxReplicas: 200, scaleDownDelay: 5m} with
buffer 0 and buffer 2. Runner-minutes at most 1.10× the oracle's (buffer 0) and 1.25× (buffer
2); p95 wait at most 65 s on steady and spiky, 165 s on the burst; at most 120 commits an hour
on steady.
"""
from __future__ import annotations

import functools
from dataclasses import replace

import pytest

from gitscale.simulate.report import Metrics, metrics
from gitscale.simulate.strategies import Settings, run_all
from gitscale.simulate.trace import synthetic
from tests.simulate.util import TARGET

SETTINGS = Settings(interval=10, sync_delay=10, pod_start=45)
COST = {0: 1.10, 2: 1.25}
P95 = {"steady": 65, "spiky": 65, "burst": 165}


@functools.cache
def rows(shape: str) -> dict[int, Metrics]:
    """Each buffer's row on one shape (computed once per shape for all the tests below)."""
    trace = synthetic(shape, seed=1, hours=4, sets=["default"])
    policies = [(f"buffer {b}", {"default": replace(TARGET, buffer=b)}) for b in COST]
    found = metrics(run_all(trace, policies, SETTINGS, baselines=False), trace)
    assert [r.name for r in found] == ["gitscale", "gitscale", "oracle"]
    assert all(r.jobs == len(trace.jobs) for r in found)
    return dict(zip(COST, found))


@pytest.mark.parametrize("shape", list(P95))
@pytest.mark.parametrize("buffer", list(COST))
def test_runner_minutes(shape: str, buffer: int) -> None:
    assert rows(shape)[buffer].vs_oracle <= COST[buffer]


@pytest.mark.parametrize("shape", list(P95))
@pytest.mark.parametrize("buffer", list(COST))
def test_p95_wait(shape: str, buffer: int) -> None:
    assert rows(shape)[buffer].wait_p95 <= P95[shape]


@pytest.mark.parametrize("buffer", list(COST))
def test_commits_per_hour_on_steady(buffer: int) -> None:
    per_hour = rows("steady")[buffer].commits_per_hour
    assert per_hour is not None and per_hour <= 120
