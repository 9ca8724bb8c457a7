"""The pure policy: targets, delays, steps, schedules and the patch-ID rules."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitscale.core.decide import FOREVER, decide, drain, resume, settled_until, wanted
from gitscale.core.forecast import Forecast
from gitscale.core.model import NO_WHY, Current, Demand, Drain, Reason, Why, next_patch_id
from gitscale.core.policy import Policy, Schedule
from gitscale.runnerset_api import PATCH_ID_MAX

NOW = datetime(2026, 11, 23, 9, 30, tzinfo=timezone.utc)  # a Monday
D = Demand


def current_after(decision, demand, now=NOW, previous=None):  # type: ignore[no-untyped-def]
    """What the manifest holds after a decision is written (as the engine records it)."""
    return (previous or Current(None, None)).after(decision, demand, now)


def test_listener_sequence_min1_max3_buffer1() -> None:
    """actions-runner-controller's scale-set listener sequence (min 1, max 3, buffer 1:
    target = min(min + assigned, max)), with patch IDs written to git."""
    policy = Policy(min_replicas=1, max_replicas=3, buffer=1)
    state = Current(replicas=1, patch_id=None)
    steps = [
        (D(0, 0), 1, 0, Reason.FIRST_WRITE),
        (D(1, 1), 3, 1, Reason.SCALE_UP),  # demand 2
        (D(0, 0), 1, 2, Reason.SCALE_DOWN),  # jobs completed
        (D(0, 0), 1, 0, Reason.QUIET_RESET),  # nothing changed: self-correct
        (D(5, 0), 3, 1, Reason.SCALE_UP),  # capped at max
    ]
    for demand, replicas, patch, reason in steps:
        decision = decide(state, demand, policy, NOW)
        assert decision.write
        assert (decision.replicas, decision.patch_id, decision.reason) == (replicas, patch, reason)
        state = current_after(decision, demand, previous=state)
    # A further quiet pass at max writes nothing.
    assert not decide(state, D(5, 0), policy, NOW).write


@pytest.mark.parametrize(
    ("policy", "demand", "have", "want"),
    [
        pytest.param(Policy(0, 10, 0), D(0, 0), 3, 0, id="zero-demand-to-min"),
        pytest.param(Policy(0, 10, 0), D(4, 2), 0, 6, id="queued-plus-running"),
        pytest.param(Policy(0, 10, 2), D(4, 2), 0, 8, id="buffer-added"),
        pytest.param(Policy(0, 5, 2), D(4, 2), 0, 5, id="capped-at-max"),
        pytest.param(Policy(3, 10, 0), D(1, 0), 0, 3, id="raised-to-min"),
        pytest.param(Policy(2, 10, 2), D(0, 0), 0, 2, id="buffer-equals-min-arc-behaviour"),
        pytest.param(Policy(2, 10, 2), D(5, 0), 0, 7, id="arc-min-plus-assigned"),
        pytest.param(Policy(0, 0, 0), D(9, 9), 4, 0, id="max-zero"),
        pytest.param(Policy(0, 20, 0, max_step_up=3), D(10, 0), 2, 5, id="step-up-limit"),
        pytest.param(Policy(0, 20, 0, max_step_down=2), D(0, 0), 10, 8, id="step-down-limit"),
        pytest.param(Policy(0, 20, 0, max_step_down=5), D(0, 0), 3, 0, id="step-down-not-binding"),
        pytest.param(Policy(0, 4, 0, max_step_down=1), D(0, 0), 9, 4, id="max-beats-step-limit"),
        # a step within the limit is taken whole (the limit caps the change, not the count)
        pytest.param(Policy(0, 20, 0, max_step_down=5), D(8, 0), 10, 8,
                     id="step-down-within-the-limit"),
        pytest.param(Policy(0, 20, 0, max_step_up=3), D(4, 0), 2, 4, id="step-up-within-the-limit"),
        pytest.param(Policy(0, 20, 0, max_step_up=3), D(5, 0), 2, 5, id="step-up-at-the-limit"),
    ],
)
def test_target(policy: Policy, demand: Demand, have: int, want: int) -> None:
    decision = decide(Current(have, 7, None, "x"), demand, policy, NOW)
    assert decision.replicas == want
    assert decision.write == (want != have) or decision.reason == Reason.QUIET_RESET


def test_scale_down_held_by_delay_then_released() -> None:
    policy = Policy(0, 10, 0, scale_down_delay=timedelta(minutes=10))
    state = Current(5, 3, NOW - timedelta(minutes=4), D(5, 0).fingerprint)
    held = decide(state, D(0, 0), policy, NOW)
    assert held.replicas == 5
    assert "held until" in held.detail
    later = decide(state, D(0, 0), policy, NOW + timedelta(minutes=6, seconds=1))
    assert (later.replicas, later.patch_id, later.reason) == (0, 4, Reason.SCALE_DOWN)


def test_delay_never_holds_above_max() -> None:
    weekday = Schedule("day", datetime(2026, 11, 23, 8, tzinfo=timezone.utc), timedelta(hours=1),
                       max_replicas=2)
    policy = Policy(0, 10, 0, scale_down_delay=timedelta(hours=1), schedules=(weekday,))
    state = Current(6, 3, NOW - timedelta(minutes=1), D(6, 0).fingerprint)
    decision = decide(state, D(6, 0), policy, datetime(2026, 11, 23, 8, 30, tzinfo=timezone.utc))
    assert decision.replicas == 2


def test_scale_up_is_never_delayed() -> None:
    policy = Policy(0, 10, 0, scale_down_delay=timedelta(hours=1))
    state = Current(1, 3, NOW, "x")
    assert decide(state, D(4, 0), policy, NOW).replicas == 4


def test_dirty_reaffirm_and_quiet_reset_happen_once() -> None:
    policy = Policy(0, 10, 0)
    jobs_a = D(1, 1, frozenset({"1", "2"}))
    jobs_b = D(1, 1, frozenset({"2", "3"}))  # same counts, one job finished, one started
    state = Current(2, 9, None, jobs_a.fingerprint)
    decision = decide(state, jobs_b, policy, NOW)
    assert (decision.replicas, decision.patch_id, decision.reason) == (2, 10, Reason.REAFFIRM)
    state = current_after(decision, jobs_b)
    assert not decide(state, jobs_b, policy, NOW).write  # not at min: nothing to do


def test_quiet_reset_only_once() -> None:
    policy = Policy(1, 10, 0)
    state = Current(1, 5, None, D(0, 0).fingerprint)
    first = decide(state, D(0, 0), policy, NOW)
    assert (first.write, first.patch_id, first.reason) == (True, 0, Reason.QUIET_RESET)
    second = decide(current_after(first, D(0, 0)), D(0, 0), policy, NOW)
    assert not second.write


def at(clock: str) -> datetime:
    return datetime.fromisoformat(f"2026-11-23T{clock}+00:00")


def replay(policy: Policy, steps: list[tuple[str, Demand]]) -> list[tuple[int, int | None, str]]:
    """Each pass's (replicas, patch ID, reason) as written, or the state left when no write."""
    state, seen = Current(0, None), []
    for clock, demand in steps:
        decision = decide(state, demand, policy, at(clock))
        state = state.after(decision, demand, at(clock))
        seen.append((state.replicas or 0, state.patch_id,
                     decision.reason.value if decision.write else "-"))
    return seen


