"""The outcome targets of the scaler and controller together, as a regression test.

Outcomes, not speed: the three synthetic shapes, seed 1, 4 hours; pod start 45 s, sync 10 s,
decisions every 10 s; policy {minReplicas: 0, maxReplicas: 200, scaleDownDelay: 5m} with
buffer 0 and buffer 2. Runner-minutes at most 1.10× the oracle's (buffer 0) and 1.25× (buffer
2); p95 wait at most 65 s on steady and spiky, 165 s on the burst; at most 120 commits an hour
on steady.

Under saturation (more jobs than maxReplicas: spiky on the default preset, the burst at max
100), gitscale keeps pace with actions-runner-controller's listener: p50 and p95 within 10 % or
20 s of its (whichever is larger), runner-minutes at most 1.05× its, at most 30 commits an
hour on spiky; and every job runs (no strategy cheaper than the oracle by truncation).
"""
from __future__ import annotations

import functools
from dataclasses import replace

import pytest

from gitscale.simulate.report import Metrics, metrics
from gitscale.simulate.baselines import oracle, run_listener
from gitscale.simulate.harness import Settings
from gitscale.simulate.strategies import run_all, run_gitscale
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


# The saturated traces: spiky on the default preset (max 10), the burst at max 100.
SATURATED = {"spiky": replace(TARGET, max_replicas=10), "burst": replace(TARGET, max_replicas=100)}


@functools.cache
def saturated(shape: str) -> dict[str, Metrics]:
    """gitscale's row and the listener's on a saturated trace."""
    trace = synthetic(shape, seed=1, hours=4, sets=["default"])
    policy = {"default": SATURATED[shape]}
    found = metrics([run_gitscale(trace, policy, SETTINGS, "saturated"),
                     run_listener(trace, policy, SETTINGS), oracle(trace, SETTINGS)], trace)
    assert all(r.jobs == len(trace.jobs) and r.never_started == 0 for r in found)
    return {r.name: r for r in found}


@pytest.mark.parametrize("shape", list(SATURATED))
@pytest.mark.parametrize("wait", ["wait_p50", "wait_p95"])
def test_saturated_waits_keep_pace_with_the_listener(shape: str, wait: str) -> None:
    rows = saturated(shape)
    ours, theirs = getattr(rows["gitscale"], wait), getattr(rows["arc-listener"], wait)
    assert ours <= theirs + max(0.1 * theirs, 20)


@pytest.mark.parametrize("shape", list(SATURATED))
def test_saturated_runner_minutes(shape: str) -> None:
    rows = saturated(shape)
    assert rows["gitscale"].runner_minutes <= 1.05 * rows["arc-listener"].runner_minutes
    # every job ran: nobody is cheaper than the oracle by jobs cut off at the end
    assert rows["gitscale"].vs_oracle >= 1 and rows["arc-listener"].vs_oracle >= 1


def test_saturated_commits_per_hour_on_spiky() -> None:
    per_hour = saturated("spiky")["gitscale"].commits_per_hour
    assert per_hour is not None and per_hour <= 30
