"""What `gitscale serve` holds of its reservations file between commits.

A batch whose only change is to the reservations file — an ``in_progress``, a job queued or
completed while its set is at its max, an expiry, a starved reservation's expiry pushed on, a
resync's correction — changes no RunnerSet. Committed at once, that was a commit per window
with an event: 235.5 an hour under saturation (`simulate --serve`, the spiky trace on the
default preset), where polling lands 15. Such a batch is held instead: serve keeps the file's
new text (and the events and notes it would have committed), and the next batch starts from
it. What is held lands with the next commit that changes a RunnerSet or the served sets, once
the first held batch is ``--hold`` old (default 5m, 0 with ``--resync 0``; ``0``: nothing is
held), and at a stop. A batch runs at least every minute (or every ``--window`` when longer), so the file in
the repo is never more than ``--hold`` and that behind serve while batches land. What serve dies
with unstopped (a kill, a lost node), the resync at the next start rebuilds from GitHub's list
of queued and running jobs (with ``--resync 0`` nothing does: a lost ``completed`` of a running
job leaves its reservation for good).

A resync's renewals alone (the expiry of the jobs GitHub still lists pushed on) are held with no
limit, with ``--hold 0`` and at a stop too: they land with the next commit made for anything
else. No reader needs them: a restarted serve expires no queued reservation before its first
resync has renewed them again (``Batch.expire``), and with ``--resync 0`` there are none. So a
job queued or running for an hour costs no commit per resync.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Mapping


@dataclass(frozen=True)
class Held:
    """The reservations file's text serve holds, not yet committed."""

    base: str  # the file's text in the repo when the holding began ("" when it had none)
    text: str
    since: datetime | None  # the first held batch; None: only renewals are held (no limit)
    events: Mapping[str, int] = field(default_factory=dict)  # by action, for the commit
    notes: tuple[str, ...] = ()  # the held batches' lines for the commit body


@dataclass
class Hold:
    """One serve's holding: read and set by ``batch_plan`` (each try of a batch starts from
    ``held`` again), applied by ``landed`` once the batch landed."""

    limit: timedelta = timedelta(0)  # `serve --hold`: 0 holds nothing
    held: Held | None = None
    final: bool = False  # the last batch at a stop: nothing is held
    next: Held | None = None  # what the batch being landed holds
    dropped: Held | None = None  # held, dropped: the repo's file changed meanwhile

    def start(self, repo_text: str) -> str:
        """The text a batch starts from: the held one, unless the file in the repo is no longer
        the one the holding began from (deleted by a person, written by another serve)."""
        self.next = self.dropped = None
        if self.held is None:
            return repo_text
        if self.held.base != repo_text:
            self.dropped = self.held
            return repo_text
        return self.held.text

    def carried(self) -> Held | None:
        """What the batch carries from the held ones (none after a drop)."""
        return None if self.dropped is not None else self.held

    def events(self, counts: Mapping[str, int]) -> dict[str, int]:
        """This batch's counts with the held batches'."""
        carried = self.carried()
        return dict(Counter(carried.events if carried else {}) + Counter(counts))

    def notes(self, notes: list[str]) -> list[str]:
        carried = self.carried()
        return [*(carried.notes if carried else ()), *notes]

    def waiting(self) -> datetime | None:
        """Since when a held change waits for a commit (None: nothing held, or renewals only)."""
        return self.held.since if self.held is not None else None

    def keeps(self, now: datetime, scaling: bool) -> bool:
        """Whether a batch that changes the file is held: not when it changes more
        (``scaling``: a RunnerSet, the served sets), at a stop, or once the first held batch is ``limit`` old."""
        if scaling or self.final or self.limit <= timedelta(0):
            return False
        return now - self._since(now) < self.limit

    def hold(self, base: str, text: str, now: datetime, events: Mapping[str, int],
             notes: list[str]) -> None:
        self.next = Held(base, text, self._since(now), dict(events), tuple(notes))

    def renew(self, base: str, text: str) -> None:
        """Hold ``text``, which differs from what the batch started from by a resync's
        renewals alone: with no limit (what was carried is renewals only, or nothing)."""
        self.next = Held(base, text, None)

    def _since(self, now: datetime) -> datetime:
        carried = self.carried()
        return carried.since if carried is not None and carried.since is not None else now

    def landed(self) -> None:
        """The batch landed: what it held (or nothing, when it committed) is held now."""
        self.held, self.final = self.next, False


def default_hold(resync_on: bool) -> str:
    """``--hold`` when not given: 5m, or 0 without a resync — what serve holds is lost if it
    is killed, and only the resync at its next start rebuilds it (a running job's lost
    ``completed`` would keep its reservation, and a runner, until the file is edited)."""
    return "5m" if resync_on else "0"
