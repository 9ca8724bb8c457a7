"""A platform that fails is given time (``outage.py``): the rule, on a clock the test moves.
(The controller against the platforms' fakes: ``test_platform_outage.py``.)"""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from gitscale.controller.outage import OUTAGE_WAIT, OUTAGE_WAIT_MAX, PROBE_WAIT, NotAsked, Outage


class Seconds:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Seconds:
    return Seconds()


def outage(clock: Seconds) -> Outage:
    return Outage("GitHub", clock=clock,
                  wall=lambda: datetime(2026, 11, 23, 9, 0, tzinfo=timezone.utc))


def test_requests_sent_together_that_fail_together_count_once(clock: Seconds) -> None:
    o = outage(clock)
    tickets = [o.before() for _ in range(16)]  # 16 DELETEs in flight
    for ticket in tickets:
        o.failed(ticket, "DELETE …/runners/1 answered 503")
    assert o.failures == 1
    with pytest.raises(NotAsked) as refused:
        o.before()
    assert str(refused.value) == ("DELETE …/runners/1 answered 503; GitHub is not asked again "
                                  "before 2026-11-23T09:00:05Z (1 failure(s) in a row)")
    assert refused.value.after == OUTAGE_WAIT


def test_the_wait_doubles_then_one_request_tries_and_the_others_are_not_sent(
        clock: Seconds) -> None:
    o = outage(clock)
    waits = []
    for _ in range(9):
        o.failed(o.before(), "answered 502")
        with pytest.raises(NotAsked) as refused:
            o.before()
        waits.append(refused.value.after)
        clock.now += refused.value.after
    assert waits == [5, 10, 20, 40, 80, 160, OUTAGE_WAIT_MAX, OUTAGE_WAIT_MAX, OUTAGE_WAIT_MAX]
    trying = o.before()  # the wait is over: this one goes ...
    with pytest.raises(NotAsked) as refused:  # ... and no other until it has an answer
        o.before()
    assert refused.value.after == PROBE_WAIT and "one request is trying it" in str(refused.value)
    o.answered(trying)
    assert o.failures == 0 and [o.before() for _ in range(3)]


def test_an_answer_to_a_request_sent_before_the_failure_ends_nothing(clock: Seconds) -> None:
    o = outage(clock)
    early, late = o.before(), o.before()
    o.failed(late, "no answer (timeout)")
    o.answered(early)  # sent with it, answered a moment before GitHub went down
    assert o.failures == 1
    with pytest.raises(NotAsked):
        o.before()


def test_a_request_that_tries_and_ends_without_an_answer_lets_the_next_one_try(
        clock: Seconds) -> None:
    o = outage(clock)
    o.failed(o.before(), "answered 500")
    clock.now += OUTAGE_WAIT
    o.abandoned(o.before())  # (interrupted)
    o.answered(o.before())
    assert o.failures == 0


def test_a_client_made_again_keeps_the_wait(clock: Seconds) -> None:
    """The credentials are read again every 5 minutes (a new client): the outage goes on."""
    old = outage(clock)
    old.failed(old.before(), "answered 503")
    new = outage(clock)
    new.take_over(old)
    with pytest.raises(NotAsked):
        new.before()
