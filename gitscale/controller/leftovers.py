"""Crash leftovers: GitHub registrations of a set that have no pod, and their Secrets.

A controller killed between registering a runner and creating its pod leaves a registration no
pod will ever use (and maybe its JIT Secret). A registration is the set's when its name is one
``new_name`` makes for this instance of the set (its name and four hex digits of its uid: a
same-named set of another cluster or namespace in the same org, whose pods this controller
cannot see, is another instance) and it carries every label of the set; it is a leftover when no
runner pod the controller knows carries its id or its name, and GitHub says it is offline and
idle. Creations of a pass are done before its pass ends (and a pod follows its registration
within seconds), but another controller may share the org: so a registration is removed only
after it has been seen as a leftover for ``GRACE``. Its Secret (same name) goes with it.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gitscale.controller.cache import Store
from gitscale.controller.errors import ControllerError
from gitscale.controller.kube import Kube
from gitscale.controller.memory import Memory
from gitscale.controller.observe import ANNOTATION_RUNNER_ID, RunnerSetView
from gitscale.controller.platform import Adapter, Registered
from gitscale.controller.podspec import is_runner_name

log = logging.getLogger("gitscale.controller")
GRACE = timedelta(seconds=60)
EVERY = timedelta(minutes=5)  # how often a set is swept when nothing is suspected


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