def test_defect_scale_down_is_not_refilled_during_the_delay() -> None:
    """Issue 7, defect 1: 50 runners for a burst, jobs draining during the scale-down delay.

    Before: 09:04 re-affirmed 50 (patch 3) while only 30 jobs ran, so the controller refilled
    ~20 finished slots with idle runners, and the scale-down at 09:06 was written with patch 4,
    which never removes them; they lived until 09:31:30. Now no write refills a slot no job
    needs, and patch 0 follows as soon as nothing waits and the delay has run out.
    """
    policy = Policy(0, 100, 0, scale_down_delay=timedelta(minutes=5))
    seen = replay(policy, [("09:00:00", D(0, 0)), ("09:00:30", D(50, 0)),
                           ("09:02:00", D(0, 50)), ("09:04:00", D(0, 30)),
                           ("09:06:00", D(0, 3)), ("09:06:30", D(0, 3)),
                           ("09:31:00", D(0, 0)), ("09:31:30", D(0, 0))])
    assert seen == [(0, 0, "first-write"), (50, 1, "scale-up"),
                    (50, 1, "-"),  # the jobs started: they have their runners, no commit
                    (50, 1, "-"),  # 20 finished: held, and their slots are NOT refilled
                    (3, 2, "scale-down"), (3, 0, "quiet-reset"),
                    (0, 1, "scale-down"), (0, 0, "quiet-reset")]


def test_defect_jobs_waiting_during_the_delay_get_runners_not_the_held_count() -> None:
    """A job queued while a scale-down is held: the write is at demand, not at the held 50."""
    policy = Policy(0, 100, 0, scale_down_delay=timedelta(minutes=5))
    seen = replay(policy, [("09:00:00", D(0, 0)), ("09:00:30", D(50, 0)),
                           ("09:04:00", D(0, 30)), ("09:04:10", D(2, 30))])
    assert seen[-2] == (50, 1, "-")
    assert seen[-1] == (32, 2, "scale-down")


def test_defect_buffer_above_min_still_gets_patch_zero() -> None:
    """Issue 7, defect 2: with buffer > min the quiet reset tested ``target == min`` and never
    fired again, so the controller never removed a runner. Now quiet means "nothing waits"."""
    policy = Policy(0, 100, 2, scale_down_delay=timedelta(minutes=5))
    seen = replay(policy, [("09:00:00", D(0, 0)), ("09:00:30", D(40, 0)),
                           ("09:06:00", D(0, 0)), ("09:06:30", D(0, 0)),
                           ("09:07:00", D(0, 0)), ("10:07:00", D(0, 0))])
    assert seen == [(2, 0, "first-write"), (42, 1, "scale-up"), (2, 2, "scale-down"),
                    (2, 0, "quiet-reset"), (2, 0, "-"), (2, 0, "-")]


def test_quiet_reset_waits_for_the_scale_down_delay() -> None:
    policy = Policy(0, 100, 2, scale_down_delay=timedelta(minutes=5))
    seen = replay(policy, [("09:00:00", D(0, 0)), ("09:00:30", D(3, 0)),
                           ("09:01:30", D(0, 3)), ("09:05:40", D(0, 3))])
    assert seen[2] == (5, 1, "-")  # started, nothing waits, but within the delay
    assert seen[3] == (5, 0, "quiet-reset")


def test_completed_job_alone_needs_no_commit() -> None:
    policy = Policy(0, 100, 0)
    state = Current(5, 4, None, D(0, 5).fingerprint)
    assert decide(state, D(0, 5), policy, NOW).reason == Reason.QUIET_RESET
    state = Current(5, 0, None, D(0, 5).fingerprint)
    decision = decide(state, D(0, 4), policy, NOW)
    assert (decision.write, decision.replicas, decision.patch_id) == (True, 4, 1)
    held = Policy(0, 100, 0, scale_down_delay=timedelta(minutes=5))
    assert not decide(Current(5, 3, NOW, D(0, 5).fingerprint), D(0, 4), held, NOW).write


