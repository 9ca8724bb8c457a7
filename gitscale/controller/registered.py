"""A pass's platform: the set's adapter (``platform_of``; ``Unavailable`` for a set being
deleted that has none left, seen out all the same: ``without_platform``), and the platform's
list of the set's registered runners (``registered_of``), read only when the pass needs it, no
older than the pass allows, and swept of the registrations a crash left without a pod
(``leftovers.py``); read once more before a pass removes running runners (a scale-down, an
outdated runner, one past its registration timeout) on a platform with no guard of its own
(``busy_now``). An unregistration the credentials were refused for is told to the platform
registry (``refused``), so the next pass reads the Secret again.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta

from gitscale.controller import status as st
from gitscale.controller.context import ERROR_RETRY, Context, Report
from gitscale.controller.decide import Actions, DeleteReason, Phase
from gitscale.controller.errors import (
    ControllerError,
    CredentialsError,
    InvalidRunnerSet,
    PlatformOutage,
)
from gitscale.controller.leftovers import EVERY, sweep
from gitscale.controller.outage import NotAsked
from gitscale.controller.observe import RawObject, RunnerSetView, registration_timed_out, stopped
from gitscale.controller.platform import Adapter, Listed, Unavailable
from gitscale.controller.remove import Removed

log = logging.getLogger("gitscale.controller")
# How old the list read again before a removal may be (``busy_now``): a list the pass itself
# read for its decision (or another set's pass on the same credentials, a moment ago) is that
# list; read again, it would say the same at twice the requests.
FRESH_MAX_AGE = 1.0


def refused(ctx: Context, view: RunnerSetView, removed: Removed, report: Report) -> None:
    """An unregistration refused the set's credentials (a revoked or rotated token): its
    clients are forgotten, so the next pass reads the Secret again. One the platform failed
    (an outage): Ready says so (``PlatformUnavailable``), unless the pass has a reason already."""
    if removed.refused is not None:
        ctx.platforms.refused(view, removed.refused)
    if removed.outage is not None and report.reason is None:
        report.reason = st.platform_reason(removed.outage)
    if isinstance(removed.outage, NotAsked):
        _again(report, removed.outage)


def _again(report: Report, exc: NotAsked) -> None:
    """A call not made while the platform is given time: the pass is tried again when it
    may be (a second, when only the one request trying it was in the way)."""
    now = report.requeue_after if report.requeue_after is not None else ERROR_RETRY
    report.requeue_after = min(now, max(exc.after, 0.1))


def platform_of(ctx: Context, view: RunnerSetView) -> Adapter:
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


def without_platform(reason: str, report: Report) -> st.Problem:
    """A set being deleted without its platform: runners that are not running were removed
    without unregistering (the offline registrations of ephemeral runners are GitHub's to
    drop, after a day); running ones are kept until they stop, since idle cannot be told from
    busy; the finalizer goes once no pod is left. Said in Ready (and so once in the log)."""
    report.failed(ERROR_RETRY * 3)
    return st.Problem(st.UNAVAILABLE, "; ".join([
        f"{reason}: the set is being deleted without its platform: runners that were not "
        "running are removed without unregistering (GitHub drops the offline registrations "
        "of ephemeral runners after a day); running ones are kept until they stop, as idle "
        "cannot be told from busy without it (delete their pods to let the set go now)",
        *st.said_once(e for e in report.errors if e not in reason)[:2]]))


def registered_of(ctx: Context, view: RunnerSetView, platform: Adapter, pods: list[RawObject],
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
            if isinstance(exc, (CredentialsError, PlatformOutage)):
                report.reason = st.platform_reason(exc)
        elif ctx.memory.say(view.key, "busy", str(exc)):
            # (no error of the pass: BusyKnown says it; the log says it once, as it starts)
            log.warning("%s: idle and busy not known (%s): an agent counts as idle unless its "
                        "pod says gitscale.dev/busy=true", view.key, exc)
        report.unheard = str(exc)
        if isinstance(exc, NotAsked):
            _again(report, exc)
        return None
    if not registers:
        ctx.memory.say(view.key, "busy", "")  # heard again: a later failure is said anew
    if found is None:
        return None
    listed = found if isinstance(found, Listed) else Listed(found)
    if not sweeping:
        return listed
    swept = sweep(ctx.kube, ctx.pods, ctx.memory, view, platform, listed, now,
                  timedelta(0) if view.deleting else ctx.leftover_grace, stop=ctx.deposed)
    report.leftovers = swept.removed
    report.errors += swept.errors
    if swept.wake_after is not None:
        report.requeue_after = min(report.requeue_after or swept.wake_after, swept.wake_after)
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


# The removals of a running runner a list read again may stop (``busy_now``): the scale-down's
# (its surplus and ``standby``), an outdated runner's and a failed one's (a running pod is
# failed only by its registration timeout).
FRESH_REASONS = frozenset({DeleteReason.SURPLUS, DeleteReason.OUTDATED, DeleteReason.FAILED})


def busy_now(ctx: Context, view: RunnerSetView, platform: Adapter, pods: list[RawObject],
             actions: Actions, live: set[str], report: Report) -> dict[str, Phase]:
    """The running runners the pass is about to remove that a list read now says to keep, with
    the phase it gives them, on a platform with no guard against removing one
    (``Kind.fresh_before_removal``: Buildkite). The pass decided on a list up to
    ``LIST_MAX_AGE`` old (``STATUS_LIST_MAX_AGE`` for outdated runners), and an agent that took
    a job since would be stopped mid-job (it finishes it in its grace period, but a busy
    runner went, not an idle one):

    - a surplus runner (or one of ``standby``) it shows running a job: BUSY, kept, and the
      next of the scale-down's order goes in its place (``remove_runners``);
    - an outdated one it shows running a job: BUSY, kept until it is done, not replaced
      (``retire``);
    - one failed by its registration timeout (the pass's list never showed it) that it shows
      online: BUSY or IDLE as it says — online after all, not failed: kept, not replaced
      (``retire``).

    Read once, before the pass creates the successors of the runners it removes, and only
    when it removes a running runner for one of these reasons (a list read this last second,
    the pass's own, is that list: ``FRESH_MAX_AGE``): a pass that stops none asks nothing
    more. A list that cannot be read leaves the removals as decided (the graceful-stop rule,
    said once in the log, and by ``BusyKnown``)."""
    if not view.kind.fresh_before_removal or ctx.halt.is_set() or not any(
            d.reason in FRESH_REASONS and d.name in live for d in actions.deletes):
        return {}
    asked = {d.name: d.reason for d in (*actions.deletes, *actions.standby)
             if d.reason in FRESH_REASONS and d.name in live}
    try:
        fresh = platform.registered(FRESH_MAX_AGE)
    except ControllerError as exc:
        ctx.platforms.refused(view, exc)
        report.unheard = str(exc)
        if ctx.memory.say(view.key, "fresh", str(exc)):
            log.warning("%s: the runner list could not be read again before running runners "
                        "are removed (%s): they are removed as the list read before says, and "
                        "one that took a job since finishes it on SIGTERM", view.key, exc)
        return {}
    ctx.memory.say(view.key, "fresh", "")  # read again: a later failure is said anew
    if fresh is None:
        return {}
    kept: dict[str, Phase] = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        if name not in asked:
            continue
        phase = view.kind.running(name, pod["metadata"].get("annotations") or {}, None, fresh)
        if phase is Phase.BUSY or (phase is Phase.IDLE
                                   and asked[name] is DeleteReason.FAILED):
            kept[name] = phase
    return kept
