"""Removing a pass's runners: wave by wave (idle before pending), each unregistered first;
and, before a pass creates anything, unregistering the failed runners it replaces (``retire``).

A runner whose unregistration answers 422 (GitHub: it runs a job), or that a list read again
right before shows running one (Buildkite: ``registered.busy_now``), is kept, said once, and not
asked again for ``BUSY_RETRY``; a surplus runner kept so gives its place to the next of the
scale-down's order (``Actions.standby``) in the same pass. A runner that stopped for good
(evicted, OOM-killed mid-job) goes even while GitHub still counts it busy: its registration is
left until GitHub releases it, then the leftover sweep removes it. Any other runner whose
unregistration failed (a 5xx, no answer, a rate limit) keeps its pod, whatever the reason for
removing it — one failed by the registration timeout may be running a job —, and a later pass
tries again. A failure to remove one runner does not stop the others.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import Executor
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from gitscale.controller.cache import Store
from gitscale.controller.decide import FAILING_AFTER, Actions, Delete, DeleteReason, Phase
from gitscale.controller.errors import (
    ControllerError,
    CredentialsError,
    Interrupted,
    NotFound,
    PlatformError,
    PlatformOutage,
    RunnerBusy,
)
from gitscale.controller.kube import Kube
from gitscale.controller.memory import Memory
from gitscale.controller.observe import RunnerSetView
from gitscale.controller.platform import Adapter
from gitscale.controller.status import Alike

log = logging.getLogger("gitscale.controller")
BUSY_RETRY = timedelta(seconds=30)  # a runner that answered 422 is not asked again sooner


@dataclass
class Removed:
    """What the removals of a pass did: runners removed, kept as busy (422), errors, the
    platform's refusal of the set's credentials (a 401/403 on unregister: the caller has the
    Secret read again, as a refused registration or list does) and its failure (a 5xx, no
    answer, a rate limit: Ready says ``PlatformUnavailable``)."""

    deleted: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)
    # Failed by the registration timeout, shown online and idle by a list read again: kept
    online: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    refused: CredentialsError | None = None
    outage: PlatformOutage | None = None  # the platform failed (Ready: PlatformUnavailable)
    _alike: Alike = field(default_factory=Alike, repr=False)
    _grouped: int = 0  # failures said together by their caller (``retire``)

    @property
    def folded(self) -> int:
        """Failures said within another's message (counted all the same: the metrics)."""
        return self._alike.folded + self._grouped

    def failed(self, message: str, exc: ControllerError, delete: Delete | None = None) -> None:
        """One removal (of ``delete``'s runner) failed. One message for many runners (the
        runners the platform was not asked about while it is given time say the same thing;
        so do 300 pod deletions refused alike), with how many. A platform's failure is said
        alike by each of its runners, naming the runner whose request failed first
        (``outage.py``): not told apart by runner."""
        alike = delete is not None and not isinstance(exc, PlatformOutage)
        self._alike.add(message, delete.name if alike and delete else None,
                        delete.runner_id if alike and delete else None)
        self.errors = self._alike.messages()
        if isinstance(exc, CredentialsError):
            self.refused = exc
        elif isinstance(exc, PlatformOutage):
            self.outage = exc