def test_first_write_even_when_replicas_match() -> None:
    decision = decide(Current(2, None), D(2, 0), Policy(0, 10, 0), NOW)
    assert (decision.write, decision.replicas, decision.patch_id) == (True, 2, 0)
    assert decision.reason == Reason.FIRST_WRITE


def test_missing_replicas_is_a_first_write() -> None:
    decision = decide(Current(None, 4), D(1, 0), Policy(0, 10, 0), NOW)
    assert (decision.write, decision.replicas, decision.patch_id) == (True, 1, 0)


@pytest.mark.parametrize(("have", "demand", "scaled_up"), [
    pytest.param(None, 3, True, id="no-replicas-to-3"),
    pytest.param(None, 0, False, id="no-replicas-to-0"),
    pytest.param(None, 1, True, id="no-replicas-to-1"),
    pytest.param(1, 3, True, id="1-to-3"),
    pytest.param(3, 3, False, id="3-to-3"),
])
def test_a_first_write_above_what_runs_starts_the_scale_down_delay(
        have: int | None, demand: int, scaled_up: bool) -> None:
    """A file without replicas runs none (a RunnerSet's default): its first write to 3 is a
    scale-up, so the next pass holds a scale-down for scaleDownDelay as after any other."""
    policy = Policy(0, 10, 0, scale_down_delay=timedelta(minutes=5))
    first = decide(Current(have, None), D(demand, 0), policy, NOW)
    assert first.scaled_up is scaled_up
    after = current_after(first, D(demand, 0))
    later = decide(after, D(0, 0), policy, NOW + timedelta(minutes=1))
    # held after a scale-up; scaled down at once otherwise (nothing to do from 0)
    assert later.write == (not scaled_up and first.replicas > 0)


def test_unknown_demand_never_scales() -> None:
    decision = decide(Current(5, 3, None, "x"), None, Policy(0, 10, 0), NOW)
    assert not decision.write
    assert decision.reason == Reason.DEMAND_UNKNOWN


HELD_OFF = (False, 4, 3)  # left as it is: replicas 4, patch 3
PAUSED = 'paused (annotation gitscale.dev/paused: "true"): left alone'
UNKNOWN = "demand unknown: left untouched (never scaled down on a guess)"
DRAINED = Why(drain=Drain.DRAINED)


@pytest.mark.parametrize(("current", "demand", "expected"), [
    pytest.param(Current(4, 3, None, "x", paused=True), D(9, 0),
                 (*HELD_OFF, Reason.PAUSED, PAUSED, NO_WHY), id="paused"),
    pytest.param(Current(4, 3, None, "x", paused=True), None,
                 (*HELD_OFF, Reason.PAUSED, PAUSED, NO_WHY), id="paused-demand-unknown"),
    pytest.param(Current(4, 3, None, "x", drained=True, paused=True), D(9, 0),
                 (*HELD_OFF, Reason.PAUSED, PAUSED, NO_WHY), id="paused-beats-drained"),
    pytest.param(Current(None, None, paused=True), D(9, 0),
                 (False, 0, None, Reason.PAUSED, PAUSED, NO_WHY), id="paused-without-replicas"),
    pytest.param(Current(4, 3, None, "x"), None,
                 (*HELD_OFF, Reason.DEMAND_UNKNOWN, UNKNOWN, NO_WHY), id="demand-unknown"),
    pytest.param(Current(None, 3), None,
                 (False, 0, 3, Reason.DEMAND_UNKNOWN, UNKNOWN, NO_WHY),
                 id="demand-unknown-without-replicas"),
    pytest.param(Current(3, 4, None, "x", drained=True), D(9, 0),
                 (True, 0, 0, Reason.DRAIN, "drained: held at 0 until resumed", DRAINED),
                 id="drained-written-back-to-0-0"),
    pytest.param(Current(0, 5, None, "x", drained=True), D(9, 0),
                 (True, 0, 0, Reason.DRAIN, "drained: held at 0 until resumed", DRAINED),
                 id="drained-patch-id-edited"),
    pytest.param(Current(2, 0, None, "x", drained=True), D(9, 0),
                 (True, 0, 0, Reason.DRAIN, "drained: held at 0 until resumed", DRAINED),
                 id="drained-replicas-edited"),
    pytest.param(Current(0, 0, None, "x", drained=True), D(9, 0),
                 (False, 0, 0, Reason.UNCHANGED, "drained", DRAINED), id="drained-and-at-0-0"),
])
def test_sets_demand_does_not_scale(current: Current, demand: Demand | None,
                                    expected: tuple[object, ...]) -> None:
    """Paused: left alone. Demand unknown: left untouched. Drained: (0, 0) whatever the
    demand (README, "Holding a set, and a global cap")."""
    decision = decide(current, demand, Policy(1, 10, 1), NOW)
    assert (decision.write, decision.replicas, decision.patch_id, decision.reason,
            decision.detail, decision.why) == expected


DRAIN_SAYS = "drained by hand: replicas 0, patch 0; held until `gitscale drain --resume`"


