"""One pass over one RunnerSet: observe → decide → apply, then write status.

Everything the pass reads comes from the stores; everything it writes goes through ``kube``
and the platform adapter, in bulk: all creations of a pass are submitted to the shared thread
pool at once (seed 002), and deletions run wave by wave (idle before pending). A failure to
create or delete one runner does not stop the others; it becomes the ``Ready`` condition.

Every set served carries the ``gitscale.dev/runners`` finalizer, so deleting it (by hand, or
Argo CD / Flux pruning it) does not garbage-collect busy runners: a set being deleted is scaled
to (0, 0) like any other, and the finalizer goes once none of its runner pods remain.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import Executor, Future, wait
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable

from gitscale.controller import status as st
from gitscale.controller.cache import Store
from gitscale.controller.decide import (
    Actions,
    Delete,
    DeleteReason,
    Phase,
    Runner,
    Status,
    decide,
    effective,
)
from gitscale.controller.errors import (
    Conflict,
    ControllerError,
    CredentialsError,
    InvalidRunnerSet,
    KubeError,
    NotFound,
    PlatformError,
    RunnerBusy,
)
from gitscale.controller.kube import Kube
from gitscale.controller.observe import (
    FINALIZER,
    RawObject,
    Registered,
    RunnerSetView,
    parse_runnerset,
    runner_of,
)
from gitscale.controller.platforms import Platform, Platforms
from gitscale.controller.podspec import jit_secret, new_name, runner_pod

log = logging.getLogger("gitscale.controller")
BUSY_RETRY = timedelta(seconds=30)  # a runner that answered 422 is not asked again sooner
ERROR_RETRY = 10.0


class Memory:
    """What a pass learns that the cluster does not hold: runners GitHub called busy (422),
    keyed by set, then pod name; and the sets whose last creations were refused."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy: dict[str, dict[str, datetime]] = {}
        self._said: dict[str, set[str]] = {}
        self._refused: set[str] = set()

    def refused(self, set_key: str) -> bool:
        with self._lock:
            return set_key in self._refused

    def set_refused(self, set_key: str, refused: bool) -> None:
        with self._lock:
            (self._refused.add if refused else self._refused.discard)(set_key)

    def forget(self, set_key: str) -> None:
        """The set is gone."""
        self.keep_only(set_key, set())
        self.set_refused(set_key, False)

    def busy_until(self, set_key: str, pod: str) -> datetime | None:
        with self._lock:
            return self._busy.get(set_key, {}).get(pod)

    def mark_busy(self, set_key: str, pod: str, until: datetime) -> bool:
        """Remember; True the first time for this runner (say it once)."""
        with self._lock:
            self._busy.setdefault(set_key, {})[pod] = until
            said = self._said.setdefault(set_key, set())
            first = pod not in said
            said.add(pod)
            return first

    def keep_only(self, set_key: str, pods: set[str]) -> None:
        """Forget runners that are gone (all of them when the set is gone)."""
        with self._lock:
            for table in (self._busy.get(set_key, {}), self._said.get(set_key, set())):
                for pod in [p for p in table if p not in pods]:
                    if isinstance(table, dict):
                        table.pop(pod, None)
                    else:
                        table.discard(pod)
            if not pods:
                self._busy.pop(set_key, None)
                self._said.pop(set_key, None)


@dataclass
class Context:
    kube: Kube
    runnersets: Store
    pods: Store
    platforms: Platforms
    pool: Executor
    memory: Memory
    clock: Callable[[], datetime]


@dataclass
class Report:
    """What a pass did (logged, kept for tests and the benchmark)."""

    key: str
    actions: Actions | None = None
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    status_written: bool = False
    requeue_after: float | None = None
    seconds: float = 0.0


def reconcile(ctx: Context, key: str) -> Report:
    report = Report(key)
    obj = ctx.runnersets.get(key)
    if obj is None:  # gone: the finalizer saw its runners out first
        ctx.memory.forget(key)
        return report
    now = ctx.clock()
    try:
        view = parse_runnerset(obj)
        platform = ctx.platforms.for_set(view)
    except InvalidRunnerSet as exc:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and not any(
                _owned_by(p, str(meta.get("uid", ""))) for p in ctx.pods.group(key)):
            return _release(ctx, obj, report)  # nothing to see out: do not hold the deletion
        return _finish(ctx, obj, report, None, [st.not_ready("InvalidSpec", str(exc))], now)
    except ControllerError as exc:
        report.requeue_after = ERROR_RETRY * 3
        return _finish(ctx, obj, report, None,
                       [st.not_ready("PlatformUnavailable", str(exc))], now)

    if not view.deleting:
        obj = _hold(ctx, obj, report)
    pods = [p for p in ctx.pods.group(key) if _owned_by(p, view.uid)]
    registered: dict[int, Registered] | None = None
    if any((p.get("status") or {}).get("phase") == "Running" for p in pods):
        try:
            found = platform.registered()
            registered = dict(found) if found is not None else None
        except ControllerError as exc:
            report.errors.append(str(exc))  # running runners count as busy: nothing deleted
    by_name = {}
    runners: list[Runner] = []
    for pod in pods:
        busy_until = ctx.memory.busy_until(key, pod["metadata"]["name"])
        runner = runner_of(pod, registered, busy_until, now)
        runners.append(runner)
        by_name[runner.name] = runner
    ctx.memory.keep_only(key, set(by_name))

    actions = decide(effective(view.spec, view.deleting), runners, now)
    report.actions = actions
    _create(ctx, view, platform, actions, report)
    _delete(ctx, view, platform, actions, report, now)
    if view.deleting and not any(_owned_by(p, view.uid) for p in ctx.pods.group(key)):
        return _release(ctx, obj, report)

    counts = _adjust(actions, by_name, report)
    conditions = [st.not_ready("ApplyFailed", "; ".join(report.errors[:3]))
                  if report.errors else st.ready(), st.failing(actions.failing)]
    waits = [w for w in (actions.requeue_after,
                         BUSY_RETRY.total_seconds() if report.busy else None,
                         ERROR_RETRY if report.errors else None) if w is not None]
    report.requeue_after = min(waits) if waits else None
    return _finish(ctx, obj, report, counts, conditions, now)


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


