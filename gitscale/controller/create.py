"""Creating a pass's runners: all at once, in an order a crash cannot break.

One runner is: register it with the platform (GitHub: a JIT config), create its Secret (owned
by the set), create its pod (which reads the Secret), then hand the Secret to the pod (deleted
with it). The Secret comes first so that no pod ever waits for a Secret that will never come;
a crash before the pod leaves only a registration (and maybe its Secret) with no pod, which
``leftovers.py`` removes. A failure undoes what the runner got so far, unless the pod may
exist after all (no answer, or a 5xx): it is looked for, and when that cannot be known the
registration and its Secret are left, for the sweep (no pod shows up) or the pod (one does),
and the next pass looks for it again before it counts the set's runners (``look_again``).
A Secret that could not be handed to its pod is handed over by a later pass (``hand_over``),
or deleted once the pod is gone.

Each runner tried costs a GitHub registration (and its removal when the pod is refused), and
GitHub limits content creation (80 a minute): a set stuck on its quota must not spend it for
every set. So, where the platform registers runners, one Secret and one pod of the pass are
first created with ``dryRun=All`` (authorization, admission — quota, webhooks — and
validation, nothing stored; the ResourceQuota plugin evaluates dry runs,
kubernetes/kubernetes#66391): when either is refused, no runner is registered at all. A
refusal every creation would meet (a 4xx, the platform refusing), or the API server failing
several creations in a row (a brownout: ``wave.py``), also ends the pass's creations not
started yet: a quota met at the 20th of 10,000 runners costs no more. After a pass whose
creations failed (a quota, an admission webhook, GitHub down, the API server's 5xx), the set's
creations wait ``CREATE_RETRY`` seconds, doubling with each pass failed in a row up to
``CREATE_RETRY_MAX``, or the longest ``Retry-After`` its API server's answers asked for when
that is longer (any runner created, a changed template or platform setting, or a refusal more
than ``CREATE_RETRY_MAX`` after the last one was due starts it again from ``CREATE_RETRY``; a
pass with nothing to create ends it); then they come in slow-start batches of 1, 2, 4… that
stop at the first failure, like the ReplicaSet controller.

When the controller stops (or loses its leadership), creations not yet started are skipped
(``Interrupted``), and so is the pod of a creation in flight, its registration undone; the
write is then not recorded as applied, so the next start completes it.
"""
from __future__ import annotations

import hashlib
import json
import logging
import threading
from concurrent.futures import Executor, Future, wait
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable, Literal

from gitscale.controller.cache import Store
from gitscale.controller.decide import Actions
from gitscale.controller.status import Alike, platform_reason
from gitscale.controller.errors import (
    ControllerError,
    CredentialsError,
    Interrupted,
    KubeError,
    NotFound,
    PlatformOutage,
)
from gitscale.controller.kube import Kube
from gitscale.controller.memory import Memory, Refusal
from gitscale.controller.observe import RawObject, RunnerSetView
from gitscale.controller.platform import Adapter
from gitscale.controller.platforms import Platforms
from gitscale.controller.podspec import jit_secret, new_name, pod_owner, runner_pod
from gitscale.controller.wave import WAVE_FAILURES, Wave
from gitscale.timeutil import format_time

log = logging.getLogger("gitscale.controller")
CREATE_RETRY = 10.0  # seconds before creations refused once are tried again, doubling ...
CREATE_RETRY_MAX = 300.0  # ... up to this
DRY_RUN_CONFIG = "dry-run"  # the JIT config of the Secret created as a dry run (none is real)


@dataclass
class Created:
    """What the creations of a pass did. ``reason``: the Ready reason of the first failure."""

    names: list[str] = field(default_factory=list)
    failed: int = 0  # creations tried and refused, or not tried
    unreplaced: set[str] = field(default_factory=set)  # failed runners whose successor failed
    errors: list[str] = field(default_factory=list)
    folded: int = 0  # failures said within another's message (``Alike``)
    reason: str | None = None
    retry_after: float | None = None  # seconds until creations refused are tried again


def held_back(memory: Memory, view: RunnerSetView, now: datetime,
              credentials: str = "") -> Refusal | None:
    """The set's refused creations, while their backoff runs (no creation is tried) and its
    pods would be made the same way (a template fixed after a webhook refused it is tried at
    once, and so is a credential rotated after it was refused; a new replicas or patch ID is
    not a fix). ``credentials``: what the set's platform client was made from
    (``Platforms.made_from``)."""
    refusal = memory.refusal(view.key)
    return refusal if refusal is not None and now < refusal.until and (
        refusal.shape == shape(view, credentials)) else None


