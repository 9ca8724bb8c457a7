"""One pass over one RunnerSet: observe → decide → apply, then write status.

Everything the pass reads comes from the stores; everything it writes goes through ``kube``
and the platform adapter, in bulk: all creations of a pass are submitted to the shared thread
pool at once, and deletions run wave by wave (idle before pending). A failure to
create or delete one runner does not stop the others; it becomes the ``Ready`` condition.

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
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable

from gitscale.controller import status as st
from gitscale.controller.cache import Store
from gitscale.controller.create import Created, create_runners
from gitscale.controller.decide import (
    Actions,
    Delete,
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
    Interrupted,
    InvalidRunnerSet,
    KubeError,
    NotFound,
    PlatformError,
    RunnerBusy,
)
from gitscale.controller.kube import Kube
from gitscale.controller.leftovers import EVERY, GRACE, sweep
from gitscale.controller.memory import Memory
from gitscale.controller.observe import (
    FINALIZER,
    RawObject,
    RunnerSetView,
    parse_runnerset,
    runner_of,
)
from gitscale.controller.platform import Adapter, Registered
from gitscale.controller.platforms import Platforms, kind_of

log = logging.getLogger("gitscale.controller")
BUSY_RETRY = timedelta(seconds=30)  # a runner that answered 422 is not asked again sooner
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
    counts: Status | None = None  # the set at the end of the pass (None: it could not count)
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
        platform = ctx.platforms.for_set(view)
    except InvalidRunnerSet as exc:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and not any(
                _owned_by(p, str(meta.get("uid", ""))) for p in ctx.pods.group(key)):
            return _release(ctx, obj, report)  # nothing to see out: do not hold the deletion
        problem = st.Problem("InvalidSpec", str(exc), person=True)
        return _finish(ctx, obj, report, None, st.conditions(None, problem, (), obj.get(
            "status"), now), now, generation=generation)
    except ControllerError as exc:
        report.requeue_after = ERROR_RETRY * 3
        problem = st.Problem("PlatformUnavailable", str(exc))
        return _finish(ctx, obj, report, None, st.conditions(None, problem, (), obj.get(
            "status"), now), now, generation=generation)

    if not view.deleting:
        obj = _hold(ctx, obj, report)
    pods = [p for p in ctx.pods.group(key) if _owned_by(p, view.uid)]
    registered = _registered(ctx, view, platform, pods, now, report)
    by_name = {}
    runners: list[Runner] = []
    for pod in pods:
        busy_until = ctx.memory.busy_until(key, pod["metadata"]["name"])
        runner = runner_of(pod, registered, busy_until, now, view.kind.running)
        runners.append(runner)
        by_name[runner.name] = runner
    ctx.memory.keep_only(key, set(by_name))

    spec = effective(view.spec, view.deleting)
    actions = decide(spec, runners, now, view.applied, view.refilled)
    report.actions = actions
    previous = obj.get("status")
    # The backlog's refills are counted before they are made: a pass cut short may then leave
    # a slot unfilled until the next write, but never refill beyond the backlog.
    refilled = refilled_after(spec, view.refilled, len(actions.refills)) \
        if actions.refills else None
    if actions.create and (view.applied is None
                           or st.ready_of(previous).get("status") != "False"):
        # Say the set is short before creating, and that the write is not applied yet: a pass
        # may be cut short (killed, stopped), and the next one must complete the write.
        before = _adjust(actions, by_name, Report(key), Created(failed=actions.create))
        obj = _write(ctx, obj, report, st.build(previous, before, st.conditions(
            before, None, actions.failing, previous, now, creating=actions.create),
            now, applied=record(view.spec, view.applied, all_created=False),
            generation=generation, refilled=refilled), previous=None)
    if refilled is not None:  # (a status that already says so is not written again)
        obj = _write(ctx, obj, report, st.with_refilled(obj.get("status"), refilled),
                     previous=None)
    created = create_runners(ctx.kube, ctx.pods, ctx.platforms, ctx.memory, ctx.pool, ctx.halt,
                             view, platform, actions)
    report.created = created.names
    report.errors += created.errors
    _delete(ctx, view, platform, actions, report, now, keep=created.unreplaced)
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
    trouble = st.Problem(created.reason or "ApplyFailed",
                         "; ".join(report.errors[:3])) if report.errors else None
    conditions = st.conditions(counts, trouble, actions.failing, obj.get("status"), now)
    configured, why = platform.busy_source()
    conditions.append(view.kind.busy_known(configured, report.unheard or why))
    waits = [w for w in (actions.requeue_after,
                         BUSY_RETRY.total_seconds() if report.busy else None,
                         ERROR_RETRY if report.errors else None,
                         report.requeue_after) if w is not None]
    report.requeue_after = min(waits) if waits else None
    return _finish(ctx, obj, report, counts, conditions, now, applied=applied,
                   generation=generation, refilled=refilled)


def _registered(ctx: Context, view: RunnerSetView, platform: Adapter, pods: list[RawObject],
                now: datetime, report: Report) -> dict[Any, Registered] | None:
    """The platform's view of the set's runners, when a pass needs it: some runner is running
    (idle or busy?), or it is time to look for registrations left without a pod."""
    running = any((p.get("status") or {}).get("phase") == "Running" for p in pods)
    registers = view.kind.registration_labels is not None
    sweeping = registers and not view.deleting and ctx.memory.sweep_due(
        view.key, now, EVERY)
    if not running and not sweeping:
        return None
    try:
        found = platform.registered()
    except ControllerError as exc:
        # A platform that registers its runners (GitHub): running runners count as busy
        # (nothing removed: an error of the pass). Buildkite: the graceful-stop rule still
        # holds; BusyKnown says so.
        if registers:
            report.errors.append(str(exc))
        report.unheard = str(exc)
        return None
    registered = dict(found) if found is not None else None
    if registered is not None and sweeping:
        swept = sweep(ctx.kube, ctx.pods, ctx.memory, view, platform, registered, now,
                      ctx.leftover_grace)
        report.leftovers = swept.removed
        report.errors += swept.errors
        report.requeue_after = swept.wake_after
        ids = {i for i, r in registered.items() if r.name in swept.removed}
        registered = {i: r for i, r in registered.items() if i not in ids}
    return registered


def _hold(ctx: Context, obj: RawObject, report: Report) -> RawObject:
    """Add the finalizer, before any runner is created. A failure is an error of the pass (it
    is tried again); the pass goes on, since not serving the set would help no one."""
    meta = obj["metadata"]
    finalizers = list(meta.get("finalizers") or [])
    if FINALIZER in finalizers:
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


def _delete(ctx: Context, view: RunnerSetView, platform: Adapter, actions: Actions,
            report: Report, now: datetime, keep: set[str]) -> None:
    """Wave by wave; ``keep``: failed runners whose successor could not be created stay (the
    next pass tries again) rather than leave their slot empty. A surplus runner that proves
    busy when it is unregistered (422) is kept, and the next of ``actions.standby`` goes in
    its place in the same pass (idle ones before pending ones, as the scale-down's order), so
    the pass removes as many as the surplus while idle runners are left."""
    todo = [d for d in actions.deletes if d.name not in keep]
    standby = list(actions.standby)
    while todo:
        wave = min(d.wave for d in todo)
        batch = [d for d in todo if d.wave == wave]
        todo = [d for d in todo if d.wave != wave]
        futures = [(d, ctx.pool.submit(_delete_one, ctx, view, platform, d)) for d in batch]
        for delete, future in futures:
            try:
                future.result()
                report.deleted.append(delete.name)
            except RunnerBusy:
                report.busy.append(delete.name)
                if ctx.memory.mark_busy(view.key, delete.name, now + BUSY_RETRY):
                    log.info("%s: runner %s is still running a job: kept (asked again in "
                             "%ds at the earliest)", view.key, delete.name,
                             BUSY_RETRY.total_seconds())
                if delete.reason is DeleteReason.SURPLUS and standby:
                    todo.append(standby.pop(0))
            except ControllerError as exc:
                report.errors.append(str(exc))
    if report.deleted:
        log.info("%s: removed %s", view.key, ", ".join(report.deleted))


def _delete_one(ctx: Context, view: RunnerSetView, platform: Adapter, delete: Delete) -> None:
    if ctx.halt.is_set():
        raise Interrupted("the controller is stopping: runner not removed, left to the next "
                          "pass (or the next leader)")
    if delete.runner_id is not None:
        try:
            platform.unregister(delete.runner_id)
        except RunnerBusy:
            raise
        except PlatformError:
            if delete.reason is DeleteReason.SURPLUS:
                raise  # a live runner is only removed once it is unregistered
            # finished or failed: its pod goes anyway; an ephemeral runner unregisters itself
    cached = ctx.pods.get(f"{view.namespace}/{delete.name}")
    try:
        pod = ctx.kube.delete_pod(view.namespace, delete.name)
    except NotFound:
        pod = None
    if pod is not None and (pod.get("metadata") or {}).get("deletionTimestamp"):
        ctx.pods.put(pod)  # terminating (graceful): the watch will say when it is gone
    else:
        ctx.pods.remove(pod or cached or {"metadata": {"namespace": view.namespace,
                                                       "name": delete.name}})


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
    return Status(pending + idle + busy + failed, pending, idle, busy, failed,
                  counts.observed_patch_id, counts.wanted, counts.held + unrefilled,
                  counts.waiting)


def _finish(ctx: Context, obj: RawObject, report: Report, counts: Status | None,
            conditions: list[st.Condition], now: datetime, *, applied: Write | None = None,
            generation: int | None = None, refilled: Refilled | None = None) -> Report:
    """Write the status at the end of a pass (logging a new Ready=False once)."""
    new = st.build(obj.get("status"), counts, conditions, now, applied=applied,
                   generation=generation, refilled=refilled)
    _write(ctx, obj, report, new, previous=report.before)
    return report


def _write(ctx: Context, obj: RawObject, report: Report, new: dict[str, Any],
           previous: dict[str, Any] | None) -> RawObject:
    """Patch the status if it changed; the object as it now is. A Ready=False whose reason or
    message differs from ``previous`` (the status before the pass; None: say nothing) is
    logged once: the condition stays until it changes."""
    if not st.changed(obj.get("status"), new):
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


def _generation(obj: RawObject) -> int | None:
    value = (obj.get("metadata") or {}).get("generation")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _owned_by(pod: RawObject, uid: str) -> bool:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == uid for ref in refs) or not uid