@pytest.mark.parametrize(("verb", "current", "expected"), [
    pytest.param(drain, Current(4, 9, None, "x"), (True, 0, 0, Reason.DRAIN, DRAIN_SAYS, DRAINED),
                 id="drain"),
    pytest.param(drain, Current(0, 0, None, "x"), (True, 0, 0, Reason.DRAIN, DRAIN_SAYS, DRAINED),
                 id="drain-at-0-0-still-marks-it-drained"),
    pytest.param(drain, Current(0, 0, None, "x", drained=True),
                 (False, 0, 0, Reason.UNCHANGED, "already drained", DRAINED),
                 id="already-drained"),
    pytest.param(drain, Current(0, 5, None, "x", drained=True),
                 (True, 0, 0, Reason.DRAIN, DRAIN_SAYS, DRAINED), id="drained-but-patch-edited"),
    pytest.param(drain, Current(3, 0, None, "x", drained=True),
                 (True, 0, 0, Reason.DRAIN, DRAIN_SAYS, DRAINED), id="drained-but-replicas-edited"),
    pytest.param(resume, Current(4, 9, None, "x"),
                 (False, 4, 9, Reason.UNCHANGED, "not drained", Why(drain=Drain.NOT_DRAINED)),
                 id="resume-a-set-not-drained"),
    pytest.param(resume, Current(None, None),
                 (False, 0, None, Reason.UNCHANGED, "not drained", Why(drain=Drain.NOT_DRAINED)),
                 id="resume-a-set-never-written"),
    pytest.param(resume, Current(0, 0, None, "x", drained=True),
                 (True, 0, 0, Reason.RESUME, "resumed: the next pass scales from demand again",
                  NO_WHY), id="resume"),
    pytest.param(resume, Current(2, 0, None, "x", drained=True),
                 (True, 2, 0, Reason.RESUME, "resumed: the next pass scales from demand again",
                  NO_WHY), id="resume-keeps-the-count-written-by-hand"),
])
def test_drain_and_resume(verb, current: Current,  # type: ignore[no-untyped-def]
                          expected: tuple[object, ...]) -> None:
    decision = verb(current)
    assert (decision.write, decision.replicas, decision.patch_id, decision.reason,
            decision.detail, decision.why) == expected


DAY = Schedule("day", NOW - timedelta(hours=1), timedelta(hours=2), max_replicas=4)
REAFFIRMED = "jobs wait and others started or completed: re-affirm so finished slots refill"


@pytest.mark.parametrize(("policy", "current", "demand", "cap", "expected", "detail"), [
    pytest.param(Policy(3, 10, 0), Current(3, 3, None, D(1, 0).fingerprint), D(1, 0), None,
                 (False, 3, Reason.UNCHANGED), "demand 1 (queued 1, running 0), raised to min 3",
                 id="raised-to-min"),
    pytest.param(Policy(3, 10, 0), Current(3, 3, None, D(3, 0).fingerprint), D(3, 0), None,
                 (False, 3, Reason.UNCHANGED), "demand 3 (queued 3, running 0)",
                 id="demand-at-min-is-not-raised"),
    pytest.param(Policy(0, 10, 2), Current(2, 3, None, "x"), D(12, 3), None,
                 (True, 10, Reason.SCALE_UP),
                 "demand 15 (queued 12, running 3) + buffer 2, capped at max 10",
                 id="buffer-and-max"),
    pytest.param(Policy(0, 10, 0), Current(10, 3, None, D(10, 0).fingerprint), D(10, 0), None,
                 (False, 10, Reason.UNCHANGED), "demand 10 (queued 10, running 0)",
                 id="demand-at-max-is-not-capped"),
    pytest.param(Policy(0, 10, 0, schedules=(DAY,)), Current(2, 3, None, "x"), D(12, 3), None,
                 (True, 4, Reason.SCALE_UP),
                 "demand 15 (queued 12, running 3), capped at max 4 (schedule 'day')",
                 id="a-schedule-says-its-name"),
    pytest.param(Policy(0, 10, 0), Current(6, 3, None, D(9, 0).fingerprint), D(9, 0), 6,
                 (False, 6, Reason.UNCHANGED),
                 "demand 9 (queued 9, running 0), capped at 6 by limits.maxTotalReplicas "
                 "(shared in proportion to demand, then to forecasts)",
                 id="the-global-limit"),
    pytest.param(Policy(0, 10, 0), Current(5, 3, None, D(5, 0).fingerprint), D(5, 0), 5,
                 (False, 5, Reason.UNCHANGED), "demand 5 (queued 5, running 0)",
                 id="a-share-of-all-it-wants-is-no-cap"),
    pytest.param(Policy(0, 20, 0, max_step_up=3), Current(2, 3, None, "x"), D(10, 0), None,
                 (True, 5, Reason.SCALE_UP), "demand 10 (queued 10, running 0); step limited to +3",
                 id="step-up-limited"),
    pytest.param(Policy(0, 20, 0, max_step_up=3), Current(2, 3, None, "x"), D(5, 0), None,
                 (True, 5, Reason.SCALE_UP), "demand 5 (queued 5, running 0)",
                 id="a-step-up-at-the-limit-is-not-limited"),
    pytest.param(Policy(0, 20, 0, max_step_down=2), Current(10, 3, None, "x"), D(0, 0), None,
                 (True, 8, Reason.SCALE_DOWN), "demand 0 (queued 0, running 0); step limited to -2",
                 id="step-down-limited"),
    pytest.param(Policy(0, 20, 0, max_step_down=2), Current(10, 3, None, D(0, 8).fingerprint),
                 D(0, 8), None, (True, 8, Reason.SCALE_DOWN), "demand 8 (queued 0, running 8)",
                 id="a-step-down-at-the-limit-is-not-limited"),
    pytest.param(Policy(0, 10, 0, scale_down_delay=timedelta(minutes=10)),
                 Current(5, 3, NOW - timedelta(minutes=4), "x"), D(0, 0), None,
                 (False, 5, Reason.UNCHANGED),
                 "demand 0 (queued 0, running 0); scale-down held until "
                 "2026-11-23T09:36:00+00:00 (scaleDownDelay)", id="held-by-the-delay"),
    pytest.param(Policy(0, 10, 0, scale_down_delay=timedelta(minutes=10)),
                 Current(5, 3, datetime(2030, 1, 1, tzinfo=timezone.utc), "x"), D(0, 0), None,
                 (True, 0, Reason.SCALE_DOWN),
                 "demand 0 (queued 0, running 0); clock skew: last scale-up "
                 "2030-01-01T00:00:00+00:00 (annotation gitscale.dev/last-scale-up) is in the "
                 "future of this pass's clock 2026-11-23T09:30:00+00:00 by more than 5 minutes: "
                 "the scale-down delay is not held on it", id="clock-skew"),
    pytest.param(Policy(0, 10, 0), Current(2, 3, None, D(0, 2).fingerprint), D(0, 2), None,
                 (True, 2, Reason.QUIET_RESET),
                 "demand 2 (queued 0, running 2); nothing waits: patch 0 lets the controller "
                 "remove idle runners beyond the count", id="quiet-reset"),
    pytest.param(Policy(0, 10, 0), Current(2, 9, None, D(1, 1, frozenset("12")).fingerprint),
                 D(1, 1, frozenset("23")), None, (True, 2, Reason.REAFFIRM),
                 f"demand 2 (queued 1, running 1); {REAFFIRMED}", id="re-affirm"),
    pytest.param(Policy(0, 10, 0), Current(10, 3, None, "x", backlog=0), D(5, 10), None,
                 (True, 10, Reason.REAFFIRM),
                 f"demand 15 (queued 5, running 10), capped at max 10; {REAFFIRMED}; backlog 5: "
                 "the controller refills up to 5 finished slot(s) without a new write",
                 id="a-backlog-is-said-after-the-reason"),
])
def test_the_detail_says_how_the_count_was_reached(
        policy: Policy, current: Current, demand: Demand, cap: int | None,
        expected: tuple[bool, int, Reason], detail: str) -> None:
    """The detail is the set's line in `plan` and its reason in the commit body."""
    decision = decide(current, demand, policy, NOW, cap)
    assert (decision.write, decision.replicas, decision.reason) == expected
    assert decision.detail == detail


