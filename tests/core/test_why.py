"""Decision.why: what held or capped a set's count, as values set where decide() makes them
(the delay and until when, the max or the global limit and at what, a drain), so that nothing
has to read them back out of the detail text."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitscale.core.decide import decide, drain, resume
from gitscale.core.model import NO_WHY, Cap, CapBy, Current, Decision, Demand, Drain, Reason, \
    Why
from gitscale.core.policy import Policy, Schedule

NOW = datetime(2026, 11, 23, 9, 30, tzinfo=timezone.utc)  # a Monday
D = Demand
DELAY = Policy(0, 10, 0, scale_down_delay=timedelta(minutes=10))
UP = NOW - timedelta(minutes=4)  # the last scale-up: the delay holds until 09:36
HELD = Why(held_until=UP + timedelta(minutes=10))
DAY = Schedule("day", NOW - timedelta(hours=1), timedelta(hours=2), max_replicas=4)


@pytest.mark.parametrize(("current", "demand", "policy", "cap", "reason", "why"), [
    pytest.param(Current(5, 3, UP, "x"), D(0, 0), DELAY, None, Reason.UNCHANGED, HELD,
                 id="held-by-the-delay"),
    pytest.param(Current(5, 3, UP, "x"), D(0, 0), DELAY, 7, Reason.UNCHANGED, HELD,
                 id="held-under-a-cap-it-does-not-reach"),
    pytest.param(Current(5, 3, NOW - timedelta(minutes=11), "x"), D(0, 0), DELAY, None,
                 Reason.SCALE_DOWN, NO_WHY, id="the-delay-ran-out"),
    pytest.param(Current(5, None, UP, "x"), D(0, 0), DELAY, None, Reason.FIRST_WRITE, HELD,
                 id="held-on-a-first-write"),
    pytest.param(Current(6, 3, UP, "old"), D(2, 0), DELAY, None, Reason.SCALE_DOWN, NO_WHY,
                 id="jobs-wait-written-at-demand-not-held"),
    pytest.param(Current(10, 3, None, D(12, 3).fingerprint), D(12, 3), DELAY, None, Reason.UNCHANGED,
                 Why(cap=Cap(CapBy.MAX_REPLICAS, 10)), id="at-max"),
    pytest.param(Current(2, 3, None, "x"), D(12, 3), DELAY, None, Reason.SCALE_UP,
                 Why(cap=Cap(CapBy.MAX_REPLICAS, 10)), id="scale-up-capped-at-max"),
    pytest.param(Current(2, 3, None, "x"), D(12, 3), Policy(0, 10, 0, schedules=(DAY,)), None,
                 Reason.SCALE_UP, Why(cap=Cap(CapBy.MAX_REPLICAS, 4)),
                 id="capped-at-a-scheduled-max"),
    pytest.param(Current(6, 3, None, D(9, 0).fingerprint), D(9, 0), DELAY, 6, Reason.UNCHANGED,
                 Why(cap=Cap(CapBy.MAX_TOTAL_REPLICAS, 6)), id="capped-by-the-global-limit"),
    pytest.param(Current(6, 3, None, D(20, 0).fingerprint), D(20, 0), DELAY, 6, Reason.UNCHANGED,
                 Why(cap=Cap(CapBy.MAX_TOTAL_REPLICAS, 6)),
                 id="the-global-limit-below-the-max-is-the-cap"),
    pytest.param(Current(6, 3, None, "x"), D(5, 0), DELAY, 6, Reason.SCALE_DOWN, NO_WHY,
                 id="a-cap-above-what-is-wanted-cuts-nothing"),
    pytest.param(Current(2, 3, None, "x"), D(9, 0), Policy(0, 10, 0, max_step_up=3), None,
                 Reason.SCALE_UP, NO_WHY, id="a-step-limit-is-no-cap"),
    pytest.param(Current(3, 3, None, "x"), D(0, 0), Policy(3, 10, 0), None,
                 Reason.QUIET_RESET, NO_WHY, id="raised-to-min-is-no-cap"),
    pytest.param(Current(3, 0, None, D(3, 0).fingerprint), D(3, 0), DELAY, None,
                 Reason.UNCHANGED, NO_WHY, id="demand-met"),
    pytest.param(Current(0, 0, None, "x", drained=True), D(8, 0), DELAY, None,
                 Reason.UNCHANGED, Why(drain=Drain.DRAINED), id="drained"),
    pytest.param(Current(4, 3, None, "x", drained=True), D(8, 0), DELAY, None, Reason.DRAIN,
                 Why(drain=Drain.DRAINED), id="drained-by-hand-written-back-to-0"),
    pytest.param(Current(4, 3, UP, "x", paused=True), D(0, 0), DELAY, None, Reason.PAUSED,
                 NO_WHY, id="paused-says-it-in-its-reason"),
    pytest.param(Current(4, 3, UP, "x"), None, DELAY, None, Reason.DEMAND_UNKNOWN, NO_WHY,
                 id="demand-unknown-says-it-in-its-reason"),
])
def test_decide_sets_what_held_or_capped_the_count(current: Current, demand: Demand | None,
                                                   policy: Policy, cap: int | None,
                                                   reason: Reason, why: Why) -> None:
    decision = decide(current, demand, policy, NOW, cap)
    assert (decision.reason, decision.why) == (reason, why)


@pytest.mark.parametrize(("decision", "why"), [
    pytest.param(drain(Current(4, 9, None, "x")), Why(drain=Drain.DRAINED), id="drain"),
    pytest.param(drain(Current(0, 0, None, "x", drained=True)), Why(drain=Drain.DRAINED),
                 id="already-drained"),
    pytest.param(resume(Current(4, 9, None, "x")), Why(drain=Drain.NOT_DRAINED),
                 id="resume-of-a-set-not-drained"),
    pytest.param(resume(Current(0, 0, None, "x", drained=True)), NO_WHY, id="resumed"),
])
def test_drain_and_resume_say_where_the_drain_stands(decision: Decision, why: Why) -> None:
    assert decision.why == why


def test_a_pinned_clock_holds_from_a_later_scale_up_and_says_until_when() -> None:
    later = NOW + timedelta(minutes=30)
    state = Current(5, 3, later, "x")
    assert decide(state, D(0, 0), DELAY, NOW, pinned_clock=True).why == \
        Why(held_until=later + timedelta(minutes=10))
    assert decide(state, D(0, 0), DELAY, NOW).why == NO_WHY  # a host's clock: skew, no hold


@settings(max_examples=400, deadline=None)
@given(
    lo=st.integers(0, 10), span=st.integers(0, 10), buffer=st.integers(0, 3),
    have=st.integers(0, 30), patch=st.one_of(st.none(), st.integers(0, 5)),
    queued=st.integers(0, 30), running=st.integers(0, 30),
    cap=st.one_of(st.none(), st.integers(0, 20)),
    since_up=st.one_of(st.none(), st.integers(-20, 20)),
    step_down=st.one_of(st.none(), st.integers(1, 5)),
)
def test_why_says_what_the_detail_says(lo: int, span: int, buffer: int, have: int,
                                       patch: int | None, queued: int, running: int,
                                       cap: int | None, since_up: int | None,
                                       step_down: int | None) -> None:
    """The values and the text are made in one place and always agree: each fact is in
    ``why`` exactly when ``detail`` says it, with the same time or number."""
    policy = Policy(lo, lo + span, buffer, scale_down_delay=timedelta(minutes=10),
                    max_step_down=step_down)
    last_up = None if since_up is None else NOW - timedelta(minutes=since_up)
    decision = decide(Current(have, patch, last_up, "old"), D(queued, running), policy, NOW,
                      cap)
    why, detail = decision.why, decision.detail
    held = why.held_until
    assert (held is not None) == ("scale-down held until" in detail)
    if held is not None:
        assert f"scale-down held until {held.isoformat()} (scaleDownDelay)" in detail
        assert held > NOW and not why.cap  # a held count is never one cut by a bound
    by_max = why.cap is not None and why.cap.by is CapBy.MAX_REPLICAS
    by_total = why.cap is not None and why.cap.by is CapBy.MAX_TOTAL_REPLICAS
    assert by_max == ("capped at max" in detail)
    assert by_total == ("by limits.maxTotalReplicas" in detail)
    if why.cap is not None:
        said = f"capped at max {why.cap.at}" if by_max else \
            f"capped at {why.cap.at} by limits.maxTotalReplicas"
        assert said in detail and decision.replicas <= why.cap.at
    assert why.drain is None
