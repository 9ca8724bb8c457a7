"""The backoff of the still-waiting re-affirm (``core.still_waiting``): jobs that still wait
with runners counted for them are re-affirmed for 10 minutes after a RunnerSet's last write,
then after 20, 40, 80 minutes... (at most 2 hours) while the same jobs wait; any other write,
or a change of the jobs, starts again at 10 minutes."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from gitscale.core.decide import decide, settled_until
from gitscale.core.model import Current, Demand, Reason
from gitscale.core.policy import Policy
from gitscale.manifest.target import is_digits
from gitscale.core.still_waiting import STILL_WAITING, STILL_WAITING_MAX, reaffirm_interval, \
    span

T0 = datetime(2026, 11, 27, 9, 0, tzinfo=timezone.utc)
POLICY = Policy(0, 5, 0, scale_down_delay=timedelta(minutes=1))
MIN2 = Policy(2, 5, 0, scale_down_delay=timedelta(minutes=1))
WAITING = Demand(1, 0, frozenset({"a"}))  # one job queued, the count (1) covering it
# job r ran beside a; it completed since, and at min 2 the count stays: no write of its own
BESIDE = Demand(1, 1, frozenset({"a", "r"}))


def state(reaffirms: int, jobs: Demand = WAITING, replicas: int = 1) -> Current:
    """A RunnerSet written at T0 for ``jobs`` (their ids known, as `run` keeps them), after
    ``reaffirms`` still-waiting re-affirms in a row (its gitscale.dev/still-waiting)."""
    return Current(replicas, 7, T0 - timedelta(hours=1), jobs.fingerprint, backlog=0,
                   written_at=T0, reaffirms=reaffirms, jobs=jobs.jobs)


@pytest.mark.parametrize(("reaffirms", "minutes"), [
    pytest.param(0, 10, id="after-any-other-write-10m"),
    pytest.param(1, 20, id="after-one-re-affirm-20m"),
    pytest.param(2, 40, id="after-two-40m"),
    pytest.param(3, 80, id="after-three-80m"),
    pytest.param(4, 120, id="after-four-capped-at-2h"),
    pytest.param(5, 120, id="after-five-2h"),
    pytest.param(10**6, 120, id="a-huge-count-2h"),
])
def test_the_interval_doubles_to_two_hours(reaffirms: int, minutes: int) -> None:
    assert reaffirm_interval(reaffirms) == timedelta(minutes=minutes)
    assert (STILL_WAITING, STILL_WAITING_MAX) == (timedelta(minutes=10), timedelta(hours=2))


@pytest.mark.parametrize(("length", "said"), [
    pytest.param(10, "10m", id="minutes"),
    pytest.param(80, "1h20m", id="hours-and-minutes"),
    pytest.param(120, "2h", id="hours"),
])
def test_span(length: int, said: str) -> None:
    assert span(timedelta(minutes=length)) == said


@pytest.mark.parametrize(("current", "policy", "demand", "minutes", "written", "detail"), [
    pytest.param(state(0), POLICY, WAITING, 9.9, None, "", id="first-not-yet"),
    pytest.param(state(0), POLICY, WAITING, 10, 1, "next re-affirm in 20m if they still wait "
                 "(1 in a row for these jobs)", id="first-at-10m-next-in-20m"),
    pytest.param(state(1), POLICY, WAITING, 19.9, None, "", id="second-not-yet"),
    pytest.param(state(1), POLICY, WAITING, 20, 2, "next re-affirm in 40m",
                 id="second-at-20m"),
    pytest.param(state(2), POLICY, WAITING, 40, 3, "next re-affirm in 1h20m",
                 id="third-at-40m"),
    pytest.param(state(3), POLICY, WAITING, 79.9, None, "", id="fourth-not-yet"),
    pytest.param(state(3), POLICY, WAITING, 80, 4, "next re-affirm in 2h", id="fourth-at-80m"),
    pytest.param(state(4), POLICY, WAITING, 119.9, None, "", id="fifth-not-before-2h"),
    pytest.param(state(4), POLICY, WAITING, 120, 5, "next re-affirm in 2h if they still wait "
                 "(5 in a row", id="fifth-at-2h-and-so-on"),
    pytest.param(state(3, BESIDE, 2), MIN2, WAITING, 9.9, None, "",
                 id="jobs-changed-not-yet"),
    pytest.param(state(3, BESIDE, 2), MIN2, WAITING, 10, 0, "next re-affirm in 10m if they "
                 "still wait (the jobs changed since the last write)",
                 id="jobs-changed-back-to-10m"),
    pytest.param(state(2, Demand(1, 0)), POLICY, Demand(1, 0), 40, 3, "in a row",
                 id="counts-only-same-counts-same-wait"),
    pytest.param(state(4, replicas=0), POLICY, WAITING, 600, None, "",
                 id="saturated:-not-covered-no-still-waiting"),
])
def test_the_backoff(current: Current, policy: Policy, demand: Demand, minutes: float,
                     written: int | None, detail: str) -> None:
    """``written``: the still-waiting re-affirm's count of re-affirms in a row (None: no
    write). The clock of the next re-affirm is what ``settled_until`` says, to the second."""
    now = T0 + timedelta(minutes=minutes)
    decision = decide(current, demand, policy, now)
    if current.replicas == 0:  # (the count does not cover the job: a scale-up, not this)
        assert (decision.reason, decision.reaffirms) == (Reason.SCALE_UP, 0)
        return
    if written is None:
        assert not decision.write, decision
        until = settled_until(current, policy, now, demand)
        assert until is not None and until > now
        # what `plan` says of it (``why``), the time the state cache keeps the answer until
        assert decision.why.reaffirm_at == until
        assert not decide(current, demand, policy, until - timedelta(seconds=1)).write
        assert decide(current, demand, policy, until).reaffirms == \
            (current.reaffirms + 1 if demand.fingerprint == current.fingerprint else 0)
        return
    assert (decision.write, decision.replicas, decision.patch_id, decision.reason,
            decision.reaffirms) == (True, current.replicas, 8, Reason.REAFFIRM, written)
    assert f"jobs still wait {span(timedelta(minutes=minutes))} after the last write" \
        in decision.detail
    assert detail in decision.detail, decision.detail
    # what the next pass reads back: the count, the time and the jobs of this write
    after = current.after(decision, demand, now)
    assert (after.reaffirms, after.written_at, after.fingerprint) == \
        (written, now, demand.fingerprint)
    nxt = settled_until(after, policy, now, demand)
    assert nxt == now + reaffirm_interval(written)


@pytest.mark.parametrize(("demand", "reason"), [
    pytest.param(Demand(2, 0, frozenset({"a", "c"})), Reason.SCALE_UP, id="scale-up"),
    pytest.param(Demand(0, 0, frozenset()), Reason.SCALE_DOWN, id="scale-down"),
    pytest.param(Demand(0, 1, frozenset({"a"})), Reason.QUIET_RESET, id="patch-0"),
    pytest.param(Demand(1, 0, frozenset({"b"})), Reason.REAFFIRM,
                 id="a-normal-re-affirm:-b-waits-for-a's-slot"),
    pytest.param(Demand(1, 0), Reason.REAFFIRM, id="ids-lost:-any-change-re-affirms"),
])
def test_any_other_write_ends_the_count(demand: Demand, reason: Reason) -> None:
    decision = decide(state(3), demand, POLICY, T0 + timedelta(minutes=1))
    assert (decision.write, decision.reason, decision.reaffirms) == (True, reason, 0)
    after = state(3).after(decision, demand, T0)
    assert after.reaffirms == 0


def test_a_day_of_a_job_no_re_affirm_starts_costs_15_commits_not_144() -> None:
    """Passes every minute for 24 hours on one job that never starts (its pods cannot, or
    GitHub routes it elsewhere), each reading back what the last wrote."""
    current = Current(0, None, backlog=0)
    writes = []
    for minute in range(24 * 60):
        now = T0 + timedelta(minutes=minute)
        decision = decide(current, WAITING, POLICY, now)
        if decision.write:
            writes.append((minute, decision.reaffirms))
        current = current.after(decision, WAITING, now)
    assert writes[:6] == [(0, 0), (10, 1), (30, 2), (70, 3), (150, 4), (270, 5)]
    assert [b[0] - a[0] for a, b in zip(writes[4:], writes[5:])] == [120] * (len(writes) - 5)
    # the first write, then 14 re-affirms; every 10 minutes it was 1 + 143
    assert len(writes) == 1 + 14


def test_the_count_written_is_one_the_annotation_reader_takes() -> None:
    """The largest count ``gitscale.dev/still-waiting`` is read as (18 digits: a hand edit)
    is the largest written: one more would be refused at its line by the next pass, every
    pass of the set failing until a person mends it."""
    most = int("9" * 18)
    for reaffirms in (most - 1, most):
        decision = decide(state(reaffirms), WAITING, POLICY, T0 + STILL_WAITING_MAX)
        assert decision.reason is Reason.REAFFIRM and decision.write, decision
        assert is_digits(str(decision.reaffirms)) and decision.reaffirms == most, decision
