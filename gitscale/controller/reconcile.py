"""One pass over one RunnerSet: observe → decide → apply, then write status.

Everything the pass reads comes from the stores; everything it writes goes through ``kube``
and the platform adapter, in bulk: all creations of a pass are submitted to the shared thread
pool at once, and deletions run wave by wave (idle before pending). A failure to
create or delete one runner does not stop the others; it becomes the ``Ready`` condition.
Creating is ``create.py``, removing ``remove.py``; what the pass is given and what it did,
``context.py``; the platform's list of the set's runners, ``registered.py``; the finalizer
and the status written, ``runnerset_writes.py``.

Every set served carries the ``gitscale.dev/runners`` finalizer, so deleting it (by hand, or
Argo CD / Flux pruning it) with background propagation does not garbage-collect busy runners: a
set being deleted is scaled to (0, 0) like any other, and the finalizer goes once none of its
runner pods remain. (A foreground deletion deletes the pods at once, finalizer or not: the
README's "Removing a runner set".)
"""
from __future__ import annotations

import logging
from dataclasses import replace
from datetime import timedelta

from gitscale.controller import status as st
from gitscale.controller.context import ERROR_RETRY, Context, Report
from gitscale.controller.create import (
    Created,
    create_runners,
    hand_over,
    held_back,
    look_again,
)
from gitscale.controller.decide import (
    Actions,
    DeleteReason,
    Phase,
    Refilled,
    Runner,
    Status,
    decide,
    effective,
    record,
    refilled_after,
)
from gitscale.controller.errors import ControllerError, CredentialsError, InvalidRunnerSet
from gitscale.controller.leftovers import EVERY, sweep_secrets
from gitscale.controller.observe import (
    RawObject,
    RunnerSetView,
    parse_runnerset,
    refilled_of,
    runner_of,
    stopped,
)
from gitscale.controller.platform import Listed, Unavailable
from gitscale.controller.platforms import kind_of
from gitscale.controller.podspec import matching_of
from gitscale.controller.registered import (
    busy_now,
    platform_of,
    refused,
    registered_of,
    without_platform,
)
from gitscale.controller.remove import BUSY_RETRY, remove_runners, retire
from gitscale.controller.runnerset_writes import confirm, finish, hold, release, write
from gitscale.runnerset_api import PATCH_ID_MAX

log = logging.getLogger("gitscale.controller")