@pytest.mark.parametrize(("current", "demand", "policy", "forecast", "expected"), [
    pytest.param(Current(None, None), D(5, 0), Policy(2, 10, 0), None, (2, 5, 5),
                 id="never-written"),
    pytest.param(Current(None, None), D(5, 0), Policy(0, 10, 0, max_step_up=2), None, (0, 2, 2),
                 id="no-replicas-is-none-running"),
    pytest.param(Current(8, 3, NOW - timedelta(minutes=4)), D(0, 0),
                 Policy(2, 10, 0, scale_down_delay=timedelta(minutes=10)), None, (2, 2, 8),
                 id="held-by-the-delay"),
    pytest.param(Current(8, 3), D(1, 0), Policy(0, 10, 0, max_step_down=2), None, (0, 1, 6),
                 id="kept-by-the-step-down-limit"),
    pytest.param(Current(8, 3), D(1, 0), Policy(0, 5, 0, max_step_down=2), None, (0, 1, 5),
                 id="the-step-down-limit-keeps-no-more-than-the-max"),
    pytest.param(Current(2, 3), D(9, 0), Policy(0, 10, 0, max_step_up=3), None, (0, 5, 5),
                 id="a-step-up-limit-cuts-what-is-asked"),
    pytest.param(Current(8, 3, NOW - timedelta(minutes=4)), D(0, 0),
                 Policy(0, 10, 0, schedules=(Schedule("s", NOW, timedelta(hours=1), 
                                                      min_replicas=3),)), None, (3, 3, 3),
                 id="a-schedules-minimum"),
    pytest.param(Current(2, 3), D(3, 0), Policy(0, 10, 0), Forecast(4, "forecast +4"),
                 (0, 7, 7), id="with-a-forecast"),
])
def test_wanted_is_what_limits_share(current: Current, demand: Demand, policy: Policy,
                                     forecast: Forecast | None,
                                     expected: tuple[int, int, int]) -> None:
    """(minimum, asked, held) a set would aim for without a global cap: ``asked`` is what
    demand asks inside the bounds (schedules, step-up limit and forecast included), ``held``
    the decision's target, which the scale-down delay and the step-down limit keep above it."""
    assert wanted(current, demand, policy, NOW, forecast) == expected


def test_wanted_holds_from_a_later_scale_up_only_on_a_pinned_clock() -> None:
    state = Current(8, 3, NOW + timedelta(minutes=30))
    policy = Policy(0, 10, 0, scale_down_delay=timedelta(minutes=10))
    assert wanted(state, D(0, 0), policy, NOW, pinned_clock=True) == (0, 0, 8)
    assert wanted(state, D(0, 0), policy, NOW) == (0, 0, 0)  # clock skew: not held


def test_drained_set_is_held_at_zero() -> None:
    state = Current(3, 4, None, "x", drained=True)
    decision = decide(state, D(9, 0), Policy(1, 10, 1), NOW)
    assert (decision.write, decision.replicas, decision.patch_id) == (True, 0, 0)
    assert not decide(Current(0, 0, None, "x", drained=True), D(9, 0), Policy(), NOW).write