def shape(view: RunnerSetView, credentials: str = "") -> str:
    """A digest of what the set's pods are made from: its template, platform settings and
    credentials (a digest of them)."""
    made_of = json.dumps([view.template, repr(view.settings), credentials], sort_keys=True,
                         default=str)
    return hashlib.sha256(made_of.encode()).hexdigest()[:16]


def create_runners(kube: Kube, pods: Store, platforms: Platforms, memory: Memory,
                   pool: Executor, halt: threading.Event, view: RunnerSetView,
                   platform: Adapter, actions: Actions, now: datetime) -> Created:
    out = Created()
    # Replacements of failed runners first: a slow start that stops early keeps their lineage;
    # then the refills of finished slots (each keeps its marker until it exists).
    lineage = list(actions.retries) + [0] * (len(actions.refills) + actions.create)
    predecessors = actions.predecessors
    if not lineage:
        memory.set_refusal(view.key, None)  # nothing wanted: a later refusal is a first one
        return out
    credentials = platforms.made_from(view.key)
    held = held_back(memory, view, now, credentials)
    if held is not None:
        return _not_tried(out, len(lineage), predecessors, held.message, held.reason,
                          (held.until - now).total_seconds())
    taken = {p["metadata"]["name"] for p in pods.group(view.key)}
    names: list[str] = []
    while len(names) < len(lineage):
        name = new_name(view.name, view.uid)
        if name not in taken:
            taken.add(name)
            names.append(name)
    if view.kind.registration_labels is not None and not halt.is_set():
        try:  # before any registration: would Kubernetes take the Secret and the pod?
            kube.create_secret(jit_secret(view, names[0], DRY_RUN_CONFIG), dry_run=True)
            kube.create_pod(runner_pod(view, names[0], actions.create_patch_id, lineage[0],
                                       platform.env(names[0])), dry_run=True)
        except ControllerError as exc:
            message = f"{exc} (a dry run: no runner registered)"
            reason = "QuotaExceeded" if _quota(exc) else "CreateFailed"
            refusal = _refused(memory, view, now, made=False, message=message, reason=reason,
                               credentials=credentials, at_least=_retry_after(exc))
            return _not_tried(out, len(lineage), predecessors, refusal.message, reason,
                              (refusal.until - now).total_seconds())
    todo = list(enumerate(zip(names, lineage)))
    batch = 1 if memory.refusal(view.key) is not None else len(todo)
    refused = False
    alike = Alike()  # (one cause met by many runners: said once, with how many)
    # Stopped by the first refusal that the others would meet too, or by the API server
    # failing creations in a row (``wave.py``): the pass's creations not started yet are not
    # tried (a quota met at the 20th of 10,000 runners must not cost 9,980 refusals, nor as
    # many GitHub registrations made and undone).
    wave = Wave()
    wait_at_least: float | None = None  # the longest Retry-After the API server asked for
    unhanded: list[tuple[str, str]] = []  # (runner, why) whose Secret is not its pod's yet
    while todo and not refused:
        tried, todo = todo[:batch], todo[batch:]
        batch *= 2
        futures: list[tuple[int, str, Future[str]]] = [
            (i, name, pool.submit(_attempt, wave, kube, pods, memory, halt, view, platform,
                                  name, actions.create_patch_id, failures, unhanded))
            for i, (name, failures) in tried]
        wait([f for _, _, f in futures])
        for i, name, future in futures:
            try:
                out.names.append(future.result())
                continue
            except _NotTried:
                todo.append((i, (name, 0)))  # (counted below, with those of later batches)
                continue
            except Interrupted as exc:
                out.reason = out.reason or "Interrupted"
                message = str(exc)
            except ControllerError as exc:
                platforms.refused(view, exc)
                refused, message = True, str(exc)
                wait_at_least = max(filter(None, (wait_at_least, _retry_after(exc))),
                                    default=None)
                if out.reason is None and _quota(exc):
                    out.reason = "QuotaExceeded"
                elif out.reason is None and isinstance(exc, (CredentialsError,
                                                             PlatformOutage)):
                    # a token refused, or the platform failing: not the pod's fault
                    out.reason = platform_reason(exc)
            out.failed += 1
            if i < len(predecessors):
                out.unreplaced.add(predecessors[i])
            alike.add(message, name)
    out.errors, out.folded = alike.messages(), alike.folded
    if todo:  # (only after a refusal)
        out.failed += len(todo)
        out.unreplaced.update(predecessors[i] for i, _ in todo if i < len(predecessors))
        out.errors.append(f"{len(todo)} more runner(s) not tried after " + (
            f"{WAVE_FAILURES} failures of the API server in a row" if wave.browned_out
            else "that"))
    if out.failed and out.reason is None:
        out.reason = "CreateFailed"
    if out.reason != "Interrupted":
        if refused:
            # Said whole, as the passes that wait out its backoff say it again: the status,
            # the log and the Event stay as they are until something changes.
            refusal = _refused(memory, view, now, made=bool(out.names),
                               message="; ".join(out.errors[:3]),
                               reason=out.reason or "CreateFailed", credentials=credentials,
                               at_least=wait_at_least)
            out.folded += len(out.errors) - 1  # (still counted apart: the errors metric)
            out.errors = [refusal.message]
            out.retry_after = (refusal.until - now).total_seconds()
        else:
            memory.set_refusal(view.key, None)
    if out.names and unhanded:
        # One line for the pass, not one per runner and another for the creations: a Role
        # without ``patch`` on secrets, or a webhook, refuses every handover alike.
        handovers = Alike()
        for name, why in unhanded:
            handovers.add(why, name)
        log.warning("%s: created %d runner(s) for patch %d; %d JIT Secret(s) not handed to "
                    "their pod yet (the next passes try again): %s", view.key, len(out.names),
                    actions.create_patch_id, len(unhanded), "; ".join(handovers.messages()[:3]))
    elif out.names:
        log.info("%s: created %d runner(s) for patch %d", view.key, len(out.names),
                 actions.create_patch_id)
    return out


