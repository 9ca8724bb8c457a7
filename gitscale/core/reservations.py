"""Capacity reservations from workflow_job webhooks. Pure: the clock is passed in.

The model is actions-runner-controller's webhook-driven autoscaler: a HorizontalRunnerAutoscaler's
``capacityReservations``, one per event, applied in batches (its batch scaler,
controllers/actions.summerwind.net/horizontal_runner_autoscaler_batch_scale.go in
https://github.com/actions/actions-runner-controller), adapted:

Each ``queued`` event reserves one replica for its job until it expires; ``in_progress`` marks
it running, and a running job holds its runner until its ``completed`` (or a resync) removes it,
however long it runs; ``completed`` removes the reservation *of that job* — never the oldest one
blindly, never below zero. A completion that arrives before its ``queued`` leaves a tombstone so
the late ``queued`` does not resurrect it. A job waiting for an environment approval needs no
runner yet: ``waiting`` releases its queued reservation, and the ``queued`` GitHub sends after
the approval reserves one again. Reservations beyond the set's max are starved: they wait for
capacity, so their expiry is pushed back on every batch instead of running out in the queue.

``resync`` corrects a book from what GitHub lists (the webhooks that were lost): missing queued
or running jobs are added, reservations of jobs GitHub no longer lists are removed, and those of
the jobs it lists are renewed: an expiry stands for a lost ``completed``, and a job GitHub still
lists queued (or running) was not completed, however long it has waited.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import Enum
from typing import Iterable, Mapping, TypeGuard

from gitscale.core.model import Demand


# GitHub's job ids are int64: anything outside this range is not a job (10**400 was accepted,
# written to the reservations file, and rewritten in another order at the next start).
MAX_JOB_ID = 2 ** 63 - 1


def is_job_id(value: object) -> TypeGuard[int]:
    """A GitHub job id: an int (not a bool) from 1 to ``MAX_JOB_ID``."""
    return type(value) is int and 0 < value <= MAX_JOB_ID


class Action(str, Enum):
    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    WAITING = "waiting"  # for an environment approval: a human, not a runner


@dataclass(frozen=True)
class Event:
    """One workflow_job delivery, already matched to a set."""

    set: str
    job: int
    action: Action
    at: datetime


@dataclass(frozen=True)
class Reservation:
    job: int
    running: bool
    created: datetime
    expires: datetime


@dataclass(frozen=True)
class Book:
    """All reservations of one set, oldest first, plus recently completed jobs (tombstones)."""

    reservations: tuple[Reservation, ...] = ()
    completed: tuple[tuple[int, datetime], ...] = ()  # (job, forget after)

    def demand(self) -> Demand:
        running = sum(1 for r in self.reservations if r.running)
        return Demand(queued=len(self.reservations) - running, running=running,
                      jobs=frozenset(str(r.job) for r in self.reservations))


def apply(book: Book, events: Iterable[Event], now: datetime, duration: timedelta,
          max_replicas: int, *, expire: bool = True) -> Book:
    """The book after ``events`` (in delivery order), expiry, and the starvation rule.
    ``expire`` False: no queued reservation expires in this batch (a resync renews them next,
    or a restarted serve has not heard GitHub's list yet)."""
    reservations = {r.job: r for r in book.reservations}
    tombstones = {job: until for job, until in book.completed if until > now}
    for event in events:
        if event.action == Action.COMPLETED:
            reservations.pop(event.job, None)  # never below zero: an unknown job removes nothing
            tombstones[event.job] = now + duration
        elif event.job in tombstones:
            continue  # queued/in_progress delivered after its completion
        elif event.action == Action.QUEUED:
            found = reservations.get(event.job)
            # A replayed queued adds nothing; one after its reservation expired (a redelivery,
            # a batch held by a git outage) reserves again, as it would had a batch run
            # between the expiry and the event.
            if found is None or (not found.running and found.expires <= event.at):
                reservations[event.job] = Reservation(event.job, False, event.at,
                                                      event.at + duration)
        elif event.action == Action.IN_PROGRESS:
            found = reservations.get(event.job)
            if found is None:  # its queued was missed: it still occupies a runner
                reservations[event.job] = Reservation(event.job, True, event.at,
                                                      event.at + duration)
            elif not found.running:
                reservations[event.job] = replace(found, running=True)
        elif event.action == Action.WAITING:
            # Waiting for an approval needs no runner yet; no tombstone: the queued that
            # follows the approval reserves one again.
            found = reservations.get(event.job)
            if found is not None and not found.running:
                del reservations[event.job]
    return _settle(reservations, tombstones, now, duration, max_replicas, expire)


def _settle(reservations: dict[int, Reservation], tombstones: dict[int, datetime],
            now: datetime, duration: timedelta, max_replicas: int, expire: bool = True) -> Book:
    """Expiry and the starvation rule, and the book in its order (oldest first)."""
    ordered = sorted(reservations.values(), key=lambda r: (r.created, r.job))
    # The running jobs hold their runners whatever their age: the queued ones share what is
    # left of max, oldest first (counted among all, a queued job older than a running one was
    # never starved, and expired while it waited for that runner).
    free = max_replicas - sum(1 for r in ordered if r.running)
    kept = []
    waiting = 0
    for reservation in ordered:
        if not reservation.running:
            if waiting >= free:
                # starved: still waiting for capacity, so the clock has not started for it
                reservation = replace(reservation,
                                      expires=max(reservation.expires, now + duration))
            waiting += 1
        # A running job holds its runner until it completes, however long it runs: only
        # queued reservations expire (a lost `completed` is the resync's to correct).
        if reservation.running or reservation.expires > now or not expire:
            kept.append(reservation)
    return Book(tuple(kept), tuple(sorted(tombstones.items())))


@dataclass(frozen=True)
class Correction:
    """What a resync changed in one book, by job id."""

    added: tuple[int, ...] = ()
    removed: tuple[int, ...] = ()
    started: tuple[int, ...] = ()  # queued here, running on GitHub
    added_running: tuple[int, ...] = ()  # those of ``added`` GitHub lists as running
    # reservations of jobs GitHub lists, whose expiry runs from this resync: not a correction
    # (they were right), so it is neither said nor a reason to commit
    renewed: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.started)

    def describe(self) -> str:
        """``added 3 (2 queued, 1 running: jobs 7, 8, 9); removed 1 (job 5)``: an added
        job needs a runner only while queued, so how many of each is said."""
        def named(jobs: tuple[int, ...]) -> str:
            return (f"job{'s' if len(jobs) > 1 else ''} {', '.join(map(str, jobs[:10]))}"
                    f"{', …' if len(jobs) > 10 else ''}")

        running = len(self.added_running)
        parts = [f"added {len(self.added)} ({len(self.added) - running} queued, {running} "
                 f"running: {named(self.added)})"] if self.added else []
        parts += [f"{what} {len(jobs)} ({named(jobs)})"
                  for what, jobs in (("removed", self.removed),
                                     ("marked running", self.started)) if jobs]
        return "; ".join(parts) or "nothing to correct"