@pytest.mark.parametrize(
    ("previous", "expected"),
    [
        pytest.param(None, 1, id="none"),
        pytest.param(0, 1, id="zero"),
        pytest.param(41, 42, id="plus-one"),
        pytest.param(PATCH_ID_MAX - 1, PATCH_ID_MAX, id="to-max"),
        pytest.param(PATCH_ID_MAX, 1, id="wraps-to-one"),
    ],
)
def test_next_patch_id(previous: int | None, expected: int) -> None:
    assert next_patch_id(previous) == expected


def test_change_at_max_patch_id_wraps() -> None:
    decision = decide(Current(1, PATCH_ID_MAX, None, "x"), D(3, 0), Policy(0, 10, 0), NOW)
    assert decision.patch_id == 1


class TestSchedules:
    weekdays = Schedule(
        "weekdays", datetime(2026, 1, 5, 8, 0, tzinfo=timezone(timedelta(hours=1))),
        timedelta(hours=10), "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR", "Europe/Berlin",
        min_replicas=2, max_replicas=30)
    night = Schedule("night", datetime(2026, 1, 1, 22, tzinfo=timezone.utc), timedelta(hours=8),
                     "FREQ=DAILY", max_replicas=1)

    @pytest.mark.parametrize(
        ("when", "bounds"),
        [
            pytest.param("2026-11-23T09:30:00+00:00", (2, 30, "weekdays"), id="monday-morning"),
            pytest.param("2026-11-23T06:59:00+00:00", (0, 10, None), id="before-window"),
            pytest.param("2026-11-23T17:00:00+00:00", (0, 10, None), id="after-18h-berlin"),
            pytest.param("2026-11-22T10:00:00+00:00", (0, 10, None), id="sunday"),
            pytest.param("2026-07-06T06:30:00+00:00", (2, 30, "weekdays"), id="summer-time"),
            pytest.param("2026-11-24T23:00:00+00:00", (0, 1, "night"), id="night-window"),
        ],
    )
    def test_bounds(self, when: str, bounds: tuple[int, int, str | None]) -> None:
        policy = Policy(0, 10, 0, schedules=(self.weekdays, self.night))
        assert policy.bounds(datetime.fromisoformat(when)) == bounds

    # 20:00 CET on the eve of the spring change (02:00 → 03:00 on 2026-03-29), 10 hours: with
    # a timezone the window ends at 06:00 wall clock, now CEST (04:00 UTC); without one, 10
    # hours after its start (05:00 UTC). A one-off window follows the same rule as a recurring
    # one.
    @pytest.mark.parametrize("recurrence", [
        pytest.param(None, id="one-off"),
        pytest.param("FREQ=DAILY", id="daily"),
    ])
    @pytest.mark.parametrize(("timezone_", "when", "active"), [
        pytest.param("Europe/Berlin", "2026-03-28T19:00:00+00:00", True, id="berlin-at-its-start"),
        pytest.param("Europe/Berlin", "2026-03-28T18:59:59+00:00", False,
                     id="berlin-a-second-before"),
        pytest.param("Europe/Berlin", "2026-03-29T03:59:59+00:00", True,
                     id="berlin-before-06-summer-time"),
        pytest.param("Europe/Berlin", "2026-03-29T04:00:00+00:00", False,
                     id="berlin-ends-at-06-wall-clock"),
        pytest.param(None, "2026-03-28T19:00:00+00:00", True, id="fixed-offset-at-its-start"),
        pytest.param(None, "2026-03-29T04:59:59+00:00", True, id="fixed-offset-10-hours-on"),
        pytest.param(None, "2026-03-29T05:00:00+00:00", False, id="fixed-offset-ends"),
    ])
    def test_a_window_keeps_its_wall_clock_across_a_dst_change(
            self, recurrence: str | None, timezone_: str | None, when: str,
            active: bool) -> None:
        night = Schedule("night", datetime(2026, 3, 28, 20, tzinfo=timezone(timedelta(hours=1))),
                         timedelta(hours=10), recurrence, timezone_, max_replicas=1)
        policy = Policy(0, 10, 0, schedules=(night,))
        assert policy.bounds(datetime.fromisoformat(when)) == \
            ((0, 1, "night") if active else (0, 10, None))

    def test_first_active_window_wins(self) -> None:
        always = Schedule("always", datetime(2026, 1, 1, tzinfo=timezone.utc),
                          timedelta(hours=24), "FREQ=DAILY", min_replicas=7)
        policy = Policy(0, 10, 0, schedules=(always, self.weekdays))
        assert policy.bounds(NOW)[2] == "always"

    def test_one_off_window(self) -> None:
        freeze = Schedule("freeze", NOW, timedelta(hours=1), max_replicas=0)
        policy = Policy(0, 10, 0, schedules=(freeze,))
        assert policy.bounds(NOW) == (0, 0, "freeze")  # a window holds its start
        assert policy.bounds(NOW + timedelta(minutes=59))[:2] == (0, 0)
        assert policy.bounds(NOW + timedelta(hours=1))[2] is None
        assert policy.bounds(NOW - timedelta(seconds=1))[2] is None


@settings(max_examples=300, deadline=None)
@given(
    lo=st.integers(0, 20), span=st.integers(0, 20), buffer=st.integers(0, 5),
    have=st.integers(0, 60), patch=st.one_of(st.none(), st.integers(0, PATCH_ID_MAX)),
    queued=st.integers(0, 100), running=st.integers(0, 100),
    step_up=st.one_of(st.none(), st.integers(1, 10)),
    step_down=st.one_of(st.none(), st.integers(1, 10)),
)
def test_invariants(lo: int, span: int, buffer: int, have: int, patch: int | None, queued: int,
                    running: int, step_up: int | None, step_down: int | None) -> None:
    policy = Policy(lo, lo + span, buffer, max_step_up=step_up, max_step_down=step_down)
    decision = decide(Current(have, patch, None, "old"), D(queued, running), policy, NOW)
    assert lo <= decision.replicas <= lo + span  # bounds are hard
    if decision.write:
        assert decision.patch_id is not None and 0 <= decision.patch_id <= PATCH_ID_MAX
        if decision.replicas != have and patch is not None:
            assert decision.patch_id != 0  # only quiet/first/drain writes may say 0
    if step_up is not None and have >= lo and decision.replicas > have:
        assert decision.replicas - have <= step_up
    if step_down is not None and have <= lo + span and decision.replicas < have:
        assert have - decision.replicas <= step_down


