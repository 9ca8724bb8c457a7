"""Capacity reservations from workflow_job webhooks (seed 001, adapted). Pure: clock passed in.

Each ``queued`` event reserves one replica for its job until it expires; ``in_progress`` marks
it running; ``completed`` removes the reservation *of that job* — never the oldest one blindly,
never below zero. A completion that arrives before its ``queued`` leaves a tombstone so the late
``queued`` does not resurrect it. Reservations beyond the set's max are starved: they wait for
capacity, so their expiry is pushed back on every batch instead of running out in the queue.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import Enum
from typing import Iterable

from gitscale.core.model import Demand


class Action(str, Enum):
    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    WAITING = "waiting"


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
          max_replicas: int) -> Book:
    """The book after ``events`` (in delivery order), expiry, and the starvation rule."""
    reservations = {r.job: r for r in book.reservations}
    tombstones = {job: until for job, until in book.completed if until > now}
    for event in events:
        if event.action == Action.COMPLETED:
            reservations.pop(event.job, None)  # never below zero: an unknown job removes nothing
            tombstones[event.job] = now + duration
        elif event.job in tombstones:
            continue  # queued/in_progress delivered after its completion
        elif event.action == Action.QUEUED:
            if event.job not in reservations:  # a replayed queued adds nothing
                reservations[event.job] = Reservation(event.job, False, event.at,
                                                      event.at + duration)
        elif event.action == Action.IN_PROGRESS:
            found = reservations.get(event.job)
            if found is None:  # its queued was missed: it still occupies a runner
                reservations[event.job] = Reservation(event.job, True, event.at,
                                                      event.at + duration)
            elif not found.running:
                reservations[event.job] = replace(found, running=True)
        # WAITING (an environment approval) needs no runner yet: nothing to reserve
    ordered = sorted(reservations.values(), key=lambda r: (r.created, r.job))
    kept = []
    for index, reservation in enumerate(ordered):
        if index >= max_replicas and not reservation.running:
            # starved: still waiting for capacity, so the clock has not started for it
            reservation = replace(reservation, expires=max(reservation.expires, now + duration))
        if reservation.expires > now:
            kept.append(reservation)
    return Book(tuple(kept), tuple(sorted(tombstones.items())))
