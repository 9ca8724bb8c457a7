"""Capacity reservations from webhooks: by job id, never below zero, starved ones wait."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from gitscale.core.reservations import Action, Book, Event, Reservation, apply, resync

T0 = datetime(2026, 11, 21, 9, 0, tzinfo=timezone.utc)
TEN = timedelta(minutes=10)
Q, P, C, W = Action.QUEUED, Action.IN_PROGRESS, Action.COMPLETED, Action.WAITING


def events(*spec: tuple[int, Action]) -> list[Event]:
    return [Event("s", job, action, T0) for job, action in spec]


@pytest.mark.parametrize(
    ("spec", "queued", "running"),
    [
        pytest.param([(1, Q), (2, Q)], 2, 0, id="two-queued"),
        pytest.param([(1, Q), (1, P)], 0, 1, id="queued-then-running"),
        pytest.param([(1, Q), (1, P), (1, C)], 0, 0, id="full-lifecycle"),
        pytest.param([(1, C)], 0, 0, id="completed-without-queued-never-below-zero"),
        pytest.param([(1, C), (1, Q)], 0, 0, id="completed-before-queued"),
        pytest.param([(1, P), (1, Q)], 0, 1, id="in-progress-before-queued"),
        pytest.param([(1, Q), (1, Q), (1, Q)], 1, 0, id="replayed-queued"),
        pytest.param([(1, Q), (2, Q), (2, C)], 1, 0, id="completion-removes-its-own-job"),
        pytest.param([(1, W)], 0, 0, id="waiting-needs-no-runner"),
        pytest.param([(1, Q), (1, W)], 0, 0, id="waiting-releases-its-queued-reservation"),
        pytest.param([(1, Q), (1, W), (1, Q)], 1, 0, id="queued-again-after-the-approval"),
        pytest.param([(1, Q), (1, P), (1, W)], 0, 1, id="waiting-never-releases-a-running-job"),
    ],
)
def test_events(spec: list[tuple[int, Action]], queued: int, running: int) -> None:
    demand = apply(Book(), events(*spec), T0, TEN, 100).demand()
    assert (demand.queued, demand.running) == (queued, running)


def test_completion_matches_by_job_not_oldest() -> None:
    book = apply(Book(), events((1, Q), (2, Q), (3, Q)), T0, TEN, 100)
    book = apply(book, events((2, C)), T0, TEN, 100)
    assert [r.job for r in book.reservations] == [1, 3]


def test_expiry() -> None:
    book = apply(Book(), events((1, Q)), T0, TEN, 100)
    assert len(apply(book, [], T0 + timedelta(minutes=9), TEN, 100).reservations) == 1
    assert apply(book, [], T0 + TEN, TEN, 100).reservations == ()


def test_starved_reservations_do_not_expire_while_waiting() -> None:
    """max 2 and 4 reservations: the two beyond max get their expiry extended every batch."""
    book = apply(Book(), [Event("s", j, Q, T0 + timedelta(seconds=j)) for j in range(4)],
                 T0 + timedelta(seconds=5), TEN, 2)
    later = T0 + timedelta(minutes=9)
    book = apply(book, [], later, TEN, 2)  # a batch at 9 minutes extends the starved two
    at_eleven = apply(book, [], T0 + timedelta(minutes=11), TEN, 2)
    assert [r.job for r in at_eleven.reservations] == [2, 3]
    assert all(r.expires == T0 + timedelta(minutes=11) + TEN for r in at_eleven.reservations)


def test_a_queued_job_older_than_a_running_one_is_starved_too() -> None:
    """max 1: job 1 queued, then the one runner took job 2 (GitHub does not hand out jobs in
    order). Job 1 waits past max, but was first in created order, so it was not counted as
    starved and expired after 10 minutes while job 2 still ran: once job 2 completed, the set
    went to 0 with job 1 still queued on GitHub."""
    book = apply(Book(), [Event("s", 1, Q, T0), Event("s", 2, P, T0 + timedelta(seconds=1))],
                 T0 + timedelta(seconds=2), TEN, 1)
    book = apply(book, [], T0 + timedelta(minutes=9), TEN, 1)
    at_eleven = apply(book, [], T0 + timedelta(minutes=11), TEN, 1)
    assert [(r.job, r.running) for r in at_eleven.reservations] == [(1, False), (2, True)]
    assert at_eleven.reservations[0].expires == T0 + timedelta(minutes=11) + TEN
    # with room for both, job 1 is not starved and keeps its own expiry
    roomy = apply(apply(book, [], T0 + timedelta(minutes=9), TEN, 2), [],
                  T0 + timedelta(minutes=20), TEN, 2)
    assert [r.job for r in roomy.reservations] == [2]


def test_a_queued_after_its_reservation_expired_reserves_again() -> None:
    """A queued delivered after its job's reservation expired, with no batch between (a
    redelivery while the batch was held by a git outage), was taken for a replay of the live
    one and dropped with the expired reservation: the same events reserved a runner or not
    depending on when the window ended."""
    book = apply(Book(), events((1, Q)), T0, TEN, 100)
    late = T0 + timedelta(minutes=11)
    batched = apply(apply(book, [], late, TEN, 100), [Event("s", 1, Q, late)], late, TEN, 100)
    held = apply(book, [Event("s", 1, Q, late)], late + timedelta(seconds=5), TEN, 100)
    assert [(r.job, r.expires) for r in held.reservations] == [(1, late + TEN)]
    assert held.reservations == batched.reservations
    # a replay while the reservation is live still adds nothing, nor moves its expiry
    replayed = apply(book, [Event("s", 1, Q, T0 + timedelta(minutes=9))],
                     T0 + timedelta(minutes=9), TEN, 100)
    assert replayed.reservations == book.reservations


def test_tombstones_are_forgotten() -> None:
    book = apply(Book(), events((1, C)), T0, TEN, 100)
    assert book.completed == ((1, T0 + TEN),)
    assert apply(book, [], T0 + TEN, TEN, 100).completed == ()


def test_a_running_job_holds_its_runner_until_it_completes() -> None:
    """A reservation for an in_progress job expired after --reservation: a 40-minute job
    dropped out of the count after 10 minutes."""
    book = apply(Book(), events((1, Q), (1, P), (2, Q)), T0, TEN, 100)
    later = apply(book, [], T0 + timedelta(minutes=40), TEN, 100)
    assert [(r.job, r.running) for r in later.reservations] == [(1, True)]  # 2 expired queued
    assert later.demand().running == 1
    done = apply(later, [Event("s", 1, C, T0 + timedelta(minutes=41))],
                 T0 + timedelta(minutes=41), TEN, 100)
    assert done.reservations == ()


def _book(*spec: tuple[int, bool, int]) -> Book:
    """(job, running, created minutes after T0)."""
    return Book(tuple(Reservation(job, running, T0 + timedelta(minutes=m),
                                  T0 + timedelta(minutes=m) + TEN) for job, running, m in spec))


NOW = T0 + timedelta(minutes=5)
BEFORE = T0 + timedelta(minutes=3)  # the poll started at 4, with a minute's grace


@pytest.mark.parametrize(
    ("book", "listed", "jobs", "added", "removed", "started"),
    [
        pytest.param(_book((1, False, 0)), {1: False}, {1: False}, (), (), (), id="in-sync"),
        pytest.param(_book(), {7: False, 8: True}, {7: False, 8: True}, (7, 8), (), (),
                     id="lost-queued-adds-a-runner"),
        pytest.param(_book((1, True, 0)), {}, {}, (), (1,), (), id="lost-completed-frees-it"),
        pytest.param(_book((1, False, 0)), {1: True}, {1: True}, (), (), (1,),
                     id="lost-in-progress-marks-running"),
        pytest.param(_book((1, True, 0)), {1: False}, {1: True}, (), (), (),
                     id="a-lagging-api-never-unmarks-running"),
        pytest.param(_book((1, False, 4)), {}, {1: False}, (), (), (),
                     id="a-reservation-newer-than-the-poll-stays"),
    ],
)
def test_resync(book: Book, listed: dict[int, bool], jobs: dict[int, bool],
                added: tuple[int, ...], removed: tuple[int, ...],
                started: tuple[int, ...]) -> None:
    corrected, correction = resync(book, listed, BEFORE, NOW, TEN, 100)
    assert {r.job: r.running for r in corrected.reservations} == jobs
    assert (correction.added, correction.removed, correction.started) == (added, removed, started)
    assert bool(correction) == bool(added or removed or started)


def test_resync_never_resurrects_a_completed_job() -> None:
    """The API lags behind the webhooks: a job whose completion was seen stays gone, and a job
    the resync removes cannot come back by a late replayed queued."""
    book = apply(Book(), events((1, Q), (1, C)), T0, TEN, 100)
    corrected, correction = resync(book, {1: True}, BEFORE, NOW, TEN, 100)
    assert corrected.reservations == () and not correction
    gone, _ = resync(_book((2, False, 0)), {}, BEFORE, NOW, TEN, 100)
    assert apply(gone, [Event("s", 2, Q, NOW)], NOW, TEN, 100).reservations == ()


def test_resync_describes_what_it_corrected() -> None:
    _, correction = resync(_book((1, True, 0)), {7: False, 8: False}, BEFORE, NOW, TEN, 100)
    assert correction.describe() == "added 2 (jobs 7, 8); removed 1 (job 1)"