def remove_runners(kube: Kube, pods: Store, memory: Memory, pool: Executor,
                   halt: threading.Event, view: RunnerSetView, platform: Adapter,
                   actions: Actions, now: datetime, *, keep: set[str], dead: set[str],
                   live: set[str], busy: Collection[str] = frozenset()) -> Removed:
    """Wave by wave; ``keep``: failed runners whose successor could not be created stay (the
    next pass tries again) rather than leave their slot empty. A surplus runner that proves
    busy when it is unregistered (422) is kept, and the next of ``actions.standby`` goes in
    its place in the same pass (idle ones before pending ones, as the scale-down's order), so
    the pass removes as many as the surplus while idle runners are left. ``dead``: runners
    that stopped for good, whose pods go even while GitHub still counts them busy, or when
    they could not be unregistered; ``live``: runners whose pods run (they may be connected,
    idle or busy, whatever a list said), only ever removed once unregistered. ``busy``:
    surplus runners a list read again right before shows running a job (``busy_now``: a
    platform with no 422 of its own), kept and replaced from ``standby`` as a 422 would (the
    failed and outdated ones it keeps, ``retire`` has taken out of ``actions`` already)."""
    out = Removed()
    todo = [d for d in actions.deletes if d.name not in keep]
    standby = list(actions.standby)
    while todo:
        wave = min(d.wave for d in todo)
        batch = [d for d in todo if d.wave == wave]
        todo = [d for d in todo if d.wave != wave]
        for delete in [d for d in batch if d.name in busy]:
            batch.remove(delete)
            _busy(out, memory, view, delete.name, now,
                  "took a job since the runner list was read: kept")
            if delete.reason is DeleteReason.SURPLUS and standby:
                todo.append(standby.pop(0))
        futures = [(d, pool.submit(_remove_one, kube, pods, halt, view, platform, d,
                                   d.name in dead, d.name in live)) for d in batch]
        for delete, future in futures:
            try:
                future.result()
                out.deleted.append(delete.name)
            except RunnerBusy:
                _busy(out, memory, view, delete.name, now, "is still running a job: kept")
                if delete.reason is DeleteReason.SURPLUS and standby:
                    todo.append(standby.pop(0))
            except ControllerError as exc:
                out.failed(str(exc), exc, delete)
    if out.deleted:
        log.info("%s: removed %s", view.key, ", ".join(out.deleted))
    return out


def retire(memory: Memory, pool: Executor, halt: threading.Event, view: RunnerSetView,
           platform: Adapter, actions: Actions, dead: set[str], now: datetime,
           fresh: Mapping[str, Phase] | None = None) -> tuple[Actions, Removed]:
    """Failed runners to be replaced whose pods have not stopped (past their registration
    timeout, judged on a list that may be a little old; stuck), and outdated ones (made for
    job settings the set no longer has), are unregistered *before* their successors are
    created: one that took a job meanwhile (GitHub's 422) is busy, kept
    and not replaced — its successor would put the set above ``replicas``, and a scale-up
    (patch > 0) never scales down —; one that could not be unregistered (a 5xx, no answer,
    a rate limit) is kept, not replaced, and tried again by the next pass. The others go
    as usual (their pods after their successors exist), without being unregistered twice.
    ``fresh``: failed and outdated runners a list read again right before shows should stay
    (``registered.busy_now``: a platform with no 422 of its own, Buildkite), with the phase it
    gives them — kept and not replaced as a 422 would, whether a successor was due or not; a
    failed one it shows online idle is online after all (not busy: counted idle, ``online``).
    Returns the actions without the runners kept (a failed one kept as busy or online no
    longer one more failure in ``failing``), and what was kept (busy, errors)."""
    out = Removed()
    why = {d.name: d.reason for d in actions.deletes}
    kept: set[str] = set()
    for name, phase in (fresh or {}).items():
        if why.get(name) not in (DeleteReason.FAILED, DeleteReason.OUTDATED):
            continue  # (a surplus one: ``remove_runners`` keeps it, and replaces it)
        kept.add(name)
        if phase is Phase.BUSY:
            _busy(out, memory, view, name, now, _kept_busy(why[name]))
        else:  # a failed one, listed online and idle: no registration timeout for it any more
            out.online.append(name)
            memory.mark_online(view.key, name)
            log.info("%s: runner %s, past its registration timeout on the runner list read "
                     "before, is online in the one read again: kept, not replaced",
                     view.key, name)
    ids = {d.name: d.runner_id for d in actions.deletes
           if d.reason in (DeleteReason.FAILED, DeleteReason.OUTDATED)
           and d.runner_id is not None and d.name not in kept}
    todo = [n for n in actions.replaced if n not in dead and n in ids]
    if (not todo or halt.is_set()) and not kept:  # (halted: no successor is created anyway)
        return actions, out
    futures = [] if halt.is_set() else [(n, pool.submit(platform.unregister, ids[n]))
                                        for n in todo]
    failures: dict[str, tuple[list[str], ControllerError]] = {}  # by cause: said once
    for name, future in futures:
        try:
            future.result()
        except RunnerBusy:
            kept.add(name)
            _busy(out, memory, view, name, now, _kept_busy(why[name]))
        except ControllerError as exc:
            kept.add(name)
            failures.setdefault(str(exc), ([], exc))[0].append(name)
    for cause, (names, error) in failures.items():
        if len(names) == 1:
            out.failed(f"runner {names[0]} not replaced: it could not be unregistered first "
                       f"({cause})", error)
        else:
            out.failed(f"{len(names)} runners not replaced ({_some(names)}): they could not be "
                       f"unregistered first ({cause})", error)
            out._grouped += len(names) - 1
    index = [i for i, n in enumerate(actions.replaced) if n not in kept]
    gone = {n for n, _ in futures} - kept
    # A failed runner kept as busy or online is no failure after all: its streak in
    # RunnersFailing is its predecessors' (``decide`` counted it as one more).
    revived = {n for n in (*out.busy, *out.online) if why.get(n) is DeleteReason.FAILED}
    failing = tuple((n, count - (n in revived)) for n, count in actions.failing
                    if count - (n in revived) >= FAILING_AFTER)
    return replace(
        actions, retries=tuple(actions.retries[i] for i in index),
        replaced=tuple(actions.replaced[i] for i in index), failing=failing,
        deletes=tuple(replace(d, runner_id=None) if d.name in gone else d
                      for d in actions.deletes if d.name not in kept)), out


