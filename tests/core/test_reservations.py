"""Capacity reservations from webhooks: by job id, never below zero, starved ones wait."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from gitscale.core.model import Demand
from gitscale.core.reservations import MAX_JOB_ID, Action, Book, Correction, Event, Reservation, \
    apply, is_job_id, resync, without_unseen

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


@pytest.mark.parametrize(("spec", "demand"), [
    pytest.param([(1, Q), (2, Q), (2, P)], Demand(1, 1, frozenset({"1", "2"})),
                 id="queued-and-running-ids"),
    pytest.param([(1, Q), (1, C)], Demand(0, 0, frozenset()), id="none-left"),
    # a completion delivered first leaves a tombstone: what follows it in the same batch still
    # counts (job 2), only its own late queued and in_progress do not
    pytest.param([(1, C), (1, Q), (2, Q), (1, P), (3, P)], Demand(1, 1, frozenset({"2", "3"})),
                 id="events-after-a-tombstoned-one-still-count"),
])
def test_demand_carries_the_job_ids(spec: list[tuple[int, Action]], demand: Demand) -> None:
    """The ids tell the decision which jobs arrived since its last write (README, "Jobs wait
    for runners the last write did not give them")."""
    assert apply(Book(), events(*spec), T0, TEN, 100).demand() == demand


@pytest.mark.parametrize(("value", "expected"), [
    pytest.param(1, True, id="one"),
    pytest.param(MAX_JOB_ID, True, id="int64-max"),
    pytest.param(0, False, id="zero"),
    pytest.param(-1, False, id="negative"),
    pytest.param(MAX_JOB_ID + 1, False, id="past-int64"),
    pytest.param(True, False, id="a-bool"),
    pytest.param("7", False, id="a-string"),
    pytest.param(7.0, False, id="a-float"),
])
def test_is_job_id(value: object, expected: bool) -> None:
    assert is_job_id(value) is expected


def test_an_in_progress_keeps_its_reservation_from_queued() -> None:
    """Marked running, a reservation keeps when it was made (the order of the book, and what a
    resync compares with the start of its poll); one whose queued was missed is made then."""
    book = apply(Book(), [Event("s", 1, Q, T0)], T0, TEN, 100)
    later = T0 + timedelta(minutes=3)
    book = apply(book, [Event("s", 1, P, later), Event("s", 2, P, later)], later, TEN, 100)
    assert book.reservations == (Reservation(1, True, T0, T0 + TEN),
                                 Reservation(2, True, later, later + TEN))
    # a resync whose poll started in between finds job 1 older than it, job 2 not
    gone, correction = resync(book, {}, T0 + timedelta(minutes=1), later, TEN, 100)
    assert correction.removed == (1,) and [r.job for r in gone.reservations] == [2]


def test_a_queued_at_its_reservations_expiry_reserves_again() -> None:
    """A reservation expires at ``expires`` (kept only while ``expires > now``): a queued
    delivered at that instant is one after the expiry, and reserves a runner again."""
    book = apply(Book(), events((1, Q)), T0, TEN, 100)
    again = apply(book, [Event("s", 1, Q, T0 + TEN)], T0 + TEN, TEN, 100)
    assert again.reservations == (Reservation(1, False, T0 + TEN, T0 + TEN + TEN),)


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
    assert correction.describe() == "added 2 (2 queued, 0 running: jobs 7, 8); removed 1 (job 1)"
    _, correction = resync(_book(), {7: False, 8: True, 9: False}, BEFORE, NOW, TEN, 100)
    assert correction.added_running == (8,)
    assert correction.describe() == "added 3 (2 queued, 1 running: jobs 7, 8, 9)"


def test_a_resync_of_an_incomplete_listing_removes_nothing() -> None:
    """GitHub did not list every run (past its 1,000 a status): a job it does not list may be
    one of those, so its reservation stays; what it lists is still added and marked."""
    book = _book((1, True, 0), (2, False, 0))
    corrected, correction = resync(book, {2: True, 7: False}, BEFORE, NOW, TEN, 100,
                                   complete=False)
    assert {r.job: r.running for r in corrected.reservations} == {1: True, 2: True, 7: False}
    assert (correction.added, correction.removed, correction.started) == ((7,), (), (2,))


def test_a_reservation_a_resync_adds_is_made_now() -> None:
    corrected, _ = resync(_book(), {7: False, 8: True}, BEFORE, NOW, TEN, 100)
    assert corrected.reservations == (Reservation(7, False, NOW, NOW + TEN),
                                      Reservation(8, True, NOW, NOW + TEN))


@pytest.mark.parametrize(("created", "removed"), [
    pytest.param(BEFORE - timedelta(seconds=1), (1,), id="made-before-the-poll-removed"),
    pytest.param(BEFORE, (), id="made-as-the-poll-started-stays"),
])
def test_resync_removes_only_reservations_older_than_its_poll(created: datetime,
                                                             removed: tuple[int, ...]) -> None:
    book = Book((Reservation(1, False, created, created + TEN),))
    corrected, correction = resync(book, {}, BEFORE, NOW, TEN, 100)
    assert correction.removed == removed
    assert [r.job for r in corrected.reservations] == ([] if removed else [1])


@pytest.mark.parametrize(("until", "added"), [
    pytest.param(NOW + timedelta(seconds=1), (), id="a-live-tombstone-wins"),
    pytest.param(NOW, (1,), id="a-tombstone-ending-now-is-forgotten"),
])
def test_resync_forgets_tombstones_as_apply_does(until: datetime,
                                                 added: tuple[int, ...]) -> None:
    book = Book((), ((1, until),))
    corrected, correction = resync(book, {1: True}, BEFORE, NOW, TEN, 100)
    assert correction.added == added
    assert apply(book, [Event("s", 1, P, NOW)], NOW, TEN, 100).demand().running == len(added)
    assert len(corrected.reservations) == len(added)


def test_a_resync_is_a_batch_its_starved_reservations_wait() -> None:
    """max 1: job 8 runs (GitHub lists it), job 1 waits beyond max: its expiry is pushed back
    from the resync's clock, as after any batch."""
    book = _book((1, False, 0))
    corrected, _ = resync(book, {1: False, 8: True}, BEFORE, NOW, TEN, 1)
    assert {r.job: r.expires for r in corrected.reservations} == {1: NOW + TEN, 8: NOW + TEN}


@pytest.mark.parametrize(("correction", "said"), [
    pytest.param(Correction(), "nothing to correct", id="nothing"),
    pytest.param(Correction(started=(4,)), "marked running 1 (job 4)", id="marked-running"),
    pytest.param(Correction(added=tuple(range(1, 11)), added_running=(2, 3)),
                 "added 10 (8 queued, 2 running: jobs 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)",
                 id="ten-named"),
    pytest.param(Correction(added=(5,), added_running=(5,)),
                 "added 1 (0 queued, 1 running: job 5)", id="one-running"),
    pytest.param(Correction(removed=tuple(range(1, 12))),
                 "removed 11 (jobs 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, …)", id="eleven-the-first-ten"),
])
def test_correction_describe(correction: Correction, said: str) -> None:
    assert correction.describe() == said


def test_a_resync_renews_the_reservations_of_the_jobs_it_lists() -> None:
    """Expiry stands for a lost ``completed``: a job GitHub still lists (queued, or running)
    was not completed, so its reservation runs from this resync for another duration."""
    book = _book((1, False, 0), (2, True, 0), (3, False, 0))
    corrected, correction = resync(book, {1: False, 2: True, 3: True}, BEFORE, NOW, TEN, 100)
    assert {r.job: r.expires for r in corrected.reservations} == dict.fromkeys((1, 2, 3),
                                                                                NOW + TEN)
    assert {r.job: r.created for r in corrected.reservations} == dict.fromkeys((1, 2, 3), T0)
    assert correction.renewed == (1, 2, 3) and correction.started == (3,)
    assert not Correction(renewed=(1,)), "a renewal alone corrects nothing"


def test_a_renewal_never_shortens_an_expiry() -> None:
    """A starved reservation's expiry, pushed past the resync's own, stays where it is."""
    book = Book((Reservation(1, False, T0, NOW + 2 * TEN),))
    corrected, _ = resync(book, {1: False}, BEFORE, NOW, TEN, 100)
    assert corrected.reservations[0].expires == NOW + 2 * TEN


def test_a_job_an_incomplete_listing_leaves_out_keeps_its_expiry() -> None:
    """GitHub did not list every run: a job it does not list is neither removed nor renewed,
    and expires as before."""
    book = _book((1, False, 0), (2, False, 0))
    corrected, correction = resync(book, {2: False}, BEFORE, NOW, TEN, 100, complete=False)
    assert {r.job: r.expires for r in corrected.reservations} == {1: T0 + TEN, 2: NOW + TEN}
    assert correction.renewed == (2,)
    later = apply(corrected, [], T0 + TEN, TEN, 100)
    assert [r.job for r in later.reservations] == [2]


@pytest.mark.parametrize("running", [pytest.param(False, id="queued"),
                                     pytest.param(True, id="in-progress")])
def test_a_long_job_the_resync_lists_never_leaves_its_set(running: bool) -> None:
    """A job queued (or running) for 45 minutes, a batch every minute, a resync every 5: its
    reservation is there at every batch (it expired at 10 minutes and came back at the next
    resync: a scale-down and a scale-up, 2 needless commits each time)."""
    book = apply(Book(), [Event("s", 1, Q, T0)], T0, TEN, 100)
    for minute in range(1, 46):
        now = T0 + timedelta(minutes=minute)
        book = apply(book, [], now, TEN, 100)
        if minute % 5 == 0:
            book, correction = resync(book, {1: running}, now - timedelta(minutes=1), now, TEN,
                                      100)
            assert not correction.added, f"re-added at minute {minute}"
        assert [r.job for r in book.reservations] == [1], f"gone at minute {minute}"


def test_apply_without_expiry_keeps_queued_reservations_past_their_time() -> None:
    """What a restarted serve does until its first resync renews them (``expire=False``);
    completions still remove theirs."""
    book = _book((1, False, 0), (2, False, 0))
    kept = apply(book, [Event("s", 2, C, T0 + 2 * TEN)], T0 + 2 * TEN, TEN, 100, expire=False)
    assert [r.job for r in kept.reservations] == [1]
    assert apply(book, [], T0 + 2 * TEN, TEN, 100).reservations == ()


def test_without_unseen_undoes_forgotten_tombstones_and_renewals_only() -> None:
    """What no reader tells apart (tombstones past their time, renewals) is undone: equal to
    the book before when that was all; a completion recorded, or a live tombstone dropped,
    is no such change (None), and any other change stays."""
    gone, live = (7, NOW - timedelta(seconds=1)), (8, NOW + TEN)
    before = Book(_book((1, False, 0), (2, True, 0)).reservations, (gone, live))
    forgot = apply(before, [], NOW, TEN, 100)
    assert forgot.completed == (live,) and forgot != before
    assert without_unseen(forgot, before, NOW) == before
    renewed, correction = resync(before, {1: False, 2: True}, BEFORE, NOW, TEN, 100)
    assert renewed.reservations != before.reservations
    assert without_unseen(renewed, before, NOW, correction.renewed) == before
    assert without_unseen(renewed, before, NOW) != before, "only what was renewed is undone"
    completed = apply(before, [Event("s", 2, C, NOW)], NOW, TEN, 100)
    assert without_unseen(completed, before, NOW) is None
    assert without_unseen(Book(before.reservations, (gone,)), before, NOW) is None
    started = apply(before, [Event("s", 1, P, NOW)], NOW, TEN, 100)
    assert without_unseen(started, before, NOW) not in (None, before)
