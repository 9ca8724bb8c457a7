"""The runner pod and its Secret, built from a RunnerSet. Pure: values in, manifests out.

Every pod carries ``gitscale.dev/runnerset`` and ``gitscale.dev/patch-id`` labels, an
ownerReference to its RunnerSet (garbage-collected with it) and ``restartPolicy: Never``: a runner
does one job and is never restarted in place (one pod per runner, never a Job whose parallelism is mutated).
"""
from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
import secrets
from collections.abc import Mapping
from typing import Any

from gitscale.controller.observe import (
    ANNOTATION_FAILURES,
    ANNOTATION_MATCHING,
    ANNOTATION_RUNNER_ID,
    ANNOTATION_SPEC_TIME,
    LABEL_PATCH,
    LABEL_SET,
    RawObject,
    RunnerSetView,
    runner_container,
)
from gitscale.runnerset_api import API_VERSION, KIND
from gitscale.timeutil import format_time

JIT_KEY = "jitconfig"
NAME_MAX = 57  # room for GitHub's runner-name limit (64) and Kubernetes' hostname limit (63)


def new_name(set_name: str, set_uid: str) -> str:
    """``<set name>-<instance>-<random>``: the pod's name and its runner's. ``instance`` is of
    the set's uid, so that registrations of a same-named set elsewhere (another cluster or
    namespace, the same org) are never taken for this one's (``is_runner_name``)."""
    return f"{_prefix(set_name)}-{instance(set_uid)}-{secrets.token_hex(3)}"


def is_runner_name(set_name: str, set_uid: str, name: str) -> bool:
    """Could ``name`` be one of ``new_name(set_name, set_uid)``? (Finds the GitHub
    registrations of this very set, the one with that uid.)"""
    return re.fullmatch(f"{re.escape(_prefix(set_name))}-{instance(set_uid)}-[0-9a-f]{{6}}",
                        name) is not None


def instance(set_uid: str) -> str:
    """Four hex digits of the set's uid (a set deleted and made again is another instance)."""
    return hashlib.sha256(set_uid.encode()).hexdigest()[:4]


def _prefix(set_name: str) -> str:
    return set_name[:NAME_MAX - 12].rstrip("-.")


def matching_of(rs: RunnerSetView) -> str | None:
    """A digest of the set's settings that decide which jobs its runners take
    (``Kind.matching``: GitHub's scope, labels and runner group, Buildkite's queue and tags),
    carried by each pod; None when the platform names none."""
    settings = rs.kind.matching(rs.settings)
    if not settings:
        return None
    return hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:16]


def owner_reference(rs: RunnerSetView) -> dict[str, Any]:
    # No blockOwnerDeletion, here or on the Secret's reference to its pod: where the
    # OwnerReferencesPermissionEnforcement admission plugin runs (OpenShift), setting it needs
    # update on the owner's finalizers, which least privilege does not grant; garbage
    # collection (background, the default) does not need it.
    return {"apiVersion": API_VERSION, "kind": KIND, "name": rs.name, "uid": rs.uid,
            "controller": True}


def runner_pod(rs: RunnerSetView, name: str, patch_id: int, failures: int,
               env: list[dict[str, Any]], runner_id: int | None = None) -> RawObject:
    """One runner's pod: the template, our labels and annotations, and the platform's env."""
    template = copy.deepcopy(rs.template)
    meta = template.get("metadata") or {}
    labels = {**(meta.get("labels") or {}), LABEL_SET: rs.name, LABEL_PATCH: str(patch_id)}
    notes = {**(meta.get("annotations") or {}), ANNOTATION_FAILURES: str(failures)}
    if runner_id is not None:
        notes[ANNOTATION_RUNNER_ID] = str(runner_id)
    if rs.spec.effective_time is not None:  # with the patch label: which write made this pod
        notes[ANNOTATION_SPEC_TIME] = format_time(rs.spec.effective_time)
    matching = matching_of(rs)
    if matching is not None:  # which jobs it takes: told from a later edit (``outdated``)
        notes[ANNOTATION_MATCHING] = matching
    spec = template["spec"]
    spec["restartPolicy"] = "Never"
    target = runner_container(template)
    container = next(c for c in spec["containers"] if c.get("name") == target)
    container["env"] = _merge_env(container.get("env") or [], env)
    _defaults(spec, rs.kind.pod_defaults)  # what the platform's runners need
    _defaults(container, rs.kind.runner_defaults)
    quantities_as_text(spec)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": rs.namespace, "labels": labels,
                         "annotations": notes, "ownerReferences": [owner_reference(rs)]},
            "spec": spec}