def _kept_busy(reason: DeleteReason) -> str:
    """What is said of a failed or outdated runner kept because it runs a job."""
    if reason is DeleteReason.OUTDATED:
        return "made for other job settings, took a job: kept until it is done, not replaced"
    return "never seen online in the runner list, is running a job: kept, not replaced"


def _some(names: list[str], shown: int = 3) -> str:
    """A few of ``names``, and how many more."""
    more = len(names) - shown
    return ", ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def _busy(out: Removed, memory: Memory, view: RunnerSetView, name: str, now: datetime,
          said: str) -> None:
    """A runner whose unregistration answered 422 (GitHub: it runs a job): kept and counted
    busy; it took a job, so it came online (no registration timeout for it any more); not
    asked again for ``BUSY_RETRY``. Said once (``said``: what about it)."""
    out.busy.append(name)
    memory.mark_online(view.key, name)
    if memory.mark_busy(view.key, name, now + BUSY_RETRY):
        log.info("%s: runner %s %s (asked again in %ds at the earliest)", view.key, name,
                 said, BUSY_RETRY.total_seconds())


def _remove_one(kube: Kube, pods: Store, halt: threading.Event, view: RunnerSetView,
                platform: Adapter, delete: Delete, dead: bool, live: bool) -> None:
    if halt.is_set():
        raise Interrupted("the controller is stopping: runner not removed, left to the next "
                          "pass (or the next leader)")
    if delete.runner_id is not None:
        try:
            platform.unregister(delete.runner_id)
        except RunnerBusy:
            if not dead:
                raise
            # Killed mid-job (evicted, OOM-killed): GitHub counts it busy until it notices.
            # Keeping the pod would help no one; the registration is GitHub's to release,
            # then the leftover sweep removes it.
            log.info("%s: runner %s stopped while GitHub still counts it busy (evicted or "
                     "killed mid-job?): its pod is removed; its registration is left until "
                     "GitHub releases it, then swept", view.key, delete.name)
        except PlatformError as exc:
            # Only a runner known stopped (its registration is GitHub's to release, then the
            # sweep's) goes without being unregistered; and one whose pod does not run, of a
            # set being deleted whose credentials are gone (``reconcile``'s
            # ``_without_platform``). Any other may be running a job — one failed by the
            # registration timeout too, or pending on an old list —: its pod stays, and the
            # next pass tries again.
            if not (dead or (not live and view.deleting
                             and isinstance(exc, CredentialsError))):
                raise
    cached = pods.get(f"{view.namespace}/{delete.name}")
    try:
        pod = kube.delete_pod(view.namespace, delete.name)
    except NotFound:
        pod = None
    if pod is not None and (pod.get("metadata") or {}).get("deletionTimestamp"):
        pods.put(pod)  # terminating (graceful): the watch will say when it is gone
    else:
        pods.remove(pod or cached or {"metadata": {"namespace": view.namespace,
                                                   "name": delete.name}})
