"""One pass over one RunnerSet: observe → decide → apply, then write status.

Everything the pass reads comes from the stores; everything it writes goes through ``kube``
and the platform adapter, in bulk: all creations of a pass are submitted to the shared thread
pool at once, and deletions run wave by wave (idle before pending). A failure to
create or delete one runner does not stop the others; it becomes the ``Ready`` condition.
Creating is ``create.py``, removing ``remove.py``.

Every set served carries the ``gitscale.dev/runners`` finalizer, so deleting it (by hand, or
Argo CD / Flux pruning it) with background propagation does not garbage-collect busy runners: a
set being deleted is scaled to (0, 0) like any other, and the finalizer goes once none of its
runner pods remain. (A foreground deletion deletes the pods at once, finalizer or not: the
README's "Removing a runner set".)
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Callable

from gitscale.controller import status as st
from gitscale.controller.cache import Store
from gitscale.controller.create import Created, create_runners, hand_over, held_back
from gitscale.controller.decide import (
    Actions,
    DeleteReason,
    Phase,
    Refilled,
    Runner,
    Status,
    Write,
    decide,
    effective,
    record,
    refilled_after,
)
from gitscale.controller.errors import (
    Conflict,
    ControllerError,
    CredentialsError,
    InvalidRunnerSet,
    KubeError,
    NotFound,
)
from gitscale.controller.kube import Kube
from gitscale.controller.leftovers import EVERY, GRACE, sweep
from gitscale.controller.memory import Memory
from gitscale.controller.observe import (
    FINALIZER,
    RawObject,
    RunnerSetView,
    parse_runnerset,
    refilled_of,
    registration_timed_out,
    runner_of,
    stopped,
)
from gitscale.controller.platform import Adapter, Listed, Unavailable
from gitscale.controller.platforms import Platforms, kind_of
from gitscale.controller.remove import BUSY_RETRY, Removed, remove_runners, retire
from gitscale.redact import redact
from gitscale.runnerset_api import PATCH_ID_MAX

log = logging.getLogger("gitscale.controller")
ERROR_RETRY = 10.0


@dataclass
class Context:
    kube: Kube
    runnersets: Store
    pods: Store
    platforms: Platforms
    pool: Executor
    memory: Memory
    clock: Callable[[], datetime]
    halt: threading.Event = field(default_factory=threading.Event)  # stop creating (shutdown)
    # Set while this replica does not hold the Lease (lost in the middle of a pass): the pass
    # writes no status, sweeps no leftover registration and adds or lifts no finalizer any
    # more, as it starts no creation or removal (``halt`` is set with it): the new leader does.
    deposed: threading.Event = field(default_factory=threading.Event)
    leftover_grace: timedelta = GRACE


@dataclass
class Report:
    """What a pass did (logged, kept for tests and the benchmark)."""

    key: str
    actions: Actions | None = None
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    leftovers: list[str] = field(default_factory=list)  # registrations removed (no pod)
    unheard: str | None = None  # why the platform could not say who is idle or busy
    reason: str | None = None  # Ready's reason for its errors, when not ApplyFailed
    counts: Status | None = None  # the set at the end of the pass (None: it could not count)
    unschedulable: int = 0  # pending runners left whose pods the scheduler could not place
    before: dict[str, Any] = field(default_factory=dict, repr=False)  # status at the start
    status_written: bool = False
    requeue_after: float | None = None
    started: float = 0.0  # time.monotonic() at the start of the pass
    seconds: float = 0.0


def reconcile(ctx: Context, key: str) -> Report:
    report = Report(key)
    obj = ctx.runnersets.get(key)
    if obj is None:  # gone: the finalizer saw its runners out first
        ctx.memory.forget(key)
        return report
    now = ctx.clock()
    generation = _generation(obj)
    report.before = obj.get("status") or {}
    try:
        view = parse_runnerset(obj, kind_of)
        platform = _platform(ctx, view)
    except InvalidRunnerSet as exc:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and not any(
                _owned_by(p, str(meta.get("uid", ""))) for p in ctx.pods.group(key)):
            return _release(ctx, obj, report)  # nothing to see out: do not hold the deletion
        problem = st.Problem("InvalidSpec", str(exc), person=True)
        return _finish(ctx, obj, report, None, st.conditions(None, problem, (), obj.get(
            "status"), now), now, generation=generation, observed=_patch_id(obj))
    except ControllerError as exc:
        # Its credentials Secret missing or refused (a configuration to fix), or the platform
        # or the Secret not to be had this time (an outage): nothing done, status says which.
        report.requeue_after = ERROR_RETRY * 3
        problem = st.Problem(st.platform_reason(exc), str(exc))
        return _finish(ctx, obj, report, None, st.conditions(None, problem, (), obj.get(
            "status"), now), now, generation=generation, observed=_patch_id(obj))

    if not view.deleting:
        obj = _hold(ctx, obj, report)
    report.errors += hand_over(ctx.kube, ctx.pods, ctx.memory, view)
    pods = [p for p in ctx.pods.group(key) if _owned_by(p, view.uid)]
    unavailable = platform.reason if isinstance(platform, Unavailable) else None
    try:
        registered = None if unavailable else _registered(ctx, view, platform, pods, now,
                                                          report)
    except CredentialsError as exc:  # a set being deleted: its credentials no longer work
        platform, unavailable, registered = Unavailable(str(exc)), str(exc), None
    # The list may be a reused one: a runner's registration timeout is judged at its time (to
    # the second, as a container's start: a list read by this pass counts as read now).
    listed_at = now - timedelta(seconds=int(registered.age)) \
        if isinstance(registered, Listed) else None
    by_name = {}
    runners: list[Runner] = []
    dead: set[str] = set()  # runners that stopped for good (busy or not, GitHub may say)
    live: set[str] = set()  # runners whose pod runs: they may be connected (idle or busy)
    for pod in pods:
        name = pod["metadata"]["name"]
        runner = runner_of(pod, registered, ctx.memory.busy_until(key, name), now,
                           view.kind.running, ctx.memory.came_online(key, name), listed_at)
        if registered is not None and runner.phase in (Phase.IDLE, Phase.BUSY):
            ctx.memory.mark_online(key, name)  # no registration timeout for it any more
        if unavailable and runner.phase in (Phase.PENDING, Phase.FAILED, Phase.FINISHED):
            runner = replace(runner, runner_id=None)  # removed without unregistering: see below
        runners.append(runner)
        by_name[runner.name] = runner
        if stopped(pod):
            dead.add(runner.name)
        elif (pod.get("status") or {}).get("phase") == "Running":
            live.add(runner.name)  # (one past its registration timeout too)
    ctx.memory.keep_only(key, set(by_name))

    spec = effective(view.spec, view.deleting)
    actions = decide(spec, runners, now, view.applied, view.refilled)
    # A failed runner whose pod still runs is unregistered before its successor is created.
    actions, retired = retire(ctx.memory, ctx.pool, ctx.halt, view, platform, actions, dead,
                              now)
    report.busy += retired.busy
    report.errors += retired.errors
    _refused(ctx, view, retired)
    report.actions = actions
    previous = obj.get("status")
    # The backlog's refills are counted before they are made: a pass cut short may then leave
    # a slot unfilled until the next write, but never refill beyond the backlog.
    refilled = refilled_after(spec, view.refilled, len(actions.refills)) \
        if actions.refills else None
    if actions.create and held_back(ctx.memory, view, now) is None and (
            view.applied is None or st.ready_of(previous).get("status") != "False"):
        # Say the set is short before creating, and that the write is not applied yet: a pass
        # may be cut short (killed, stopped), and the next one must complete the write.
        before = _adjust(actions, by_name, Report(key), Created(failed=actions.create))
        obj = _write(ctx, obj, report, st.build(previous, before, st.conditions(
            before, None, actions.failing, previous, now, creating=actions.create),
            now, applied=record(view.spec, view.applied, all_created=False),
            generation=generation, refilled=refilled), previous=None)
    unrefilled: tuple[str, ...] = ()
    if refilled is not None:  # (a status that already says so is not written again)
        obj = _write(ctx, obj, report, st.with_refilled(obj.get("status"), refilled),
                     previous=None)
        counted = refilled_of(obj.get("status"))
        if counted is None or counted.count != refilled.count or not refilled.write.same(
                counted.write):
            unrefilled = actions.refills  # uncounted, they could be made twice: not now
    created = create_runners(ctx.kube, ctx.pods, ctx.platforms, ctx.memory, ctx.pool, ctx.halt,
                             view, platform, replace(actions, refills=()) if unrefilled
                             else actions, now)
    if unrefilled:  # as if refused: their markers stay, the write is not recorded as applied
        created.failed += len(unrefilled)
        created.unreplaced.update(unrefilled)
        created.errors.append(f"{len(unrefilled)} refill(s) not made: their count could not "
                              "be written to status first")
    report.created = created.names
    report.errors += created.errors
    removed = remove_runners(ctx.kube, ctx.pods, ctx.memory, ctx.pool, ctx.halt, view, platform,
                             actions, now, keep=created.unreplaced, dead=dead, live=live)
    report.deleted = removed.deleted
    report.busy += removed.busy
    report.errors += removed.errors
    _refused(ctx, view, removed)
    if view.deleting and not any(_owned_by(p, view.uid) for p in ctx.pods.group(key)):
        return _release(ctx, obj, report)

    counts = report.counts = _adjust(actions, by_name, report, created)
    # The write is recorded as applied only when all of its creations were made; a refill
    # whose runner could not be created keeps its marker, and its place in the backlog.
    applied = view.applied if view.deleting else record(view.spec, view.applied,
                                                         not created.failed)
    if refilled is not None:
        refilled = Refilled(refilled.write,
                            refilled.count - len(created.unreplaced & set(actions.refills)))
    trouble = st.Problem(created.reason or report.reason or "ApplyFailed",
                         "; ".join(report.errors[:3])) if report.errors else None
    if unavailable:
        trouble = _without_platform(unavailable, report)
    gone = set(report.deleted)
    unscheduled = st.unscheduled((r for r in runners if r.name not in gone), now)
    report.unschedulable = unscheduled.count
    conditions = st.conditions(counts, trouble, actions.failing, obj.get("status"), now,
                               unschedulable=unscheduled)
    configured, why = platform.busy_source()
    conditions.append(view.kind.busy_known(configured, report.unheard or why))
    others = len(report.errors) - len(created.errors)  # errors not of its creations
    waits = [w for w in (actions.requeue_after,
                         BUSY_RETRY.total_seconds() if report.busy else None,
                         created.retry_after,  # refused creations back off
                         ERROR_RETRY if others or (created.errors and created.retry_after is None)
                         else None,
                         report.requeue_after,
                         unscheduled.wake_after) if w is not None]  # (its grace runs out)
    report.requeue_after = min(waits) if waits else None
    return _finish(ctx, obj, report, counts, conditions, now, applied=applied,
                   generation=generation, refilled=refilled)


def _refused(ctx: Context, view: RunnerSetView, removed: Removed) -> None:
    """An unregistration refused the set's credentials (a revoked or rotated token): its
    clients are forgotten, so the next pass reads the Secret again."""
    if removed.refused is not None:
        ctx.platforms.refused(view, removed.refused)


def _platform(ctx: Context, view: RunnerSetView) -> Adapter:
    """The set's adapter. A set being deleted is seen out even when its platform cannot be
    reached at all (its credentials Secret pruned with it, its namespace being deleted, no
    client left from before; or settings no platform client can be made of): ``Unavailable``.
    Only then: a Secret that could not be read this time (the API server failed, no answer)
    is no reason to remove runners without unregistering them, so that error is the pass's,
    and the pass is tried again."""
    try:
        return ctx.platforms.for_set(view)
    except (CredentialsError, InvalidRunnerSet) as exc:
        if not view.deleting:
            raise
        return Unavailable(str(exc))


def _without_platform(reason: str, report: Report) -> st.Problem:
    """A set being deleted without its platform: runners that are not running were removed
    without unregistering (the offline registrations of ephemeral runners are GitHub's to
    drop, after a day); running ones are kept until they stop, since idle cannot be told from
    busy; the finalizer goes once no pod is left. Said in Ready (and so once in the log)."""
    report.requeue_after = ERROR_RETRY * 3
    return st.Problem(st.UNAVAILABLE, "; ".join([
        f"{reason}: the set is being deleted without its platform: runners that were not "
        "running are removed without unregistering (GitHub drops the offline registrations "
        "of ephemeral runners after a day); running ones are kept until they stop, as idle "
        "cannot be told from busy without it (delete their pods to let the set go now)",
        *report.errors[:2]]))


def _registered(ctx: Context, view: RunnerSetView, platform: Adapter, pods: list[RawObject],
                now: datetime, report: Report) -> Listed | None:
    """The platform's view of the set's runners, when a pass needs it: some runner is running
    (idle or busy?), or it is time to look for registrations left without a pod — on every
    pass of a set being deleted, with no grace (it creates no runner), so that none is left
    behind when the finalizer goes. The list is shared by the sets of one credentials Secret
    and scope, and read again only when older than the pass allows (``_list_age``); the
    ``Listed`` returned says how old it is."""
    running = any((p.get("status") or {}).get("phase") == "Running" for p in pods)
    registers = view.kind.registration_labels is not None
    sweeping = registers and not ctx.deposed.is_set() and (
        view.deleting or ctx.memory.sweep_due(view.key, now, EVERY))
    if not running and not sweeping:
        return None
    try:
        found = platform.registered(_list_age(ctx, view, pods, now))
    except ControllerError as exc:
        if view.deleting and isinstance(exc, CredentialsError):
            raise  # no longer to be had: the set is seen out without its platform
        ctx.platforms.refused(view, exc)
        # A platform that registers its runners (GitHub): running runners count as busy
        # (nothing removed: an error of the pass). Buildkite: the graceful-stop rule still
        # holds; BusyKnown says so.
        if registers:
            report.errors.append(str(exc))
            if isinstance(exc, CredentialsError):
                report.reason = st.platform_reason(exc)
        report.unheard = str(exc)
        return None
    if found is None:
        return None
    listed = found if isinstance(found, Listed) else Listed(found)
    if not sweeping:
        return listed
    swept = sweep(ctx.kube, ctx.pods, ctx.memory, view, platform, listed, now,
                  timedelta(0) if view.deleting else ctx.leftover_grace, stop=ctx.deposed)
    report.leftovers = swept.removed
    report.errors += swept.errors
    report.requeue_after = swept.wake_after
    if not swept.removed:  # the list is shared, read-only: copied only to leave some out
        return listed
    gone = set(swept.removed)
    return Listed({i: r for i, r in listed.items() if r.name not in gone}, listed.age)


def _list_age(ctx: Context, view: RunnerSetView, pods: list[RawObject], now: datetime) -> float:
    """How old the platform's list may be for this pass: ``list_max_age`` when a decision may
    remove a running runner on it — a set being deleted, a scale-down (patch 0, more runners
    than replicas), a running runner never seen online and past its registration timeout —,
    ``status_list_max_age`` when it only feeds the counts of status and the sweep."""
    platforms = ctx.platforms
    alive = [p for p in pods if not stopped(p) and not p["metadata"].get("deletionTimestamp")]
    if view.deleting or (view.spec.patch_id == 0 and len(alive) > view.spec.replicas):
        return platforms.list_max_age
    if any(registration_timed_out(p, ctx.memory.came_online(view.key, p["metadata"]["name"]),
                                  now) for p in alive):
        return platforms.list_max_age
    return platforms.status_list_max_age


def _hold(ctx: Context, obj: RawObject, report: Report) -> RawObject:
    """Add the finalizer, before any runner is created. A failure is an error of the pass (it
    is tried again); the pass goes on, since not serving the set would help no one."""
    meta = obj["metadata"]
    finalizers = list(meta.get("finalizers") or [])
    if FINALIZER in finalizers or ctx.deposed.is_set():  # (deposed: the new leader adds it)
        return obj
    try:
        updated = ctx.kube.patch_runnerset_finalizers(
            meta["namespace"], meta["name"], finalizers + [FINALIZER], meta["resourceVersion"])
    except NotFound:
        return obj
    except KubeError as exc:
        report.errors.append(str(exc))
        return obj
    ctx.runnersets.put(updated)
    return updated


def _release(ctx: Context, obj: RawObject, report: Report) -> Report:
    """Remove the finalizer of a set being deleted whose runners are all gone: the set goes."""
    if ctx.deposed.is_set():  # the Lease was lost meanwhile: the new leader lifts it
        return report
    meta = obj["metadata"]
    finalizers = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
    if FINALIZER in (meta.get("finalizers") or []):
        try:
            updated = ctx.kube.patch_runnerset_finalizers(
                meta["namespace"], meta["name"], finalizers, meta["resourceVersion"])
        except NotFound:
            updated = None
        except KubeError as exc:
            report.errors.append(str(exc))
            report.requeue_after = ERROR_RETRY
            return report
        if finalizers and updated is not None:
            ctx.runnersets.put(updated)  # someone else's finalizer still holds it
        else:
            ctx.runnersets.remove(obj)
        log.info("%s: no runners left: finalizer %s removed", report.key, FINALIZER)
    ctx.memory.forget(report.key)
    return report


def _adjust(actions: Actions, runners: dict[str, Runner], report: Report,
            created: Created) -> Status:
    """The decision's counts, corrected for what did not happen (failed creations, 422s)."""
    counts = actions.status
    fresh_failed = max(created.failed - len(created.unreplaced), 0)
    unrefilled = len(created.unreplaced & set(actions.refills))  # their markers stay
    pending = counts.pending - min(fresh_failed, actions.create) - unrefilled
    idle, busy, failed = counts.idle, counts.busy, counts.failed
    surplus = {d.name for d in actions.deletes if d.reason is DeleteReason.SURPLUS}
    standby = {d.name for d in actions.standby}
    for name in surplus - set(report.deleted):
        phase = runners[name].phase
        if name in report.busy or phase is Phase.BUSY:
            busy += 1
        elif phase is Phase.IDLE:
            idle += 1
        elif phase is Phase.PENDING:
            pending += 1
        elif phase is Phase.FAILED:
            failed += 1
    for name in standby & set(report.deleted):  # removed in place of a busy one
        phase = runners[name].phase
        if phase is Phase.IDLE:
            idle -= 1
        elif phase is Phase.PENDING:
            pending -= 1
        elif phase is Phase.FAILED:
            failed -= 1
    for name in standby & set(report.busy):  # it took a job too
        if runners[name].phase is Phase.IDLE:
            idle, busy = idle - 1, busy + 1
    for name in set(report.busy) - surplus - standby:  # failed, but it runs a job (a 422)
        if runners[name].phase is Phase.FAILED:
            failed, busy = failed - 1, busy + 1
    return Status(pending + idle + busy + failed, pending, idle, busy, failed,
                  counts.observed_patch_id, counts.wanted, counts.held + unrefilled,
                  counts.waiting)