class _NotTried(Exception):
    """A creation not started: another of its pass was refused first."""


def _attempt(wave: Wave, kube: Kube, pods: Store, memory: Memory, halt: threading.Event,
             view: RunnerSetView, platform: Adapter, name: str, patch_id: int, failures: int,
             unhanded: list[tuple[str, str]]) -> str:
    """``_create_one``, unless the pass's creations not started yet are not tried any more
    (``wave.stop``); its outcome counted in ``wave``, which stops them (``wave.py``)."""
    if wave.stop.is_set():
        raise _NotTried()
    try:
        name = _create_one(kube, pods, memory, halt, view, platform, name, patch_id, failures,
                           unhanded)
    except ControllerError as exc:
        wave.failed(exc)
        raise
    wave.created()
    return name


def _create_one(kube: Kube, pods: Store, memory: Memory, halt: threading.Event,
                view: RunnerSetView, platform: Adapter, name: str, patch_id: int,
                failures: int, unhanded: list[tuple[str, str]]) -> str:
    """Creates runner ``name``; a Secret not handed to its pod is added to ``unhanded`` (the
    pass says them in one line) and to the set's memory (the next passes hand it over)."""
    if halt.is_set():
        raise Interrupted("the controller is stopping: runner not created, left to the next "
                          "pass (or the next leader)")
    registration = platform.register(name)
    runner_id = registration.runner_id if registration else None
    if registration is not None:
        try:
            kube.create_secret(jit_secret(view, name, registration.jit_config))
        except ControllerError:
            _quietly(platform.unregister, registration.runner_id)
            raise
    if halt.is_set():  # stopped (or the Lease lost) meanwhile: no pod, and nothing left
        if registration is not None:
            _quietly(kube.delete_secret, view.namespace, name)
            _quietly(platform.unregister, registration.runner_id)
        raise Interrupted("the controller is stopping: runner not created, left to the next "
                          "pass (or the next leader)")
    body = runner_pod(view, name, patch_id, failures, platform.env(name), runner_id)
    try:
        pod = kube.create_pod(body)
    except ControllerError as exc:
        made = _made_anyway(kube, view.namespace, name, exc)
        if made is False and registration is not None:  # refused: undo
            _quietly(kube.delete_secret, view.namespace, name)
            _quietly(platform.unregister, registration.runner_id)
        if made is None:
            # Unknown: the next pass looks for it before it counts its runners (``look_again``:
            # the watch may not bring it in time). The registration and its Secret stay: with
            # no pod, the leftover sweep removes them; the pod, if it exists after all, runs.
            memory.maybe_created(view.key, name)
        if not isinstance(made, dict):
            raise
        log.info("%s: pod %s was created though its creation answered: %s", view.key, name, exc)
        pod = made
    pods.put(pod)
    if registration is not None:
        try:
            kube.own_secret(view.namespace, name, pod_owner(pod))
        except ControllerError as exc:
            # The pod runs anyway; the Secret, still the set's, would outlive it: the next
            # passes hand it over (or delete it once the pod is gone).
            unhanded.append((name, str(exc)))  # (list.append: safe across the pool's threads)
            memory.add_unowned(view.key, name)
    return name