def reconcile(ctx: Context, key: str) -> Report:
    # The pass keeps the events of the term it starts in (``Context.halt`` and ``deposed``; a
    # new term gets new ones): lost while it runs, the Lease stays lost to it, even when this
    # replica takes the Lease back before the pass ends.
    ctx = replace(ctx)
    report = Report(key)
    obj = ctx.runnersets.get(key)
    if obj is None:  # gone: the finalizer saw its runners out first
        ctx.memory.forget(key)
        ctx.platforms.forget_set(key)
        return report
    now = ctx.clock()
    generation = _generation(obj)
    report.before = obj.get("status") or {}
    try:
        view = parse_runnerset(obj, kind_of)
        platform = platform_of(ctx, view)
    except InvalidRunnerSet as exc:
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and not any(
                _owned_by(p, str(meta.get("uid", ""))) for p in ctx.pods.group(key)):
            return release(ctx, obj, report)  # nothing to see out: do not hold the deletion
        problem = st.Problem("InvalidSpec", str(exc), person=True)
        return finish(ctx, obj, report, None, st.conditions(None, problem, (), obj.get(
            "status"), now), now, generation=generation, observed=_patch_id(obj))
    except ControllerError as exc:
        # Its credentials Secret missing or refused (a configuration to fix), or the platform
        # or the Secret not to be had this time (an outage): nothing done, status says which.
        report.failed(ERROR_RETRY * 3)
        problem = st.Problem(st.platform_reason(exc), str(exc))
        return finish(ctx, obj, report, None, st.conditions(None, problem, (), obj.get(
            "status"), now), now, generation=generation, observed=_patch_id(obj))

    confirmed = False  # a write of this pass, conditional on the version read, went through
    if not view.deleting:
        held = hold(ctx, obj, report)
        if held is None:  # edited since it was read: nothing done on a stale spec
            return report
        confirmed, obj = held is not obj, held
    handed = hand_over(ctx.kube, ctx.pods, ctx.memory, view)
    report.errors += handed.messages()
    report.folded += handed.folded
    if (view.kind.registration_labels is not None and not view.deleting
            and not ctx.deposed.is_set() and ctx.memory.secret_sweep_due(key, now, EVERY)):
        # What another process, or this one before a restart, could not hand over. Its failure
        # is housekeeping's, not the set's (Ready stays as the runners make it): said in the
        # log once, tried again by the next sweep.
        swept = sweep_secrets(ctx.kube, ctx.pods, view, now, stop=ctx.deposed)
        report.folded += len(swept.errors)
        said = "; ".join(st.said_once(swept.errors)[:3])
        if ctx.memory.say(key, "secrets", said):
            log.warning("%s: JIT Secrets left behind not swept (tried again in %d minutes): %s",
                        key, EVERY.total_seconds() // 60, said)
    unknown = look_again(ctx.kube, ctx.pods, ctx.memory, view)
    if unknown is not None:  # a runner that may exist: the set's runners cannot be counted
        report.errors.append(unknown)
        report.failed()
        problem = st.Problem("ApplyFailed", unknown)
        return finish(ctx, obj, report, None, st.conditions(None, problem, (), obj.get(
            "status"), now), now, generation=generation, observed=_patch_id(obj))
    pods = [p for p in ctx.pods.group(key) if _owned_by(p, view.uid)]
    unavailable = platform.reason if isinstance(platform, Unavailable) else None
    try:
        registered = None if unavailable else registered_of(ctx, view, platform, pods, now,
                                                            report)
    except CredentialsError as exc:  # a set being deleted: its credentials no longer work
        platform, unavailable, registered = Unavailable(str(exc)), str(exc), None
    # The list may be a reused one: a runner's registration timeout is judged at its time (to
    # the second, as a container's start: a list read by this pass counts as read now).
    listed_at = now - timedelta(seconds=int(registered.age)) \
        if isinstance(registered, Listed) else None
    matching = matching_of(view)  # (a pod made for other settings is outdated)
    by_name = {}
    runners: list[Runner] = []
    dead: set[str] = set()  # runners that stopped for good (busy or not, GitHub may say)
    live: set[str] = set()  # runners whose pod runs: they may be connected (idle or busy)
    for pod in pods:
        name = pod["metadata"]["name"]
        runner = runner_of(pod, registered, ctx.memory.busy_until(key, name), now,
                           view.kind.running, ctx.memory.came_online(key, name), listed_at,
                           matching)
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
    actions = report.actions = decide(spec, runners, now, view.applied, view.refilled)
    previous = obj.get("status")
    # The backlog's refills are counted before they are made: a pass cut short may then leave
    # a slot unfilled until the next write, but never refill beyond the backlog. Both writes
    # are conditional on the version read (``write``): a count computed from an older one
    # (another replica counted since, this one deposed without knowing it yet) is a 409, and
    # the pass stops with nothing done — the next one, on the new version, counts again.
    refilled = refilled_after(spec, view.refilled, len(actions.refills)) \
        if actions.refills else None
    if actions.create and held_back(ctx.memory, view, now,
                                    ctx.platforms.made_from(key)) is None and (
            view.applied is None or st.ready_of(previous).get("status") != "False"):
        # Say the set is short before creating, and that the write is not applied yet: a pass
        # may be cut short (killed, stopped), and the next one must complete the write.
        before = replace(_adjust(actions, by_name, Report(key), Created(failed=actions.create)),
                         terminating=_terminating(ctx, view))
        written = write(ctx, obj, report, st.build(previous, before, st.conditions(
            before, None, actions.failing, previous, now, creating=actions.create,
            hint=view.kind.failing_hint(view.settings, view.namespace)),
            now, applied=record(view.spec, view.applied, all_created=False),
            generation=generation, refilled=refilled), previous=None)
        if written is None:  # written since it was read: nothing done on a stale version
            return report
        confirmed, obj = confirmed or written is not obj, written
    unrefilled: tuple[str, ...] = ()
    if refilled is not None:  # (a status that already says so is not written again)
        written = write(ctx, obj, report, st.with_refilled(obj.get("status"), refilled),
                        previous=None)
        if written is None:
            return report
        confirmed, obj = confirmed or written is not obj, written
        counted = refilled_of(obj.get("status"))
        if counted is None or counted.count != refilled.count or not refilled.write.same(
                counted.write):
            unrefilled = actions.refills  # uncounted, they could be made twice: not now
    # A removal is decided on the cached spec too: made on a version written since (Argo CD
    # just applied replicas 10 while this pass read a patch-0 scale-down), it would delete
    # runners the newer write wants, and the next pass would make them again. So a pass that
    # removes any runner first confirms the version it read — by the writes above when one
    # went through (conditional on that version), else by one read of the set — and stops as
    # on a 409 when it was written since. A pass that removes nothing pays nothing for it; nor
    # does a set being deleted (no version written since can want its runners back).
    if actions.deletes and not (confirmed or view.deleting or ctx.halt.is_set()):
        if confirm(ctx, obj, report) is None:
            if report.stale:
                return report
            # The set could not be read (its Role without list on runnersets, an outage):
            # nothing removed, and Ready and the log say why (not only an Event).
            problem = st.Problem("ApplyFailed", "; ".join(st.said_once(report.errors)[:3]))
            return finish(ctx, obj, report, None, st.conditions(None, problem, (), obj.get(
                "status"), now), now, generation=generation, observed=_patch_id(obj))
    # Buildkite (no 422 there): the running runners this pass would stop that a list read again
    # shows busy (or, past their registration timeout, online after all) are kept — read before
    # the failed and outdated runners' successors are made, so a runner kept is not replaced.
    fresh = busy_now(ctx, view, platform, pods, actions, live, report)
    # A failed runner whose pod still runs is unregistered before its successor is created.
    actions, retired = retire(ctx.memory, ctx.pool, ctx.halt, view, platform, actions, dead,
                              now, fresh)
    report.busy += retired.busy
    report.online += retired.online
    report.errors += retired.errors
    report.folded += retired.folded
    refused(ctx, view, retired, report)
    report.actions = actions
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
    report.folded += created.folded
    removed = remove_runners(ctx.kube, ctx.pods, ctx.memory, ctx.pool, ctx.halt, view, platform,
                             actions, now, keep=created.unreplaced, dead=dead, live=live,
                             busy=frozenset(fresh))
    report.deleted = removed.deleted
    report.busy += removed.busy
    report.errors += removed.errors
    report.folded += removed.folded
    refused(ctx, view, removed, report)
    if view.deleting and not any(_owned_by(p, view.uid) for p in ctx.pods.group(key)):
        return release(ctx, obj, report)

    counts = report.counts = replace(_adjust(actions, by_name, report, created),
                                     terminating=_terminating(ctx, view))
    # The write is recorded as applied only when all of its creations were made; a refill
    # whose runner could not be created keeps its marker, and its place in the backlog.
    applied = view.applied if view.deleting else record(view.spec, view.applied,
                                                         not created.failed)
    if refilled is not None:
        refilled = Refilled(refilled.write,
                            refilled.count - len(created.unreplaced & set(actions.refills)))
    trouble = st.Problem(created.reason or report.reason or "ApplyFailed",
                         "; ".join(st.said_once(report.errors)[:3])) if report.errors else None
    if unavailable:
        trouble = without_platform(unavailable, report)
    gone = set(report.deleted)
    unscheduled = st.unscheduled((r for r in runners if r.name not in gone), now)
    report.unschedulable = unscheduled.count
    if not view.deleting:  # (a set being deleted is acted on as (0, 0): nothing to say)
        report.unapplied = st.unapplied(view.spec, view.applied)
    conditions = st.conditions(counts, trouble, actions.failing, obj.get("status"), now,
                               unschedulable=unscheduled, unapplied=report.unapplied,
                               hint=view.kind.failing_hint(view.settings, view.namespace),
                               not_starting=st.cannot_start(
                                   r for r in runners if r.name not in gone),
                               runners=[*(r for r in runners if r.name not in gone),
                                        *(Runner(name, 0, Phase.PENDING, created_at=now)
                                          for name in report.created)])
    configured, why = platform.busy_source()
    conditions.append(view.kind.busy_known(configured, report.unheard or why))
    others = len(report.errors) - len(created.errors)  # errors not of its creations
    if others or (created.errors and created.retry_after is None):
        report.failed()  # (refused creations back off on their own: ``created.retry_after``)
    waits = [w for w in (actions.requeue_after,
                         BUSY_RETRY.total_seconds() if report.busy else None,
                         created.retry_after,  # refused creations back off
                         report.requeue_after,
                         unscheduled.wake_after) if w is not None]  # (its grace runs out)
    report.requeue_after = min(waits) if waits else None
    return finish(ctx, obj, report, counts, conditions, now, applied=applied,
                  generation=generation, refilled=refilled)


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
    for name in set(report.online) - surplus - standby:  # timed out, online after all
        if runners[name].phase is Phase.FAILED:
            failed, idle = failed - 1, idle + 1
    for name in set(report.busy) - surplus - standby:  # replaced, but it runs a job (a 422)
        phase = runners[name].phase
        if phase is Phase.FAILED:
            failed, busy = failed - 1, busy + 1
        elif phase is Phase.IDLE:  # (outdated)
            idle, busy = idle - 1, busy + 1
        elif phase is Phase.PENDING:
            pending, busy = pending - 1, busy + 1
    return Status(pending + idle + busy + failed, pending, idle, busy, failed,
                  counts.observed_patch_id, counts.wanted, counts.held + unrefilled,
                  counts.waiting)


def _terminating(ctx: Context, view: RunnerSetView) -> int:
    """The set's pods being deleted that have not stopped (a graceful deletion: this pass's
    too, its store has them): reported as such in status, never as runners of the set — they
    hold no slot (``decide`` leaves them out of every count, creation and removal)."""
    return sum(1 for p in ctx.pods.group(view.key) if _owned_by(p, view.uid)
               and (p.get("metadata") or {}).get("deletionTimestamp") and not stopped(p))


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
