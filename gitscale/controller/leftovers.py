"""Crash leftovers: GitHub registrations of a set that have no pod, and their Secrets; and JIT
Secrets never handed to their pod.

A controller killed between registering a runner and creating its pod leaves a registration no
pod will ever use (and maybe its JIT Secret). A registration is the set's when its name is one
``new_name`` makes for this instance of the set (its name and four hex digits of its uid: a
same-named set of another cluster or namespace in the same org, whose pods this controller
cannot see, is another instance) and it carries every label of the set; it is a leftover when no
runner pod the controller knows carries its id or its name, and GitHub says it is offline and
idle. Creations of a pass are done before its pass ends (and a pod follows its registration
within seconds), but another controller may share the org: so a registration is removed only
after it has been seen as a leftover for ``GRACE``. Its Secret (same name) goes with it.

A JIT Secret is made before its pod, owned by the set, and handed to the pod once the pod
exists (then deleted with it). A handover that failed is done by a later pass of the same
process (``create.hand_over``, from ``Memory``); what a process forgets — it restarted, or
another replica took the Lease, or it stopped between a pod and its handover — is found by
``sweep_secrets``: the set's Secrets (by the label ``gitscale.dev/runnerset``, metadata only)
still owned by this set (its uid) and named as its runners, made more than ``SECRET_GRACE``
ago (a creation takes seconds: its calls time out within a minute), are handed to their pod
when it exists (asked of the API server, not only the cache) and deleted when it does not.
On a set's first pass in a process, then every ``EVERY``.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gitscale.controller.cache import Store
from gitscale.controller.errors import ControllerError, NotFound
from gitscale.controller.kube import Kube
from gitscale.controller.memory import Memory
from gitscale.controller.observe import ANNOTATION_RUNNER_ID, RunnerSetView
from gitscale.controller.platform import Adapter, Registered
from gitscale.controller.podspec import is_runner_name, pod_owner
from gitscale.timeutil import parse_time

log = logging.getLogger("gitscale.controller")
GRACE = timedelta(seconds=60)
EVERY = timedelta(minutes=5)  # how often a set is swept when nothing is suspected
SECRET_GRACE = timedelta(minutes=10)  # a JIT Secret older than this, not handed over: left


@dataclass
class Swept:
    removed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wake_after: float | None = None  # seconds until a suspect's grace ends


def leftovers(view: RunnerSetView, registered: Mapping[int, Registered],
              pods: Store) -> dict[int, str]:
    """The set's registrations that no known pod uses: id → name."""
    if view.kind.registration_labels is None:
        return {}
    labels = view.kind.registration_labels(view.settings)
    known_ids, known_names = set(), set()
    for key in pods.keys():
        pod = pods.get(key)
        meta = (pod or {}).get("metadata") or {}
        known_names.add(str(meta.get("name")))
        runner_id = (meta.get("annotations") or {}).get(ANNOTATION_RUNNER_ID)
        if runner_id is not None:
            known_ids.add(str(runner_id))
    return {i: r.name for i, r in registered.items()
            if not r.online and not r.busy and is_runner_name(view.name, view.uid, r.name)
            and labels <= set(r.labels) and str(i) not in known_ids
            and r.name not in known_names}


def sweep(kube: Kube, pods: Store, memory: Memory, view: RunnerSetView, platform: Adapter,
          registered: Mapping[int, Registered], now: datetime,
          grace: timedelta = GRACE, *, stop: threading.Event) -> Swept:
    """Remove the leftovers seen for ``grace``; remember the others for a later pass. Once
    ``stop`` is set (the Lease lost), nothing more is removed: the new leader's sweep finds
    them."""
    found = leftovers(view, registered, pods)
    ripe, wake = memory.suspect(view.key, found, now, grace)
    out = Swept(wake_after=wake)
    for runner_id in ripe:
        if stop.is_set():
            break
        name = found[runner_id]
        try:
            platform.unregister(runner_id)
            kube.delete_secret(view.namespace, name)
        except ControllerError as exc:
            out.errors.append(str(exc))
            continue
        out.removed.append(name)
    if out.removed:
        log.info("%s: removed %d registration(s) left without a pod by an earlier run: %s",
                 view.key, len(out.removed), ", ".join(out.removed))
    return out


def sweep_secrets(kube: Kube, pods: Store, view: RunnerSetView, now: datetime,
                  grace: timedelta = SECRET_GRACE, *, stop: threading.Event) -> Swept:
    """The set's JIT Secrets that were never handed to their pod and are older than ``grace``:
    handed over now when the pod exists, else deleted (``removed``). Once ``stop`` is set (the
    Lease lost), nothing more is done: the new leader's sweep finds them."""
    out = Swept()
    try:
        found = kube.list_runner_secrets(view.namespace, view.name)
    except ControllerError as exc:
        out.errors.append(str(exc))
        return out
    handed = []
    for secret in found:
        meta = secret.get("metadata") or {}
        name = str(meta.get("name", ""))
        if stop.is_set():
            break
        if not _left_to_the_set(meta, view) or not _older(meta, now, grace):
            continue
        try:
            pod = pods.get(f"{view.namespace}/{name}") or kube.find_pod(view.namespace, name)
            if pod is not None and not pod["metadata"].get("deletionTimestamp"):
                kube.own_secret(view.namespace, name, pod_owner(pod))
                handed.append(name)
            else:
                kube.delete_secret(view.namespace, name)
                out.removed.append(name)
        except NotFound:
            continue  # gone meanwhile
        except ControllerError as exc:
            out.errors.append(str(exc))
    if out.removed or handed:
        log.info("%s: JIT Secrets an earlier run did not hand to their pod: %s", view.key,
                 "; ".join(f"{what} {', '.join(names)}" for what, names in (
                     ("deleted (no pod)", out.removed), ("handed to their pod", handed))
                     if names))
    return out


def _left_to_the_set(meta: Mapping[str, Any], view: RunnerSetView) -> bool:
    """Still owned by this very set (its uid; not handed to a pod) and named as its runners."""
    refs = meta.get("ownerReferences") or []
    owned = isinstance(refs, list) and any(
        isinstance(r, dict) and r.get("uid") == view.uid for r in refs)
    return owned and is_runner_name(view.name, view.uid, str(meta.get("name", "")))


def _older(meta: Mapping[str, Any], now: datetime, grace: timedelta) -> bool:
    try:
        return now - parse_time(str(meta.get("creationTimestamp"))) >= grace
    except ValueError:
        return False  # (no time: never guessed old)