def jit_secret(rs: RunnerSetView, name: str, jit_config: str) -> RawObject:
    """The JIT config of GitHub runner ``name``, created before its pod (so no pod ever waits
    for it) and owned by the set until the pod exists: ``pod_owner`` then hands it to the pod,
    and it is deleted with the pod."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": rs.namespace, "labels": {LABEL_SET: rs.name},
                         "ownerReferences": [owner_reference(rs)]},
            "data": {JIT_KEY: base64.b64encode(jit_config.encode()).decode()}}


def pod_owner(pod: RawObject) -> list[dict[str, Any]]:
    meta = pod["metadata"]
    return [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}]


def quantities_as_text(spec: dict[str, Any]) -> None:
    """Each quantity of a pod spec written as a number (``nvidia.com/gpu: 1``, ``cpu: 0.5``,
    ``sizeLimit: 1073741824``) as its text, in place. The API server reads both alike, but the
    kubernetes client checks a pod against its models, whose quantities are strings, and
    refuses a number before sending anything. The quantities of core/v1's PodSpec: resources
    (a container's, an init or ephemeral container's, the pod's), ``overhead``, a
    ``resourceFieldRef``'s ``divisor`` (env, downward API and projected volumes), an emptyDir's
    ``sizeLimit`` and an ephemeral volume's claim resources."""
    _text(spec, "overhead")
    _resources(spec.get("resources"))
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        for container in _dicts(spec.get(kind)):
            _resources(container.get("resources"))
            for env in _dicts(container.get("env")):
                _divisor(env.get("valueFrom"))
    for volume in _dicts(spec.get("volumes")):
        if isinstance(volume.get("emptyDir"), dict):
            _number_as_text(volume["emptyDir"], "sizeLimit")
        claim = _at(volume, "ephemeral", "volumeClaimTemplate", "spec")
        if claim is not None:
            _resources(claim.get("resources"))
        downward = [volume.get("downwardAPI")] + [
            source.get("downwardAPI") for source in _dicts(_at(volume, "projected", "sources"))]
        for items in downward:
            for item in _dicts(items.get("items") if isinstance(items, dict) else None):
                _divisor(item)


def _at(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _resources(resources: Any) -> None:
    if isinstance(resources, dict):
        _text(resources, "limits")
        _text(resources, "requests")


def _divisor(holder: Any) -> None:
    ref = _at(holder, "resourceFieldRef")
    if isinstance(ref, dict):
        _number_as_text(ref, "divisor")


def _text(holder: dict[str, Any], key: str) -> None:
    """Each number among the values of the map ``holder[key]`` as its text."""
    values = holder.get(key)
    if isinstance(values, dict):
        for name in list(values):
            _number_as_text(values, name)


def _number_as_text(holder: dict[str, Any], key: str) -> None:
    value = holder.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        holder[key] = str(value)


def _defaults(target: dict[str, Any], defaults: Mapping[str, Any]) -> None:
    """``defaults`` where ``target`` leaves them unset: missing, null or an empty list (what
    Kubernetes treats as unset, e.g. ``command: []``). A value the template gives is kept."""
    for key, value in defaults.items():
        if target.get(key) is None or target.get(key) == []:
            target[key] = copy.deepcopy(value)


def _merge_env(existing: list[dict[str, Any]], ours: list[dict[str, Any]]) -> list[dict[str, Any]]:
    names = {e["name"] for e in ours}
    return [e for e in existing if e.get("name") not in names] + ours
