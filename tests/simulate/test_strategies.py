"""The strategies on a trace small enough to compute by hand.

Three jobs of 60 s at 5 s, 100 s and 1003 s; pod start 45 s, decisions every 10 s, sync 10 s;
policy {minReplicas: 0, maxReplicas: 200, scaleDownDelay: 5m}. Every job finds no idle runner,
so under gitscale its wait is: until the next decision + sync + pod start.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from gitscale.simulate.baselines import oracle, run_hra, run_listener, run_pod_per_job
from gitscale.simulate.harness import Settings
from gitscale.simulate.strategies import run_gitscale
from tests.simulate.util import TARGET, trace_of

TRACE = trace_of((5, 60), (100, 60), (1003, 60))
SETTINGS = Settings(interval=10, sync_delay=10, pod_start=45)
ORACLE_SECONDS = 3 * (45 + 60)


def test_gitscale_waits_are_decision_delay_plus_sync_plus_pod_start() -> None:
    outcome = run_gitscale(TRACE, {"default": TARGET}, SETTINGS, "target")
    # job 0: decided at 10 (5 s later), synced at 20, ready at 65; job 1 arrives on a decision
    # (100) and job 0 still runs, so the count goes 1 → 2; job 2 decided at 1010
    assert outcome.waits == [5 + 10 + 45, 0 + 10 + 45, 7 + 10 + 45]
    # each runner lives pod start + its job, no runner idles: exactly the oracle's cost
    assert outcome.runner_seconds == ORACLE_SECONDS
    assert outcome.idle_seconds == 0 and outcome.pods == 3
    # commits: the first write (0, patch 0) at 0; 1 at 10; 2 at 100; the scale-down to 0 when
    # the delay ends (400) and its patch 0 (410); 1 at 1010; 0 at 1310; patch 0 at 1320.
    # Patch-only: the first write (0 → 0) and the two patch-0 resets.
    assert (outcome.commits, outcome.patch_only_commits) == (8, 3)
    assert (outcome.name, outcome.policy) == ("gitscale", "target")


def test_commits_count_passes_not_sets() -> None:
    """Two sets with the same jobs write in the same passes: one commit per pass, not two."""
    twice = trace_of(*[(a, d, s) for s in ("a", "b") for a, d in ((5, 60), (100, 60), (1003, 60))])
    outcome = run_gitscale(twice, {"a": TARGET, "b": TARGET}, SETTINGS, "target")
    assert (outcome.commits, outcome.patch_only_commits) == (8, 3)
    assert sorted(outcome.waits) == sorted(2 * [60.0, 55.0, 62.0])
    # a pass where only one set writes still counts once
    staggered = trace_of((5, 60, "a"), (100, 60, "b"))
    one = run_gitscale(staggered, {"a": TARGET, "b": TARGET}, SETTINGS, "target")
    # 0: both sets' first writes, one commit; 10: a → 1; 100: b → 1; a's delay (from 10) ends
    # at 310: a → 0, then its patch 0 at 320; b's (from 100) at 400: b → 0, patch 0 at 410
    assert one.commits == 7


def test_oracle_is_pod_start_plus_duration_per_job() -> None:
    outcome = oracle(TRACE, SETTINGS)
    assert outcome.runner_seconds == ORACLE_SECONDS
    assert outcome.waits == [0.0, 0.0, 0.0] and outcome.pods == 3
    assert oracle(TRACE, replace(SETTINGS, pod_start=0)).runner_seconds == 180


def test_pod_per_job_waits_pod_start() -> None:
    outcome = run_pod_per_job(TRACE, SETTINGS)
    assert outcome.waits == [45.0, 45.0, 45.0]
    assert outcome.runner_seconds == ORACLE_SECONDS and outcome.pods == 3
    assert outcome.commits is None


def test_listener_patches_on_each_job_event() -> None:
    outcome = run_listener(TRACE, {"default": TARGET}, SETTINGS)
    assert outcome.waits == [45.0, 45.0, 45.0]  # a runner is asked for the moment a job comes
    assert outcome.runner_seconds == ORACLE_SECONDS and outcome.idle_seconds == 0
    # minRunners = the policy's min: with a min of 2, two runners are started at 0 (ready at
    # 45, so job 0 waits 40 s), and min runners stay idle beside the running jobs after that
    warm = run_listener(TRACE, {"default": replace(TARGET, min_replicas=2)}, SETTINGS)
    assert warm.waits == [40.0, 0.0, 0.0]
    assert warm.idle_seconds > 0 and warm.runner_seconds > ORACLE_SECONDS


# One job of 200 s at 5 s. The listener's patches (seconds in, replicas, patch ID) to 300 s:
# one per job message (the job queued, started, completed: a start or a completion marks the
# batch "dirty"), one per empty batch (50 s without a message), each with the next patch ID;
# patch 0 when the state is forced: the first patch, and an empty batch with no job message
# since the last patch whose target is unchanged and is minRunners (actions-runner-controller's
# scaler). With min 0 the job's runner is ready at 50; with min 1 the warm runner takes it at
# 45 and a second runner is asked for, which idles.
@pytest.mark.parametrize(("minimum", "expected"), [
    pytest.param(0, [(0, 0, 0), (5, 1, 1), (50, 1, 2), (100, 1, 3), (150, 1, 4), (200, 1, 5),
                     (250, 0, 6), (300, 0, 0)], id="min 0"),
    pytest.param(1, [(0, 1, 0), (5, 2, 1), (45, 2, 2), (95, 2, 3), (145, 2, 4), (195, 2, 5),
                     (245, 1, 6), (295, 1, 0)], id="min 1: patch 0 only back at min"),
])
def test_listener_forces_the_state_only_at_min_runners(
        minimum: int, expected: list[tuple[float, int, int]]) -> None:
    patches: list[tuple[float, int, int]] = []
    run_listener(trace_of((5, 200)), {"default": replace(TARGET, min_replicas=minimum)},
                 SETTINGS, patched=lambda at, name, replicas, patch_id: patches.append(
                     (at, replicas, patch_id)))
    assert [p for p in patches if p[0] <= 300] == expected
    assert patches[-1][1:] == (minimum, 0)  # quiet at the end: the state forced at min


def test_hra_polls_every_minute() -> None:
    outcome = run_hra(TRACE, {"default": TARGET}, SETTINGS)
    # job 0 (at 5) is seen by the poll at 60, its runner is ready at 105
    assert outcome.waits[0] == 60 - 5 + 45
    assert len(outcome.waits) == 3 and all(w <= 60 + 45 for w in outcome.waits)
    # replicas are kept 10 minutes after the last scale-up, finished runners replaced
    assert outcome.idle_seconds > 0 and outcome.runner_seconds > ORACLE_SECONDS


def test_a_gitops_poll_makes_waits_longer_than_a_notified_sync() -> None:
    polled = run_gitscale(TRACE, {"default": TARGET}, replace(SETTINGS, sync_poll=180),
                          "target")
    # commits at 10, 100 and 1010 are applied at the next 3-minute poll: 180, 180, 1080
    assert polled.waits == [180 + 45 - 5, 180 + 45 - 100, 1080 + 45 - 1003]
    notified = run_gitscale(TRACE, {"default": TARGET}, SETTINGS, "target")
    assert all(p > n for p, n in zip(polled.waits, notified.waits))


def test_the_drain_tail_runs_every_job_under_saturation() -> None:
    """Max 1 and three 1000 s jobs at once: the last starts after the trace's nominal end
    (its span plus 30 minutes after the last job could end), so the run goes on until it has
    run; no strategy looks cheaper than the oracle by the jobs it never ran."""
    saturated = trace_of((0, 1000), (1, 1000), (2, 1000), hours=0.1)
    one = replace(TARGET, max_replicas=1)
    oracle_seconds = oracle(saturated, SETTINGS).runner_seconds
    for outcome in (run_gitscale(saturated, {"default": one}, SETTINGS, "max 1"),
                    run_listener(saturated, {"default": one}, SETTINGS),
                    run_hra(saturated, {"default": one}, SETTINGS)):
        assert outcome.unstarted == 0, outcome.name
        assert len(outcome.waits) == 3 and max(outcome.waits) > 2000, outcome.name
        assert outcome.runner_seconds >= oracle_seconds, outcome.name


def test_jobs_no_runner_can_take_are_reported_as_never_started() -> None:
    nothing = replace(TARGET, max_replicas=0)
    outcome = run_gitscale(TRACE, {"default": nothing}, SETTINGS, "max 0")
    assert outcome.unstarted == 3 and outcome.runner_seconds == 0
    # the run stopped at its limit: every job run one after another would have ended by then
    assert min(outcome.waits) >= sum(45 + 60 + 60 for _ in range(3))


def test_polling_and_webhook_mode_keep_the_total_limit() -> None:
    """limits.maxTotalReplicas (``Settings.max_total_replicas``) shared as a pass shares it:
    4 jobs of 10 minutes on each of two sets, at most 2 runners at any time, every job run."""
    from gitscale.simulate.strategies import run_serve

    jobs = trace_of(*[(0, 600, name) for name in ("a", "b") for _ in range(4)], hours=2)
    capped = replace(SETTINGS, max_total_replicas=2)
    for strategy in (run_gitscale, run_serve):
        outcome = strategy(jobs, {"a": TARGET, "b": TARGET}, capped, "capped")
        totals = [sum(samples) for samples in zip(*(
            [runners for _, runners, _, _ in series] for series in outcome.series.values()))]
        assert max(totals) == 2, strategy.__name__
        assert outcome.unstarted == 0 and len(outcome.waits) == 8
        free = strategy(jobs, {"a": TARGET, "b": TARGET}, SETTINGS, "free")
        assert max(free.waits) < 120 < min(sorted(outcome.waits)[2:])


def test_the_total_limit_is_harder_than_the_scale_down_delay() -> None:
    """Set a keeps 6 idle runners until 300 s (a schedule's minimum), and its scale-down delay
    holds them until 600 s; b's 8 jobs arrive at 310 s, limits.maxTotalReplicas is 8. The
    limit is harder than the delay: a's idle runners go (patch 0) and b runs all 8 jobs at
    once, never more than 8 runners in all. (Shared on what the delay held, a kept its 6 and
    b got 5 of 8 runners beside them: 11 runners, 3 jobs waited 345 s.)"""
    from datetime import timedelta

    from gitscale.core.policy import Policy, Schedule
    from gitscale.simulate.strategies import run_serve
    from gitscale.simulate.trace import DEFAULT_START

    warm = Schedule("warm", DEFAULT_START - timedelta(hours=1),
                    timedelta(hours=1, seconds=300), min_replicas=6)
    held = Policy(0, 200, 0, scale_down_delay=timedelta(minutes=10), schedules=(warm,))
    jobs = trace_of(*[(310, 600, "b") for _ in range(8)], (3000, 60, "a"), hours=1)
    capped = replace(SETTINGS, max_total_replicas=8, sample_every=5)
    for strategy in (run_gitscale, run_serve):
        outcome = strategy(jobs, {"a": held, "b": TARGET}, capped, "capped")
        a, b = ([runners for _, runners, _, _ in outcome.series[n]] for n in "ab")
        assert max(x + y for x, y in zip(a, b, strict=True)) == 8, strategy.__name__
        assert max(a) == 6 and max(b) == 8
        assert outcome.unstarted == 0 and max(outcome.waits) == 10 + 45, strategy.__name__
