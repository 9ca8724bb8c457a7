"""Domain values shared by the sources, the policy and the engine."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from gitscale.runnerset_api import PATCH_ID_MAX


@dataclass(frozen=True)
class Demand:
    """Jobs a runner of one set could take: waiting for a runner, and running on one."""

    queued: int
    running: int
    jobs: frozenset[str] | None = None

    @property
    def assigned(self) -> int:
        return self.queued + self.running

    @property
    def fingerprint(self) -> str:
        """A short digest of what the jobs are; a change means jobs started or completed."""
        if self.jobs is not None:
            basis = "jobs:" + ",".join(sorted(self.jobs))
        else:
            basis = f"counts:{self.queued}/{self.running}"
        return hashlib.sha256(basis.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Current:
    """What the manifest says now. ``None`` means the field is absent."""

    replicas: int | None
    patch_id: int | None
    last_scale_up: datetime | None = None
    fingerprint: str | None = None
    drained: bool = False
    paused: bool = False  # gitscale.dev/paused: "true": a person holds the set; leave it alone
    # The job ids behind ``fingerprint`` when known (kept in memory by `run`/`serve` and in the
    # state cache): then a write is needed only for jobs that arrived since, not for every job
    # that merely started or completed.
    jobs: frozenset[str] | None = None
    # spec.backlog as written (jobs the replicas could not cover, refilled by the controller
    # without a new write); None: the kind has no such field (only RunnerSets do).
    backlog: int | None = None
    # spec.effectiveTime of the last write, on a kind whose controller holds the slots of
    # runners that finished after it (a RunnerSet: ``backlog`` not None); None otherwise
    written_at: datetime | None = None
    # The still-waiting re-affirms in a row that the last write ends, all for the jobs of
    # ``fingerprint`` (annotation gitscale.dev/still-waiting; 0, absent: the last write was
    # another): each doubles the wait before the next (``core.decide.reaffirm_interval``)
    reaffirms: int = 0

    def job_changes(self, demand: Demand) -> tuple[int, int] | None:
        """(arrived, completed) jobs since the last write; None when the ids are unknown."""
        if self.jobs is None or demand.jobs is None or self.fingerprint is None:
            return None
        if Demand(0, 0, self.jobs).fingerprint != self.fingerprint:
            return None  # the ids remembered are not those of the last write
        return len(demand.jobs - self.jobs), len(self.jobs - demand.jobs)

    def after(self, decision: Decision, demand: Demand | None, now: datetime) -> Current:
        """What the manifest holds once ``decision`` is written at ``now`` (as the engine
        writes it): what the next pass reads back. ``simulate`` replays passes with it."""
        if not decision.write:
            return self
        drained = {Reason.DRAIN: True, Reason.RESUME: False}.get(decision.reason, self.drained)
        return Current(
            replicas=decision.replicas,
            patch_id=decision.patch_id if decision.patch_id is not None else 0,
            last_scale_up=now if decision.scaled_up else self.last_scale_up,
            fingerprint=demand.fingerprint if demand is not None else self.fingerprint,
            drained=drained,
            paused=self.paused,
            jobs=demand.jobs if demand is not None else self.jobs,
            backlog=decision.backlog if self.backlog is not None else None,
            written_at=now if self.backlog is not None else None,
            reaffirms=decision.reaffirms,
        )


class Reason(str, Enum):
    FIRST_WRITE = "first-write"
    SCALE_UP = "scale-up"
    FORECAST = "forecast"  # a scale-up ahead of demand, from the forecast
    SCALE_DOWN = "scale-down"
    REAFFIRM = "reaffirm"
    QUIET_RESET = "quiet-reset"
    DRAIN = "drain"
    RESUME = "resume"
    UNCHANGED = "unchanged"
    DEMAND_UNKNOWN = "demand-unknown"
    PAUSED = "paused"


class CapBy(str, Enum):
    """What cut the count demand asked for: the set's max (its policy's, or an active
    schedule's), or its share of ``limits.maxTotalReplicas``."""

    MAX_REPLICAS = "maxReplicas"
    MAX_TOTAL_REPLICAS = "limits.maxTotalReplicas"


@dataclass(frozen=True)
class Cap:
    """The count was cut to ``at`` by ``by``."""

    by: CapBy
    at: int


class Drain(str, Enum):
    """Where `gitscale drain` stands in a decision: the set is held at 0 until resumed, or a
    resume was asked of a set that is not drained."""

    DRAINED = "drained"
    NOT_DRAINED = "not-drained"


@dataclass(frozen=True)
class Why:
    """The facts behind a decision's ``detail`` that someone acts on, as values, set where
    ``decide`` makes them: `plan` explains a set it leaves alone from these (never by reading
    ``detail``), its JSON shows them, and the state cache keeps them with a settled decision.
    ``Reason`` says the rest (paused, demand unknown). An empty ``Why``: nothing held it."""

    held_until: datetime | None = None  # scaleDownDelay holds a scale-down until then
    cap: Cap | None = None  # the count demand asked for was cut (``detail``: "capped at …")
    drain: Drain | None = None
    # jobs wait with runners counted for them: re-affirmed for then if the same jobs still
    # wait (``core.still_waiting.reaffirm_due``)
    reaffirm_at: datetime | None = None


NO_WHY = Why()


@dataclass(frozen=True)
class Decision:
    """What to write for one set. ``write`` False means leave the manifest alone."""

    write: bool
    replicas: int
    patch_id: int | None
    reason: Reason
    detail: str
    scaled_up: bool = False
    backlog: int = 0  # spec.backlog to write (a RunnerSet's; README, "The controller")
    why: Why = NO_WHY  # what ``detail`` says held or capped it, as values
    # a still-waiting re-affirm: how many in a row for the same jobs, this one included
    # (gitscale.dev/still-waiting); 0 for any other write, which ends the count
    reaffirms: int = 0


def next_patch_id(previous: int | None) -> int:
    """previous + 1, wrapping 2³¹−1 → 1 (0 is reserved for "force the state")."""
    if previous is None or previous >= PATCH_ID_MAX or previous < 0:
        return 1
    return previous + 1
