"""decide(): what one reconcile pass does to one RunnerSet. Pure: values in, values out.

No Kubernetes, HTTP or clock here: the runners' observed state and ``now`` are passed in, and the
result is a list of effects for ``reconcile.py`` to apply. The rules (actions-runner-controller's
patch-ID model, adapted so that a write applied in part is completed):

- the patch-ID gate, see ``gate_open``: act when ``spec.patchID == 0``, or when the
  spec's write (patch ID and effectiveTime) is not the last write a pass *fully* applied, as
  recorded in the set's status (``last_applied``, kept with ``record``). A pass that created
  only some runners (killed midway, creations refused) keeps the previous record, so the next
  pass acts on the same write and creates the rest, never beyond ``replicas``. Without a record (a status written by an
  older controller) the gate falls back to the runners: shut once the newest runner carries the
  write (``applied``);
- an acting pass creates *every* missing runner at once (no requeue per pod), removes finished runners, and
  scales down only on patch 0: failed runners, pending ones the scheduler cannot place and
  pending ones whose container cannot start first, then outdated runners, then idle runners,
  other pending runners last, busy never;
  a pass whose gate is shut removes only the finished runners beyond the slots ``replicas``
  wants (the others mark their slots until the next write);
- a slot freed by a runner that finished after ``spec.effectiveTime`` is not refilled until the
  spec is re-affirmed (no churn from completed ephemeral runners). The finished runner is kept as the marker of that slot, so the
  rule survives controller restarts without any bookkeeping outside the cluster;
- except under the write's backlog (``spec.backlog``: jobs its replicas could not cover): every
  pass replaces markers by new runners of the same write while fewer than ``backlog`` have been
  (``Refilled``, kept in status with the write it counts for, see ``refilled_after``): oldest
  finished first, each marker going only once its successor exists. Never beyond ``replicas``
  (a refill takes its marker's slot) and never a removal;
- a failed runner is replaced after a backoff that grows with the failures of the runners it
  descends from (0, 5, 10, 20, 40, 80 s); this is per runner, so it is not behind the gate,
  and the failed runner goes only once its successor exists (``Actions.replaced``);
- an outdated runner (``Runner.outdated``: made for job-matching settings the set no longer
  has) that is pending or idle is no runner of the set: it goes at once, at any patch ID, and
  is replaced the same way as a failed one when its slot is wanted (no failure counted, not
  behind the gate); a busy one is left to finish its job;
- a set being deleted is decided with ``effective()``: replicas 0 on patch 0, so the same path
  removes its runners (never a busy one) and creates none.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from datetime import datetime, timedelta
from enum import Enum

from gitscale.core.backlog import refills_left

BACKOFF_SECONDS = (0, 5, 10, 20, 40, 80)
FAILING_AFTER = 3  # failures in a row that raise the RunnersFailing condition


class Phase(str, Enum):
    PENDING = "pending"  # created, not yet taking jobs (scheduling, pulling, registering)
    IDLE = "idle"  # connected and waiting for a job
    BUSY = "busy"  # running a job: never deleted
    FINISHED = "finished"  # exited after its job (do-once)
    FAILED = "failed"  # exited with an error before doing its job
    TERMINATING = "terminating"  # being deleted: only its patch ID still counts


class DeleteReason(str, Enum):
    FINISHED = "finished"
    FAILED = "failed"  # replaced after its backoff, or no longer wanted
    SURPLUS = "surplus"  # scale-down on patch 0
    OUTDATED = "outdated"  # made for other job-matching settings: replaced at any patch ID


@dataclass(frozen=True)
class Write:
    """One spec write, as gitscale makes it: a patch ID and an effectiveTime (every write sets
    both; a hand-written spec may lack the time: then it is compared by patch ID alone).

    ``replicas``: the count it carried (None: unknown, a record of an older controller). Not
    part of the write's identity — the gate never compares it —: kept with the record so that
    a count written by hand over it, which the gate does not act on, can be said
    (``status.unapplied``)."""

    patch_id: int
    effective_time: datetime | None = None
    replicas: int | None = field(default=None, compare=False)

    def same(self, other: Write | None) -> bool:
        """The same write? Times compare at 1 s resolution (status and labels keep seconds)."""
        return (other is not None and other.patch_id == self.patch_id
                and _same_write(other.effective_time, self.effective_time))


@dataclass(frozen=True)
class Spec:
    replicas: int
    patch_id: int
    effective_time: datetime | None = None
    backlog: int = 0  # finished slots the write lets the controller refill without a new write

    @property
    def write(self) -> Write:
        return Write(self.patch_id, self.effective_time, self.replicas)


@dataclass(frozen=True)
class Unschedulable:
    """A pending runner's pod the scheduler could not place (its ``PodScheduled`` condition
    False, reason ``Unschedulable``): since when (the condition's ``lastTransitionTime``, else
    the pod's creation; None: unknown) and the scheduler's message. Reported, never acted on:
    see ``status.unscheduled``."""

    since: datetime | None
    message: str


@dataclass(frozen=True)
class Runner:
    """One runner pod as observed. ``failures`` counts the failed runners it replaced, in a row."""

    name: str
    patch_id: int
    phase: Phase
    runner_id: int | None = None  # the platform's registration (GitHub runner id), if any
    finished_at: datetime | None = None  # FINISHED/FAILED: when it stopped
    failures: int = 0
    created_at: datetime | None = None
    spec_time: datetime | None = None  # effectiveTime of the spec that created it, if known
    unschedulable: Unschedulable | None = None  # PENDING: the scheduler cannot place its pod
    # PENDING: why a container of its pod cannot start, in the kubelet's words (a Secret or
    # key missing, an image that cannot be pulled): reported at once, failed after 5 minutes
    cannot_start: str | None = None
    # Made for job-matching settings the set no longer has (GitHub's labels, runner group or
    # scope; Buildkite's queue or tags): it can take none of the jobs the set is scaled for.
    outdated: bool = False


@dataclass(frozen=True)
class Delete:
    """Remove one runner: unregister it first when ``runner_id`` is set, then delete its pod.

    Deletes run in waves (0: clean-up, 1: failed, unschedulable, cannot-start, outdated and
    idle surplus, 2: pending surplus): a wave starts when the previous one is done, so idle
    runners always go before pending ones that may still start.
    """

    name: str
    reason: DeleteReason
    runner_id: int | None
    wave: int


@dataclass(frozen=True)
class Status:
    """The set at the end of a pass. ``replicas`` counts pending, idle, busy and failed runners;
    ``held`` the finished runners kept as the markers of their slots (not refilled until the
    next write); ``waiting`` the failed runners waiting out their backoff; ``wanted`` is
    ``spec.replicas``. ``short``: slots with no runner at all. ``terminating``: runner pods
    being deleted that have not stopped (a Buildkite agent finishing its job in its grace
    period): reported beside the others, never one of them — they hold no slot (``decide``
    leaves them out of every count, every removal and every creation). The caller counts them
    (``decide`` sees no pod: 0 here)."""

    replicas: int
    pending: int
    idle: int
    busy: int
    failed: int
    observed_patch_id: int
    wanted: int = 0
    held: int = 0
    waiting: int = 0
    terminating: int = 0

    @property
    def short(self) -> int:
        return max(self.wanted - self.replicas - self.held, 0)


@dataclass(frozen=True)
class Actions:
    acting: bool  # the patch-ID gate was open
    create: int  # new runners, all labelled ``create_patch_id``
    create_patch_id: int
    retries: tuple[int, ...]  # replacements of failed runners: the failure count each carries
    deletes: tuple[Delete, ...]  # in execution order (by wave)
    held: tuple[str, ...]  # finished after effectiveTime: kept, their slots not refilled
    status: Status
    requeue_after: float | None  # seconds until a backoff expires, if one is running
    failing: tuple[tuple[str, int], ...]  # (runner, failures in a row) at or past FAILING_AFTER
    # The failed (then outdated) runners that ``retries`` replace, in the same order. Each goes
    # (its delete is in ``deletes``) once its successor exists: a replacement that could not be
    # created keeps its predecessor, so the next pass tries again instead of losing the slot.
    replaced: tuple[str, ...] = ()
    # Finished runners whose slots the write's backlog refills: one new runner each (labelled
    # ``create_patch_id``, after ``retries``), each marker going (its delete is in ``deletes``)
    # once its successor exists, as for ``replaced``.
    refills: tuple[str, ...] = ()
    # The scale-down's next candidates, in its order, beyond the surplus in ``deletes`` (not
    # the failed runners past their backoff, which go anyway): a surplus runner that proves
    # busy when it is unregistered (GitHub's 422: it took a job since the list was read)
    # gives its place to the next of these in the same pass.
    standby: tuple[Delete, ...] = ()

    @property
    def successors(self) -> int:
        """New runners of the pass: replacements, refills, then the missing ones."""
        return len(self.retries) + len(self.refills) + self.create

    @property
    def predecessors(self) -> tuple[str, ...]:
        """The runner each of the first successors takes the place of (``replaced``, then
        ``refills``): kept when its successor could not be created."""
        return self.replaced + self.refills

    @property
    def unregister_first(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.deletes if d.runner_id is not None)

    @property
    def changes(self) -> bool:
        return bool(self.create or self.retries or self.refills or self.deletes)


def effective(spec: Spec, deleting: bool) -> Spec:
    """The spec a pass acts on: that of a set being deleted is (0, 0), a scale-down to nothing
    (in ``decide``'s order, busy never, each unregistered first) that creates no runner."""
    return Spec(0, 0, spec.effective_time) if deleting else spec


def backoff(failures: int) -> timedelta:
    """How long a runner that failed after ``failures`` earlier failures waits for its successor."""
    return timedelta(seconds=BACKOFF_SECONDS[min(failures, len(BACKOFF_SECONDS) - 1)])


NOTHING_APPLIED = Write(0, None)  # a record that shuts no gate: patch 0 always acts anyway


def record(spec: Spec, last_applied: Write | None, all_created: bool) -> Write:
    """What the caller keeps (in status) as ``last_applied`` after a pass on ``spec``.

    The spec's write once every creation the pass decided succeeded (a pass with nothing to
    create counts, so does one whose gate was shut); otherwise what was kept before, and for a
    set with no record yet ``NOTHING_APPLIED``, so the next pass acts on the write again.

    With the count the write was applied with: the spec's, unless the gate was shut (the
    spec's write is the one recorded, patch ID above 0) — then ``spec.replicas`` may be a
    count written by hand that the pass did not act on, and the count recorded stays."""
    if not all_created:
        return last_applied if last_applied is not None else NOTHING_APPLIED
    if last_applied is not None and spec.patch_id != 0 and spec.write.same(last_applied):
        return replace(spec.write, replicas=last_applied.replicas)
    return spec.write


@dataclass(frozen=True)
class Refilled:
    """The slots refilled from one write's backlog so far, kept in status (``refilled``,
    ``refilledPatchID``, ``refilledEffectiveTime``) with the write they count for: a new
    write starts from 0."""

    write: Write
    count: int = 0

    def under(self, spec: Spec) -> int:
        """The count for ``spec``'s write (0 for any other)."""
        return self.count if spec.write.same(self.write) else 0


def refilled_after(spec: Spec, refilled: Refilled | None, made: int) -> Refilled:
    """What the caller keeps after a pass on ``spec`` that refilled ``made`` slots."""
    return Refilled(spec.write, (refilled.under(spec) if refilled else 0) + made)


def gate_open(spec: Spec, runners: Sequence[Runner], last_applied: Write | None) -> bool:
    """Does a pass act on ``spec``? Always on patch 0 (force the state, the only write that
    scales down). Otherwise when the spec's write is not ``last_applied``, the last write a pass
    fully applied (all its creations succeeded); a write applied only in part keeps the gate
    open until a pass completes it. With no record, by the runners' labels (``applied``)."""
    if spec.patch_id == 0:
        return True
    if last_applied is not None:
        return not spec.write.same(last_applied)
    return not applied(spec, runners)


def applied(spec: Spec, runners: Sequence[Runner]) -> bool:
    """Has a pass already acted on this very spec write? (The gate's fallback when no pass has
    recorded what it fully applied: shut as soon as *any* runner of the write exists.)

    "latest" is the patch of the newest runner, not the highest number: the sequence restarts
    at 1 after every patch 0 and wraps 2³¹−1 → 1, and a busy runner of an old, higher patch
    outlives both; with the maximum it would hold the gate open while it runs, and shut it when
    the new sequence reaches its number again (a scale-up ignored). creationTimestamp has 1 s
    resolution, so the newest may be a tie: any tied runner of this spec means it was applied.
    And a write is its patch ID *and* its effectiveTime (every write sets both), since the
    newest runner may carry the same number from a write before the restart. Runners and specs
    without a time compare by patch ID alone.
    """
    return any(r.patch_id == spec.patch_id and _same_write(r.spec_time, spec.effective_time)
               for r in _newest(runners))


def _newest(runners: Sequence[Runner]) -> list[Runner]:
    """The runners created last (a tie at 1 s resolution); all of them when none has a time."""
    stamped = [r.created_at for r in runners if r.created_at is not None]
    newest_at = max(stamped) if stamped else None
    return [r for r in runners if r.created_at == newest_at]


def _same_write(runner_time: datetime | None, spec_time: datetime | None) -> bool:
    if runner_time is None or spec_time is None:
        return True
    return runner_time.replace(microsecond=0) == spec_time.replace(microsecond=0)


def _oldest_first(runners: Sequence[Runner]) -> list[Runner]:
    return sorted(runners, key=lambda r: (r.created_at is None, r.created_at or 0, r.name))


def _newest_first(runners: Sequence[Runner]) -> list[Runner]:
    # Pending runners are removed newest first: the oldest is the closest to taking a job.
    return sorted(runners, key=lambda r: (r.created_at is not None, r.created_at or 0, r.name),
                  reverse=True)


def _longest_stuck_first(runners: Sequence[Runner]) -> list[Runner]:
    # Unschedulable the longest first (an unknown since counts as longest, as status reports it).
    def since(r: Runner) -> tuple[bool, Any, str]:
        when = r.unschedulable.since if r.unschedulable else None
        return (when is not None, when or 0, r.name)
    return sorted(runners, key=since)


def decide(spec: Spec, runners: Sequence[Runner], now: datetime,
           last_applied: Write | None = None, refilled: Refilled | None = None) -> Actions:
    """The effects of one pass for one set. Has no side effects; ``now`` is the pass clock.

    ``last_applied`` is the last write a pass fully applied, as the caller kept it with
    ``record`` after each pass; None: no record (see ``gate_open``). ``refilled``: the slots
    refilled from a write's backlog so far, as kept with ``refilled_after``.
    """
    of = {phase: [r for r in runners if r.phase is phase] for phase in Phase}
    pending, idle, busy = of[Phase.PENDING], of[Phase.IDLE], of[Phase.BUSY]
    failed = sorted(of[Phase.FAILED], key=lambda r: (r.finished_at is not None,
                                                     r.finished_at or 0, r.name))
    acting = gate_open(spec, runners, last_applied)
    deletes: list[Delete] = []
    gone: set[str] = set()

    # Scale-down: patch 0 only, never a busy runner. Failed runners, pending ones the
    # scheduler cannot place and pending ones whose container cannot start first (none can
    # take a job), then idle, then pending last.
    total = len(pending) + len(idle) + len(busy) + len(failed)
    standby: list[Delete] = []
    outdated = [r for r in pending + idle if r.outdated]
    if acting and spec.patch_id == 0 and total > spec.replicas:
        # (outdated runners, which can take none of the set's jobs, go before idle ones)
        stuck = [r for r in pending if r.unschedulable is not None and not r.outdated]
        broken = [r for r in pending if r.unschedulable is None and r.cannot_start is not None
                  and not r.outdated]
        placed = [r for r in pending if r.unschedulable is None and r.cannot_start is None
                  and not r.outdated]
        order = ([(r, 1) for r in failed] + [(r, 1) for r in _longest_stuck_first(stuck)]
                 + [(r, 1) for r in _oldest_first(broken)]
                 + [(r, 1) for r in _oldest_first(outdated)]
                 + [(r, 1) for r in _oldest_first([r for r in idle if not r.outdated])]
                 + [(r, 2) for r in _newest_first(placed)])
        surplus = total - spec.replicas
        for runner, wave in order[:surplus]:
            deletes.append(Delete(runner.name, DeleteReason.SURPLUS, runner.runner_id, wave))
            gone.add(runner.name)
        standby = [Delete(r.name, DeleteReason.SURPLUS, r.runner_id, wave)
                   for r, wave in order[surplus:]]

    # Failed runners wait out their backoff, then make way for a successor if the slot is wanted.
    # Outdated runners that are not busy are no runners of the set — they can take none of its
    # jobs —: they make way at once, at any patch ID, for a successor if the slot is wanted
    # (a busy one finishes its job; do-once, it is then gone, and a slot refilled gets a
    # runner of the current settings).
    stale = [r for r in outdated if r.name not in gone]
    live = [r for r in pending + idle + busy if r.name not in gone and r not in stale]
    waiting = [r for r in failed if r.name not in gone and not _due(r, now)]
    due = [r for r in failed if r.name not in gone and _due(r, now)]
    occupied = len(live) + len(waiting)
    retries: list[int] = []
    replaced: list[str] = []
    for runner in due:
        deletes.append(Delete(runner.name, DeleteReason.FAILED, runner.runner_id, 0))
        if occupied < spec.replicas:
            retries.append(runner.failures + 1)
            replaced.append(runner.name)
            occupied += 1
    for runner in stale:  # (no failure: its successor's lineage is its own)
        deletes.append(Delete(runner.name, DeleteReason.OUTDATED, runner.runner_id, 0))
        if occupied < spec.replicas:
            retries.append(runner.failures)
            replaced.append(runner.name)
            occupied += 1
    # A failed or outdated runner goes in this pass anyway: removing it in place of a surplus
    # runner that proves busy would free no slot.
    standby = [d for d in standby if d.name not in {r.name for r in due + stale}]

    create, held = 0, []
    missing = max(spec.replicas - occupied, 0)
    finished = sorted(of[Phase.FINISHED], key=lambda r: (r.finished_at is not None,
                                                         r.finished_at or 0, r.name))
    if acting:
        held = [r for r in finished if _after(r.finished_at, spec.effective_time)][:missing]
        markers = held
        create = missing - len(held)
    else:
        # Gate shut: a finished runner marks its slot until the next write; those beyond the
        # slots wanted mark nothing (a scale-down) and go (the latest to finish are kept).
        markers = finished[max(len(finished) - missing, 0):] if missing else []
        # A slot with neither a runner nor a marker lost its runner to something outside (a
        # node drained or preempted, an eviction, ``kubectl delete pod``) before it finished:
        # refilled now with a runner of the same write, as actions-runner-controller recreates
        # the pod of an ephemeral runner that has not run a job. A pass's own removals always
        # leave ``replicas`` covered, so this never refills the slot of a finished job.
        create = missing - len(markers)
    # The write's backlog: markers give way to new runners of it.
    left = refills_left(spec.backlog, refilled.under(spec) if refilled else 0)
    refills = markers[:left] if left else []
    held = [r for r in held if r not in refills]
    kept = {r.name for r in markers}
    deletes += [Delete(r.name, DeleteReason.FINISHED, r.runner_id, 0)
                for r in finished if r.name not in kept or r in refills]

    wakeups = [r.finished_at + backoff(r.failures) for r in waiting if r.finished_at]
    requeue = max((min(wakeups) - now).total_seconds(), 0.0) if wakeups else None
    status = _status(spec, pending, idle, busy, failed, gone, create + len(refills),
                     len(markers) - len(refills), len(waiting))
    failing = sorted((r.name, r.failures + (r.phase is Phase.FAILED))
                     for r in runners if r.phase is not Phase.TERMINATING)
    return Actions(
        acting=acting, create=create, create_patch_id=spec.patch_id, retries=tuple(retries),
        deletes=tuple(sorted(deletes, key=lambda d: d.wave)),
        held=tuple(r.name for r in held), status=status, requeue_after=requeue,
        failing=tuple((name, n) for name, n in failing if n >= FAILING_AFTER),
        replaced=tuple(replaced), refills=tuple(r.name for r in refills),
        standby=tuple(standby),
    )


def _due(runner: Runner, now: datetime) -> bool:
    return runner.finished_at is None or now >= runner.finished_at + backoff(runner.failures)


def _after(finished_at: datetime | None, effective_time: datetime | None) -> bool:
    """Finished after the spec was written? Unknown times never hold a slot."""
    return finished_at is not None and effective_time is not None and finished_at > effective_time


def _status(spec: Spec, pending: list[Runner], idle: list[Runner], busy: list[Runner],
            failed: list[Runner], gone: set[str], created: int, held: int,
            waiting: int) -> Status:
    """The set at the end of the pass: observed, minus surplus removed, plus new runners.

    A failed runner replaced in this pass is still reported as failed (its successor shows up
    as pending from the next pass on), so every failure is visible in status at least once.
    """
    def left(runners: list[Runner]) -> int:
        return sum(r.name not in gone for r in runners)

    counts = (left(pending) + created, left(idle), len(busy), left(failed))
    return Status(sum(counts), *counts, observed_patch_id=spec.patch_id, wanted=spec.replicas,
                  held=held, waiting=waiting)