def _refused(memory: Memory, view: RunnerSetView, now: datetime, *, made: bool, message: str,
             reason: str, credentials: str, at_least: float | None = None) -> Refusal:
    """Creations refused: back off, from ``CREATE_RETRY`` again if any runner was made, if the
    pods are made otherwise than when the last refusal came (a changed template or platform
    setting), or if that refusal is old (not "in a row": due more than ``CREATE_RETRY_MAX``
    ago); for ``at_least`` seconds when that is longer (a ``Retry-After``; up to
    ``CREATE_RETRY_MAX`` still). Returns the refusal it keeps."""
    before = memory.refusal(view.key)
    made_as = shape(view, credentials)
    count = 1
    if not made and before is not None and before.shape == made_as and (
            now - before.until).total_seconds() <= CREATE_RETRY_MAX:
        count = before.count + 1
    wait = min(max(CREATE_RETRY * 2 ** (count - 1), at_least or 0.0), CREATE_RETRY_MAX)
    until = now + timedelta(seconds=wait)
    refusal = Refusal(count, until, (
        f"{message}; creations failed {count} pass(es) in a row, tried again from "
        f"{format_time(until)}"), reason, made_as)
    memory.set_refusal(view.key, refusal)
    return refusal


def _not_tried(out: Created, count: int, predecessors: tuple[str, ...], message: str,
               reason: str, wait: float) -> Created:
    """No creation tried this pass: every successor is missing, every predecessor kept."""
    out.failed = count
    out.unreplaced.update(predecessors[:count])
    out.errors.append(message)
    out.reason, out.retry_after = reason, max(wait, 0.0)
    return out


def hand_over(kube: Kube, pods: Store, memory: Memory, view: RunnerSetView) -> Alike:
    """JIT Secrets a pass could not hand to their pod (still owned by the set, they would
    outlive it): handed over now, or deleted once the pod is gone. The errors, those that
    differ only by their Secret said once (a Role without ``patch`` refuses them all)."""
    errors = Alike()
    for name in memory.unowned(view.key):
        pod = pods.get(f"{view.namespace}/{name}")
        try:
            if pod is not None and not pod["metadata"].get("deletionTimestamp"):
                kube.own_secret(view.namespace, name, pod_owner(pod))
            else:
                kube.delete_secret(view.namespace, name)
        except NotFound:
            pass  # the Secret is gone already
        except KubeError as exc:
            errors.add(str(exc), name)
            continue
        memory.owned(view.key, name)
    return errors


def look_again(kube: Kube, pods: Store, memory: Memory, view: RunnerSetView) -> str | None:
    """The set's pods whose creation got no answer and could not be looked for then (the API
    server restarting): looked for now, before the pass counts its runners. The watch may not
    have brought them (down too, or backing off), and a pass that counted without them would
    fill their slots again, beyond ``replicas``. Each found goes into the cache. The error,
    when one still cannot be looked for: the pass then decides nothing."""
    for name in memory.maybe_created_of(view.key):
        if pods.get(f"{view.namespace}/{name}") is None:
            try:
                found = kube.find_pod(view.namespace, name)
            except ControllerError as exc:
                return (f"{exc} (its creation got no answer: no runner created or removed "
                        "until it is known whether it exists)")
            if found is not None:
                pods.put(found)
        memory.known(view.key, name)
    return None


def _made_anyway(kube: Kube, namespace: str, name: str,
                 exc: ControllerError) -> RawObject | Literal[False] | None:
    """After a pod creation failed: the pod if it exists all the same, False if it surely
    does not, None if that cannot be known. No answer (or a 5xx, such as a timeout between the
    API server and etcd) does not say the pod was not stored: look for it. No connection at
    all (``unreachable``) does: the request never left."""
    if not isinstance(exc, KubeError) or 0 < exc.status < 500 or exc.unreachable:
        return False  # refused (quota, webhook, validation, conflict) or never sent
    try:
        found = kube.find_pod(namespace, name)
    except ControllerError:
        return None
    return found if found is not None else False


def _retry_after(exc: ControllerError) -> float | None:
    """The seconds the API server asked to be given, if it said (a 429's ``Retry-After``)."""
    return exc.retry_after if isinstance(exc, KubeError) else None


def _quota(exc: ControllerError) -> bool:
    return isinstance(exc, KubeError) and exc.status == 403 and "quota" in str(exc).lower()


def _quietly(fn: Callable[..., Any], *args: Any) -> None:
    try:
        fn(*args)
    except ControllerError as exc:
        log.warning("clean-up failed: %s", exc)