def _finish(ctx: Context, obj: RawObject, report: Report, counts: Status | None,
            conditions: list[st.Condition], now: datetime, *, applied: Write | None = None,
            generation: int | None = None, refilled: Refilled | None = None,
            observed: int | None = None) -> Report:
    """Write the status at the end of a pass (logging a new Ready=False once); ``observed``:
    the spec's patch ID, when the pass could not count (``st.build``)."""
    new = st.build(obj.get("status"), counts, conditions, now, applied=applied,
                   generation=generation, refilled=refilled, observed=observed)
    _write(ctx, obj, report, new, previous=report.before)
    return report


def _write(ctx: Context, obj: RawObject, report: Report, new: dict[str, Any],
           previous: dict[str, Any] | None) -> RawObject:
    """Patch the status if it changed; the object as it now is. A Ready=False whose reason or
    message differs from ``previous`` (the status before the pass; None: say nothing) is
    logged once: the condition stays until it changes. Every condition's message is masked
    (``redact``) first: it quotes what the APIs said, which may echo a credential the process
    holds, and anyone who may read the RunnerSet reads it."""
    new = _masked(new)
    if not st.changed(obj.get("status"), new):
        return obj
    if ctx.deposed.is_set():  # the Lease was lost meanwhile: the new leader writes it
        return obj
    ready = st.ready_of(new)
    if previous is not None and ready.get("status") == "False":
        said = st.ready_of(previous)
        if (said.get("reason"), said.get("message")) != (ready.get("reason"),
                                                         ready.get("message")):
            log.warning("%s: %s", report.key, ready.get("message", ready.get("reason")))
    meta = obj["metadata"]
    try:
        updated = ctx.kube.patch_runnerset_status(meta["namespace"], meta["name"], new)
    except NotFound:
        return obj
    except KubeError as exc:
        if isinstance(exc, Conflict) and meta.get("deletionTimestamp"):
            return obj  # being deleted: its status no longer matters
        report.errors.append(str(exc))
        report.requeue_after = min(report.requeue_after or ERROR_RETRY, ERROR_RETRY)
        return obj
    ctx.runnersets.put(updated)
    report.status_written = True
    return updated


def _masked(status: dict[str, Any]) -> dict[str, Any]:
    conditions = status.get("conditions")
    if not conditions:
        return status
    return {**status, "conditions": [
        {**c, "message": redact(str(c["message"]))} if isinstance(c, dict) and c.get("message")
        else c for c in conditions]}


def _generation(obj: RawObject) -> int | None:
    value = (obj.get("metadata") or {}).get("generation")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _patch_id(obj: RawObject) -> int | None:
    """``spec.patchID`` of a set whose spec could not be parsed, when it is one (the CRD's
    schema makes it so; else None: status keeps the one it had)."""
    value = (obj.get("spec") or {}).get("patchID")
    value = 0 if value is None else value  # (as parse_runnerset reads it)
    return value if isinstance(value, int) and not isinstance(value, bool) and (
        0 <= value <= PATCH_ID_MAX) else None


def _owned_by(pod: RawObject, uid: str) -> bool:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == uid for ref in refs) or not uid
