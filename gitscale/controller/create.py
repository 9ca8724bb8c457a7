"""Creating a pass's runners: all at once, in an order a crash cannot break.

One runner is: register it with the platform (GitHub: a JIT config), create its Secret (owned
by the set), create its pod (which reads the Secret), then hand the Secret to the pod (deleted
with it). The Secret comes first so that no pod ever waits for a Secret that will never come;
a crash before the pod leaves only a registration (and maybe its Secret) with no pod, which
``leftovers.py`` removes. A failure undoes what the runner got so far.

After a pass whose creations were refused (a quota, an admission webhook, GitHub down), the
next passes create in slow-start batches of 1, 2, 4… that stop at the first failure, like the
ReplicaSet controller: each runner tried costs a GitHub registration (and its removal when the
pod is refused), and a set stuck on its quota must not spend the rate limit every pass.

When the controller stops (or loses its leadership), creations not yet started are skipped
(``Interrupted``); the write is then not recorded as applied, so the next start completes it.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import Executor, Future, wait
from dataclasses import dataclass, field
from typing import Any, Callable

from gitscale.controller.cache import Store
from gitscale.controller.decide import Actions
from gitscale.controller.errors import (
    ControllerError,
    CredentialsError,
    Interrupted,
    KubeError,
)
from gitscale.controller.kube import Kube
from gitscale.controller.memory import Memory
from gitscale.controller.observe import RunnerSetView
from gitscale.controller.platform import Adapter
from gitscale.controller.platforms import Platforms
from gitscale.controller.podspec import jit_secret, new_name, pod_owner, runner_pod

log = logging.getLogger("gitscale.controller")


@dataclass
class Created:
    """What the creations of a pass did. ``reason``: the Ready reason of the first failure."""

    names: list[str] = field(default_factory=list)
    failed: int = 0  # creations tried and refused, or not tried
    unreplaced: set[str] = field(default_factory=set)  # failed runners whose successor failed
    errors: list[str] = field(default_factory=list)
    reason: str | None = None


def create_runners(kube: Kube, pods: Store, platforms: Platforms, memory: Memory,
                   pool: Executor, halt: threading.Event, view: RunnerSetView,
                   platform: Adapter, actions: Actions) -> Created:
    out = Created()
    # Replacements of failed runners first: a slow start that stops early keeps their lineage;
    # then the refills of finished slots (each keeps its marker until it exists).
    lineage = list(actions.retries) + [0] * (len(actions.refills) + actions.create)
    predecessors = actions.predecessors
    if not lineage:
        return out
    taken = {p["metadata"]["name"] for p in pods.group(view.key)}
    names: list[str] = []
    while len(names) < len(lineage):
        name = new_name(view.name, view.uid)
        if name not in taken:
            taken.add(name)
            names.append(name)
    todo = list(enumerate(zip(names, lineage)))
    batch = 1 if memory.refused(view.key) else len(todo)
    refused = False
    while todo and not refused:
        tried, todo = todo[:batch], todo[batch:]
        batch *= 2
        futures: list[tuple[int, Future[str]]] = [
            (i, pool.submit(_create_one, kube, pods, halt, view, platform, name,
                            actions.create_patch_id, failures))
            for i, (name, failures) in tried]
        wait([f for _, f in futures])
        for i, future in futures:
            try:
                out.names.append(future.result())
                continue
            except Interrupted as exc:
                out.reason = out.reason or "Interrupted"
                message = str(exc)
            except CredentialsError as exc:
                platforms.forget(view)  # read the Secret again next pass: it may be fixed
                refused, message = True, str(exc)
            except ControllerError as exc:
                refused, message = True, str(exc)
                if out.reason is None and _quota(exc):
                    out.reason = "QuotaExceeded"
            out.failed += 1
            if i < len(predecessors):
                out.unreplaced.add(predecessors[i])
            if message not in out.errors:
                out.errors.append(message)
    if todo:
        out.failed += len(todo)
        out.unreplaced.update(predecessors[i] for i, _ in todo if i < len(predecessors))
        out.errors.append(f"{len(todo)} more runner(s) not tried after that: next pass")
    if out.failed and out.reason is None:
        out.reason = "CreateFailed"
    if out.reason != "Interrupted":
        memory.set_refused(view.key, refused)
    if out.names:
        log.info("%s: created %d runner(s) for patch %d", view.key, len(out.names),
                 actions.create_patch_id)
    return out


def _create_one(kube: Kube, pods: Store, halt: threading.Event, view: RunnerSetView,
                platform: Adapter, name: str, patch_id: int, failures: int) -> str:
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
    body = runner_pod(view, name, patch_id, failures, platform.env(name), runner_id)
    try:
        pod = kube.create_pod(body)
    except ControllerError:
        if registration is not None:
            _quietly(kube.delete_secret, view.namespace, name)
            _quietly(platform.unregister, registration.runner_id)
        raise
    pods.put(pod)
    if registration is not None:
        # If this fails the Secret stays with the set (deleted with it): the pod runs anyway.
        _quietly(kube.own_secret, view.namespace, name, pod_owner(pod))
    return name


def _quota(exc: ControllerError) -> bool:
    return isinstance(exc, KubeError) and exc.status == 403 and "quota" in str(exc).lower()


def _quietly(fn: Callable[..., Any], *args: Any) -> None:
    try:
        fn(*args)
    except ControllerError as exc:
        log.warning("clean-up failed: %s", exc)
