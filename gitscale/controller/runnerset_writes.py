"""A pass's writes to its RunnerSet: the finalizer added before any runner is created
(``hold``) and lifted once a set being deleted has no runner left (``release``), and the status
patched when it changed (``write``; ``finish`` at the end of a pass), each condition's message
masked first, a new Ready=False logged once. A replica that lost the Lease writes none of them:
the new leader does.

Each of them is conditional on the version of the set the pass read (its
``metadata.resourceVersion``, a precondition of the patch): a status is computed from that
version — the refill count of its write, the write recorded as applied — and written over a
newer one it would roll them back (a replica that lost the Lease and has not noticed yet, a
pass that read its cache before an edit came through the watch), so that the next leader
refills a slot twice. A conflict (409) is no failure: the pass stops, or leaves its status to
the next pass, and the edit — on its way through the watch — brings that pass
(``STALE_RETRY`` at the latest). The set is read once then (``stale``) and the version read
goes into the cache when it is newer, so that pass works on it even while the watch is down
(it fails, backs off up to 30 s, or lags).

A pass that removes runners confirms the version first (``confirm``): a removal is decided
on the cached spec too, and one made on a version written since would delete runners the
newer write wants (the next pass makes them again).
"""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from gitscale.controller import status as st
from gitscale.controller.context import Context, Report
from gitscale.controller.decide import Refilled, Status, Write
from gitscale.controller.errors import Conflict, KubeError, NotFound
from gitscale.controller.observe import FINALIZER, RawObject
from gitscale.redact import redact

log = logging.getLogger("gitscale.controller")
STALE_RETRY = 1.0  # seconds: a pass that read a set edited since runs again (if no event came)


def hold(ctx: Context, obj: RawObject, report: Report) -> RawObject | None:
    """Add the finalizer, before any runner is created. A failure is an error of the pass (it
    is tried again); the pass goes on, since not serving the set would help no one. A
    conflict is no failure: someone edited the set since it was read (Argo CD, Flux, a
    human), so the pass was about to act on a spec that is no longer the set's. None then:
    the pass stops with nothing done, and the edit, on its way through the watch, brings the
    next one (``STALE_RETRY`` at the latest)."""
    meta = obj["metadata"]
    finalizers = list(meta.get("finalizers") or [])
    if FINALIZER in finalizers or ctx.deposed.is_set():  # (deposed: the new leader adds it)
        return obj
    try:
        updated = ctx.kube.patch_runnerset_finalizers(
            meta["namespace"], meta["name"], finalizers + [FINALIZER], meta["resourceVersion"])
    except NotFound:
        return obj
    except Conflict:
        stale(ctx, obj, report, "its finalizer")
        return None
    except KubeError as exc:
        report.errors.append(str(exc))
        return obj
    ctx.runnersets.put(updated)
    return updated


def release(ctx: Context, obj: RawObject, report: Report) -> Report:
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
        except Conflict:  # edited meanwhile: the next pass, on the new version, lifts it
            stale(ctx, obj, report, "its finalizer")
            return report
        except KubeError as exc:
            report.errors.append(str(exc))
            report.failed()
            return report
        if finalizers and updated is not None:
            ctx.runnersets.put(updated)  # someone else's finalizer still holds it
        else:
            ctx.runnersets.remove(obj)
        log.info("%s: no runners left: finalizer %s removed", report.key, FINALIZER)
    ctx.memory.forget(report.key)
    ctx.platforms.forget_set(report.key)
    return report


def finish(ctx: Context, obj: RawObject, report: Report, counts: Status | None,
           conditions: list[st.Condition], now: datetime, *, applied: Write | None = None,
           generation: int | None = None, refilled: Refilled | None = None,
           observed: int | None = None) -> Report:
    """Write the status at the end of a pass (logging a new Ready=False once); ``observed``:
    the spec's patch ID, when the pass could not count (``st.build``). A set edited since it
    was read keeps its status for the next pass to write (``write``)."""
    new = st.build(obj.get("status"), counts, conditions, now, applied=applied,
                   generation=generation, refilled=refilled, observed=observed)
    write(ctx, obj, report, new, previous=report.before)
    return report