def test_a_job_completing_while_others_wait_needs_no_write_when_ids_are_known() -> None:
    """Known ids: only arrivals need runners. Unknown (cold cache): any change counts."""
    policy = Policy(0, 100, 0, scale_down_delay=timedelta(minutes=5))
    before = D(2, 1, frozenset({"1", "2", "3"}))
    state = Current(3, 5, NOW, before.fingerprint, jobs=before.jobs)
    churn = D(2, 1, frozenset({"2", "3", "4"}))  # job 1 completed, job 4 arrived
    finished = D(1, 1, frozenset({"2", "3"}))  # job 1 completed, nothing new
    assert not decide(state, finished, policy, NOW).write  # held, and job 2 has its runner
    assert decide(state, churn, policy, NOW).reason == Reason.REAFFIRM
    cold = Current(3, 5, NOW, before.fingerprint)  # ids not remembered
    decision = decide(cold, finished, policy, NOW)
    assert (decision.write, decision.replicas, decision.reason) == (True, 2, Reason.SCALE_DOWN)
    wrong = Current(3, 5, NOW, before.fingerprint, jobs=frozenset({"9"}))
    assert wrong.job_changes(churn) is None  # ids that do not match the fingerprint are ignored


def test_at_max_a_completion_refills_for_waiting_jobs_but_nothing_else_does() -> None:
    """Jobs starved at max: a completion frees a slot only a write refills; a pass with no
    completion writes nothing (a commit could create no runner)."""
    policy = Policy(0, 3, 0)
    at_write = D(3, 3, frozenset("abcdef"))  # 3 running, 3 waiting, max 3
    state = Current(3, 7, None, at_write.fingerprint, jobs=at_write.jobs)
    assert not decide(state, D(4, 3, frozenset("abcdefg")), policy, NOW).write  # arrival
    refill = decide(state, D(3, 2, frozenset("bcdef")), policy, NOW)  # a completed
    assert (refill.write, refill.replicas, refill.patch_id) == (True, 3, 8)


def test_drain_and_resume_decisions() -> None:
    from gitscale.core.decide import drain, resume

    busy = Current(4, 9, None, "x")
    assert (drain(busy).write, drain(busy).replicas, drain(busy).patch_id) == (True, 0, 0)
    assert not drain(Current(0, 0, None, "x", drained=True)).write
    assert not resume(busy).write
    back = resume(Current(0, 0, None, "x", drained=True))
    assert (back.write, back.reason) == (True, Reason.RESUME)


FUTURE = datetime(2030, 1, 1, tzinfo=timezone.utc)  # a scale-up from a host whose clock ran ahead


@pytest.mark.parametrize(
    ("last_up", "demand", "have", "patch", "want"),
    [
        pytest.param(FUTURE, D(0, 0), 5, 3, (True, 0, 4, Reason.SCALE_DOWN),
                     id="years-ahead-not-held"),
        pytest.param(NOW + timedelta(minutes=6), D(0, 0), 5, 3, (True, 0, 4, Reason.SCALE_DOWN),
                     id="past-the-tolerance-not-held"),
        pytest.param(NOW + timedelta(minutes=4), D(0, 0), 5, 3, (False, 5, 3, Reason.UNCHANGED),
                     id="within-the-tolerance-held"),
        pytest.param(FUTURE, D(0, 2), 2, 3, (True, 2, 0, Reason.QUIET_RESET),
                     id="quiet-reset-not-delayed"),
        pytest.param(FUTURE, D(3, 4), 5, 3, (True, 7, 4, Reason.SCALE_UP),
                     id="scale-up-unaffected"),
    ],
)
def test_a_last_scale_up_in_the_future_is_clock_skew(last_up, demand, have, patch,  # type: ignore[no-untyped-def]
                                                    want) -> None:
    from gitscale.core.decide import CLOCK_SKEW_TOLERANCE

    assert CLOCK_SKEW_TOLERANCE == timedelta(minutes=5)
    policy = Policy(0, 20, 0, scale_down_delay=timedelta(minutes=10))
    state = Current(have, patch, last_scale_up=last_up, fingerprint=demand.fingerprint)
    decision = decide(state, demand, policy, NOW)
    assert (decision.write, decision.replicas, decision.patch_id, decision.reason) == want
    skewed = last_up - NOW > CLOCK_SKEW_TOLERANCE
    assert ("clock skew: last scale-up " + last_up.isoformat() in decision.detail) == skewed
    assert ("held until" in decision.detail) == (not skewed and not decision.write)


