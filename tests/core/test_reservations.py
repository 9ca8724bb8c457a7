"""Capacity reservations (seed 001): by job id, never below zero, starved ones wait."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from gitscale.core.reservations import Action, Book, Event, apply

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


def test_tombstones_are_forgotten() -> None:
    book = apply(Book(), events((1, C)), T0, TEN, 100)
    assert book.completed == ((1, T0 + TEN),)
    assert apply(book, [], T0 + TEN, TEN, 100).completed == ()