def resync(book: Book, listed: Mapping[int, bool], before: datetime, now: datetime,
           duration: timedelta, max_replicas: int, *,
           complete: bool = True) -> tuple[Book, Correction]:
    """Correct ``book`` from GitHub's list of this set's jobs (job id → running).

    A listed job without a reservation gets one (its queued was lost), unless its completion
    was seen (the tombstone wins: the API lags behind the webhooks). A queued reservation of a
    job listed as running is marked running. A reservation of a job GitHub does not list is
    removed (its completion was lost) if it was made before ``before``: one made since may be
    a job the API does not show yet. A reservation of a listed job is renewed: it expires
    ``duration`` from ``now`` (or later, when it did already), as a new one would — a job
    queued longer than ``duration`` lost its runner at the expiry and got it back at the next
    resync. ``complete`` False: GitHub did not list every run (past its 1,000 a status), so a
    job it does not list may be of one it left out: nothing is removed (and what it does not
    list is not renewed: it expires as it would have).
    """
    reservations = {r.job: r for r in book.reservations}
    tombstones = {job: until for job, until in book.completed if until > now}
    added, removed, started, renewed = [], [], [], []
    for job, running in sorted(listed.items()):
        found = reservations.get(job)
        if found is None and job not in tombstones:
            reservations[job] = Reservation(job, running, now, now + duration)
            added.append(job)
        elif found is not None:
            if running and not found.running:
                started.append(job)
            reservations[job] = replace(found, running=found.running or running,
                                        expires=max(found.expires, now + duration))
            renewed.append(job)
    for job, reservation in list(reservations.items()):
        if complete and job not in listed and reservation.created < before:
            del reservations[job]
            tombstones[job] = now + duration
            removed.append(job)
    settled = _settle(reservations, tombstones, now, duration, max_replicas)
    return settled, Correction(tuple(added), tuple(removed), tuple(started),
                               tuple(job for job in added if listed[job]), tuple(renewed))


def without_renewals(after: Book, before: Book, renewed: Iterable[int]) -> Book:
    """``after`` with the expiry of each renewed reservation as ``before`` had it: equal to
    ``before`` when a batch renewed reservations and changed nothing else."""
    was = {r.job: r.expires for r in before.reservations}
    again = set(renewed)
    return replace(after, reservations=tuple(
        replace(r, expires=was[r.job]) if r.job in again and r.job in was else r
        for r in after.reservations))


def without_unseen(after: Book, before: Book, now: datetime,
                   renewed: Iterable[int] = ()) -> Book | None:
    """``after`` with what no reader tells apart from ``before`` undone: the tombstones past
    their time it forgot (``apply`` and ``resync`` ignore them) and the expiry of the ``renewed``
    reservations (a resync renews them again before any expires). Equal to ``before`` when that
    is all a batch changed: a change worth no commit of its own (`serve` leaves it for the next
    commit made for anything else; ``simulate --serve`` counts it so). None when ``after``'s
    tombstones differ otherwise (a completion recorded, a live one dropped)."""
    if set(after.completed) != {(job, until) for job, until in before.completed if until > now}:
        return None
    return Book(without_renewals(after, before, renewed).reservations, before.completed)