@pytest.mark.parametrize(("last_up", "expected"), [
    pytest.param(None, FOREVER, id="no-scale-up-on-record"),
    pytest.param(NOW - timedelta(minutes=4), NOW + timedelta(minutes=6), id="until-the-delay-ends"),
    pytest.param(NOW - timedelta(minutes=10), FOREVER, id="the-delay-ends-now"),
    pytest.param(NOW - timedelta(minutes=11), FOREVER, id="the-delay-ran-out"),
])
def test_settled_until_the_scale_down_delay_ends(last_up: datetime | None,
                                                 expected: datetime) -> None:
    """Once the delay has run out (at its very end too: ``decide`` holds while ``now <
    held_until``) the clock no longer enters the decision."""
    policy = Policy(0, 20, 0, scale_down_delay=timedelta(minutes=10))
    state = Current(5, 3, last_scale_up=last_up)
    assert settled_until(state, policy, NOW) == expected
    if expected is FOREVER:
        assert decide(state, D(0, 0), policy, NOW).reason == Reason.SCALE_DOWN


def test_a_skewed_scale_up_is_not_settled() -> None:
    """A host's clock ignores a stamp beyond the tolerance, a pinned clock (`--now`) holds from
    it: no answer remembered for a span could serve both (they share the state cache)."""
    from gitscale.core.decide import CLOCK_SKEW_TOLERANCE, settled_until

    policy = Policy(0, 20, 0, scale_down_delay=timedelta(minutes=10))
    state = Current(5, 3, last_scale_up=FUTURE)
    assert settled_until(state, policy, NOW) is None
    within = FUTURE - CLOCK_SKEW_TOLERANCE
    assert settled_until(state, policy, within) == FUTURE + timedelta(minutes=10)
    # from then on both clocks hold from the stamp, as the settled answer says
    for pinned in (False, True):
        assert decide(state, D(0, 0), policy, within, pinned_clock=pinned).reason \
            == Reason.UNCHANGED
    assert decide(state, D(0, 0), policy, within - timedelta(seconds=1)).write


@pytest.mark.parametrize(("last_up", "want"), [
    pytest.param(FUTURE, (False, 5, 3, Reason.UNCHANGED), id="years-ahead-held"),
    pytest.param(NOW + timedelta(minutes=30), (False, 5, 3, Reason.UNCHANGED),
                 id="what-if-before-a-scale-up-held"),
    pytest.param(NOW - timedelta(minutes=11), (True, 0, 4, Reason.SCALE_DOWN),
                 id="delay-over-scales-down"),
])
def test_a_pinned_clock_holds_from_a_later_scale_up(last_up: datetime,
                                                   want: tuple[object, ...]) -> None:
    """`--now T` is the user's "now": a scale-up stamped after T is held from, as before the
    clock-skew rule, which is for host clocks."""
    policy = Policy(0, 20, 0, scale_down_delay=timedelta(minutes=10))
    state = Current(5, 3, last_scale_up=last_up, fingerprint=D(0, 0).fingerprint)
    decision = decide(state, D(0, 0), policy, NOW, pinned_clock=True)
    assert (decision.write, decision.replicas, decision.patch_id, decision.reason) == want
    assert "clock skew" not in decision.detail
    assert ("held until " + (last_up + timedelta(minutes=10)).isoformat() in decision.detail) \
        == (not decision.write)


@settings(max_examples=200, deadline=None)
@given(
    lo=st.integers(0, 5), span=st.integers(0, 10), buffer=st.integers(0, 3),
    delay=st.integers(0, 20), have=st.one_of(st.none(), st.integers(0, 20)),
    patch=st.one_of(st.none(), st.integers(0, 5), st.just(PATCH_ID_MAX)),
    backlog=st.one_of(st.none(), st.integers(0, 5)),
    last_up=st.one_of(st.none(), st.integers(-30, 0)),
    queued=st.integers(0, 15), running=st.integers(0, 15),
    step_up=st.one_of(st.none(), st.integers(1, 4)),
    step_down=st.one_of(st.none(), st.integers(1, 4)),
    ids=st.booleans(),
)
def test_passes_on_steady_demand_settle(lo: int, span: int, buffer: int, delay: int,
                                        have: int | None, patch: int | None,
                                        backlog: int | None, last_up: int | None, queued: int,
                                        running: int, step_up: int | None,
                                        step_down: int | None, ids: bool) -> None:
    """Passes a minute apart on the same demand, each reading back what the last wrote: every
    write changes what the file holds, its patch ID is the last + 1 (2³¹−1 wraps to 1) or 0,
    the count stays within the bounds, the writes stop within the delay and the steps, and a
    set left with nothing waiting ends on patch 0 (the controller may remove its idle runners)."""
    policy = Policy(lo, lo + span, buffer, timedelta(minutes=delay), step_up, step_down)
    jobs = frozenset(str(i) for i in range(queued + running)) if ids else None
    demand = D(queued, running, jobs)
    state = Current(have, patch, None if last_up is None else NOW + timedelta(minutes=last_up),
                    "old", backlog=backlog)
    now, writes = NOW, []
    for minute in range(45):
        decision = decide(state, demand, policy, now)
        if decision.write:
            writes.append((minute, decision.replicas, decision.patch_id, decision.reason))
            assert decision.patch_id in (0, next_patch_id(state.patch_id))
            assert (decision.replicas, decision.patch_id, decision.backlog) != \
                (state.replicas, state.patch_id, state.backlog or 0)
            assert lo <= decision.replicas <= lo + span
        state = state.after(decision, demand, now)
        now += timedelta(minutes=1)
    # settled after delay + steps, but for the re-affirms of jobs that still wait with the
    # count covering them (``still_waiting``: a RunnerSet, every 10 minutes at most)
    late = [w for w in writes if w[0] >= 30]
    assert all(w[3] is Reason.REAFFIRM and backlog is not None and queued > 0 for w in late), \
        writes
    assert all(b[0] - a[0] >= 10 for a, b in zip(late, late[1:])), writes
    if queued == 0:
        assert state.patch_id == 0, writes