def write(ctx: Context, obj: RawObject, report: Report, new: dict[str, Any],
          previous: dict[str, Any] | None) -> RawObject | None:
    """Patch the status if it changed, only on the version of ``obj``; the object as it now
    is, or None when it was written since (a 409, ``stale``: no error — the pass stops, or
    leaves its status to the next pass). A Ready=False whose reason or message differs from
    ``previous`` (the status before the pass; None: say nothing) is logged once: the condition
    stays until it changes. Every condition's message is masked (``redact``) first: it quotes
    what the APIs said, which may echo a credential the process holds, and anyone who may read
    the RunnerSet reads it."""
    new = _masked(new)
    if not st.changed(obj.get("status"), new):
        return obj
    if ctx.deposed.is_set():  # the Lease was lost meanwhile: the new leader writes it
        return obj
    meta = obj["metadata"]
    # A merge patch keeps what it does not name: a field the new status no longer has (the
    # effectiveTime of a write that has none) is sent as null, or it would stay, and every
    # later pass would find the status changed and patch it again.
    patch = {**new, **{k: None for k in obj.get("status") or {} if k not in new}}
    try:
        updated = ctx.kube.patch_runnerset_status(
            meta["namespace"], meta["name"], patch,
            resource_version=meta.get("resourceVersion") or None)
    except NotFound:
        return obj
    except Conflict:
        stale(ctx, obj, report, "its status")
        return None
    except KubeError as exc:
        _say(report, new, previous)
        report.errors.append(str(exc))
        report.failed()
        return obj
    _say(report, new, previous)
    ctx.runnersets.put(updated)
    report.status_written = True
    return updated


def _say(report: Report, new: dict[str, Any], previous: dict[str, Any] | None) -> None:
    """Log a Ready=False that ``previous`` did not say (not for a stale pass: the next one
    says what holds). Refused credentials are said by their streak instead (``refusals.py``:
    once as it starts, changes, every half hour and ends), as Ready's message changes with
    each try of their backoff."""
    ready = st.ready_of(new)
    if ready.get("reason") == st.CREDENTIALS_REFUSED:
        return
    if previous is not None and ready.get("status") == "False":
        said = st.ready_of(previous)
        if (said.get("reason"), said.get("message")) != (ready.get("reason"),
                                                         ready.get("message")):
            log.warning("%s: %s", report.key, ready.get("message", ready.get("reason")))


def confirm(ctx: Context, obj: RawObject, report: Report) -> RawObject | None:
    """Before a pass removes a runner (unregisters it, deletes its pod, a finished runner's
    too): is ``obj``, the version the pass decided on, still the set's? One read of the set,
    made only by a pass that removes and has written nothing conditional on ``obj`` yet (a
    write that succeeded on it already says so). ``obj`` when it is (or the set is gone: no
    newer version can want its runners); None when the set was written since — the pass
    stops as on a 409 (``stale``), the version read in the cache for the next pass — or when
    it could not be read (an error of the pass: nothing removed on a version not known to
    hold). The read is as old as the pass's removals are long (its creations come between):
    a write during them is found by the status written at the end, as before."""
    meta = obj["metadata"]
    try:
        current = ctx.kube.read_runnerset(meta["namespace"], meta["name"])
    except KubeError as exc:
        report.errors.append(f"{exc} (no runner removed: the set's version could not be "
                             "confirmed)")
        report.failed()
        return None
    if current is None or _version_of(current) == _version_of(obj):
        return obj
    _cache(ctx, current)
    stale(ctx, obj, report, "its runners' removal", read=False)
    return None


def stale(ctx: Context, obj: RawObject, report: Report, what: str, *,
          read: bool = True) -> None:
    """The set was written since the pass read it (a 409 on ``what``): no error, no Event of
    the status; the next pass, on the new version, is due in ``STALE_RETRY`` at the latest.
    ``read``: the set is read once, and the version read goes into the cache when it is newer
    than what the cache holds, so the next pass works on it even while the watch is down (it
    would otherwise act on the old version again, and meet the same 409, every second until
    the watch came back: up to 30 passes for its 30 s backoff). A read that fails leaves the
    cache to the watch (counted in the metrics, said in the debug log)."""
    log.debug("%s: edited since it was read (%s not written): the next pass reads it again",
              report.key, what)
    report.stale = True
    report.requeue_after = STALE_RETRY if report.requeue_after is None else min(
        report.requeue_after, STALE_RETRY)
    if not read:
        return
    meta = obj["metadata"]
    try:
        current = ctx.kube.read_runnerset(meta["namespace"], meta["name"])
    except KubeError as exc:
        report.folded += 1
        log.debug("%s: not read again after the conflict (left to the watch): %s",
                  report.key, exc)
        return
    if current is not None:
        _cache(ctx, current)


def _cache(ctx: Context, current: RawObject) -> None:
    """The set as just read, into the cache unless it holds a newer version (``Store.put``;
    no pass queued: the caller's requeue brings it)."""
    if ctx.runnersets.put(current):
        log.debug("%s/%s: version %s read, in the cache before the watch brings it",
                  current["metadata"].get("namespace"), current["metadata"].get("name"),
                  _version_of(current))


def _version_of(obj: RawObject) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _masked(status: dict[str, Any]) -> dict[str, Any]:
    conditions = status.get("conditions")
    if not conditions:
        return status
    return {**status, "conditions": [
        {**c, "message": redact(str(c["message"]))} if isinstance(c, dict) and c.get("message")
        else c for c in conditions]}