def _create(ctx: Context, view: RunnerSetView, platform: Platform, actions: Actions,
            report: Report) -> None:
    """Every missing runner at once (seed 002). After a pass whose creations were refused
    (a quota, an admission webhook, GitHub down), in slow-start batches of 1, 2, 4… that stop
    at the first failure, like the ReplicaSet controller: each runner tried costs a GitHub
    registration (and its removal when the pod is refused), and a set stuck on its quota must
    not spend the rate limit every pass."""
    # Replacements of failed runners first: a slow start that stops early keeps their lineage.
    lineage = list(actions.retries) + [0] * actions.create
    if not lineage:
        return
    taken = {p["metadata"]["name"] for p in ctx.pods.group(view.key)}
    names: list[str] = []
    while len(names) < len(lineage):
        name = new_name(view.name)
        if name not in taken:
            taken.add(name)
            names.append(name)
    todo = list(zip(names, lineage))
    batch = 1 if ctx.memory.refused(view.key) else len(todo)
    failed = False
    while todo and not failed:
        tried, todo = todo[:batch], todo[batch:]
        batch *= 2
        futures: list[Future[str]] = [
            ctx.pool.submit(_create_one, ctx, view, platform, name, actions.create_patch_id,
                            failures)
            for name, failures in tried]
        wait(futures)
        for future in futures:
            try:
                report.created.append(future.result())
            except CredentialsError as exc:
                ctx.platforms.forget(view)  # read the Secret again next pass: it may be fixed
                report.errors.append(str(exc))
                failed = True
            except ControllerError as exc:
                report.errors.append(str(exc))
                failed = True
    if todo:
        report.errors.append(f"{len(todo)} more runner(s) not tried after that: next pass")
    ctx.memory.set_refused(view.key, failed)
    if report.created:
        log.info("%s: created %d runner(s) for patch %d", view.key, len(report.created),
                 actions.create_patch_id)


def _create_one(ctx: Context, view: RunnerSetView, platform: Platform, name: str,
                patch_id: int, failures: int) -> str:
    registration = platform.register(name)
    runner_id = registration.runner_id if registration else None
    body = runner_pod(view, name, patch_id, failures, platform.env(name), runner_id)
    try:
        pod = ctx.kube.create_pod(body)
    except ControllerError:
        if runner_id is not None:
            _quietly(platform.unregister, runner_id)
        raise
    ctx.pods.put(pod)
    if registration is not None:
        try:
            ctx.kube.create_secret(jit_secret(pod, registration.jit_config))
        except ControllerError:
            _quietly(ctx.kube.delete_pod, view.namespace, name)
            _quietly(platform.unregister, registration.runner_id)
            raise
    return name


def _delete(ctx: Context, view: RunnerSetView, platform: Platform, actions: Actions,
            report: Report, now: datetime) -> None:
    for wave in sorted({d.wave for d in actions.deletes}):
        batch = [d for d in actions.deletes if d.wave == wave]
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
            except ControllerError as exc:
                report.errors.append(str(exc))
    if report.deleted:
        log.info("%s: removed %s", view.key, ", ".join(report.deleted))


def _delete_one(ctx: Context, view: RunnerSetView, platform: Platform, delete: Delete) -> None:
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


def _adjust(actions: Actions, runners: dict[str, Runner], report: Report) -> Status:
    """The decision's counts, corrected for what did not happen (failed creations, 422s)."""
    counts = actions.status
    fresh_failed = max(actions.create + len(actions.retries) - len(report.created), 0)
    pending = counts.pending - min(fresh_failed, actions.create)
    idle, busy, failed = counts.idle, counts.busy, counts.failed
    surplus = {d.name for d in actions.deletes if d.reason is DeleteReason.SURPLUS}
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
    return Status(pending + idle + busy + failed, pending, idle, busy, failed,
                     counts.observed_patch_id)


def _finish(ctx: Context, obj: RawObject, report: Report, counts: Status | None,
            conditions: list[st.Condition], now: datetime) -> Report:
    new = st.build(obj.get("status"), counts, conditions, now)
    if not st.changed(obj.get("status"), new):
        return report
    if not conditions[0].status:  # said once: the condition stays until it changes
        log.warning("%s: %s", report.key, conditions[0].message)
    meta = obj["metadata"]
    try:
        updated = ctx.kube.patch_runnerset_status(meta["namespace"], meta["name"], new)
    except NotFound:
        return report
    except KubeError as exc:
        if isinstance(exc, Conflict) and meta.get("deletionTimestamp"):
            return report  # being deleted: its status no longer matters
        report.errors.append(str(exc))
        report.requeue_after = min(report.requeue_after or ERROR_RETRY, ERROR_RETRY)
        return report
    ctx.runnersets.put(updated)
    report.status_written = True
    return report


def _owned_by(pod: RawObject, uid: str) -> bool:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == uid for ref in refs) or not uid


def _quietly(fn: Callable[..., Any], *args: Any) -> None:
    try:
        fn(*args)
    except ControllerError as exc:
        log.warning("clean-up failed: %s", exc)
