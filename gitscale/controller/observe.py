"""Raw API objects → the decision's values. Pure: dicts in, frozen dataclasses out.

A RunnerSet that cannot be acted on raises ``InvalidRunnerSet`` with a message naming the field,
which the loop records as a condition (and then serves the other sets); its platform's entry
in the registry (``platforms.py``, passed in) parses ``spec.<platform>``. A pod becomes a
``Runner`` whose phase comes from its runner container and, for a running pod, from its
platform's rule (GitHub's runner list by runner id, Buildkite's agents or the pod's word).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Callable, TypedDict

from gitscale.controller.decide import Phase, Refilled, Runner, Spec, Unschedulable, Write
from gitscale.controller.errors import InvalidRunnerSet
from gitscale.controller.platform import Kind, Registered, RunningRule
from gitscale.runnerset_api import BACKLOG_MAX, PATCH_ID_MAX, REPLICAS_MAX
from gitscale.timeutil import parse_time

LABEL_SET = "gitscale.dev/runnerset"
LABEL_PATCH = "gitscale.dev/patch-id"
ANNOTATION_FAILURES = "gitscale.dev/failures"
ANNOTATION_RUNNER_ID = "gitscale.dev/runner-id"
ANNOTATION_SPEC_TIME = "gitscale.dev/effective-time"  # of the spec that created the pod
# A digest of the platform settings that decide which jobs the runner takes (``Kind.matching``)
ANNOTATION_MATCHING = "gitscale.dev/matching"
RUNNER_CONTAINER = "runner"
FINALIZER = "gitscale.dev/runners"  # held until the set's runners are unregistered and gone
LABEL_VALUE_MAX = 63  # Kubernetes' limit of a label value: the set's name is one (LABEL_SET)


class RawObject(TypedDict, total=False):
    """An API object as JSON: a RunnerSet, a Pod or a Secret."""

    apiVersion: str
    kind: str
    metadata: dict[str, Any]
    spec: dict[str, Any]
    status: dict[str, Any]
    type: str  # Secret
    data: dict[str, str]  # Secret


@dataclass(frozen=True)
class RunnerSetView:
    namespace: str
    name: str
    uid: str
    spec: Spec
    platform: str  # spec.platform: the name of ``kind``
    kind: Kind = field(repr=False)  # the registry's entry for it
    settings: Any  # spec.<platform>, as ``kind.settings`` parsed it
    template: dict[str, Any] = field(repr=False)
    deleting: bool = False  # metadata.deletionTimestamp is set
    applied: Write | None = None  # status: the last write a pass fully applied (None: unknown)
    refilled: Refilled | None = None  # status: slots refilled from a write's backlog
    generation: int | None = None  # metadata.generation, reported back as observedGeneration

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def key_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def parse_runnerset(obj: Mapping[str, Any], kind_of: Callable[[object], Kind]) -> RunnerSetView:
    """``kind_of``: the registry's lookup (``platforms.kind_of``), which refuses a platform it
    does not know."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise InvalidRunnerSet("spec is missing")
    replicas = _int(spec, "replicas", 0, REPLICAS_MAX)
    patch_id = _int(spec, "patchID", 0, PATCH_ID_MAX)
    backlog = _int(spec, "backlog", 0, BACKLOG_MAX)
    effective = spec.get("effectiveTime")
    try:
        when = parse_time(effective) if isinstance(effective, str) and effective else None
    except ValueError as exc:
        raise InvalidRunnerSet(f"spec.effectiveTime: {exc}") from None
    platform = spec.get("platform")
    kind = kind_of(platform)
    template = spec.get("template")
    deleting = bool(meta.get("deletionTimestamp"))
    if deleting:
        # A set being deleted creates no runner (``decide.effective``): its template is not
        # checked, so that one made invalid before the deletion does not keep the set from
        # being drained, its runners up and its finalizer held for ever.
        template = template if isinstance(template, dict) else {}
    elif not isinstance(template, dict):
        raise InvalidRunnerSet("spec.template is missing: a pod template for one runner")
    else:
        containers = (template.get("spec") or {}).get("containers")
        if not isinstance(containers, list) or not containers or not all(
                isinstance(c, dict) and c.get("name") and c.get("image") for c in containers):
            raise InvalidRunnerSet("spec.template.spec.containers needs at least one "
                                   "container with a name and an image")
        kind.check_template(template)
    name = str(meta.get("name", ""))
    if len(name) > LABEL_VALUE_MAX:  # (its pods could be neither made nor found)
        raise InvalidRunnerSet(
            f"metadata.name is {len(name)} characters: each runner pod carries it as the "
            f"value of its label {LABEL_SET}, which holds at most {LABEL_VALUE_MAX}; give the "
            f"RunnerSet a name of {LABEL_VALUE_MAX} characters or fewer")
    return RunnerSetView(str(meta.get("namespace", "")), name, str(meta.get("uid", "")),
                         Spec(replicas, patch_id, when, backlog), kind.name, kind,
                         kind.settings(spec.get(kind.name), name), template,
                         deleting=deleting,
                         applied=applied_write(obj.get("status")),
                         refilled=refilled_of(obj.get("status")),
                         generation=_maybe_int(meta.get("generation")))


def applied_write(status: Any) -> Write | None:
    """``status.appliedPatchID``, ``appliedEffectiveTime`` and ``appliedReplicas``: what the
    controller recorded as the last write it fully applied, and its count. Missing or
    unreadable: None (the gate then falls back to the runners' labels; a count alone: its
    ``replicas`` None), never an error: status is the controller's own field."""
    if not isinstance(status, dict):
        return None
    patch_id = status.get("appliedPatchID")
    if isinstance(patch_id, bool) or not isinstance(patch_id, int) or patch_id < 0:
        return None
    replicas = status.get("appliedReplicas")  # (none from an older controller: unknown)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        replicas = None
    return Write(patch_id, _time(status.get("appliedEffectiveTime")), replicas)


def refilled_of(status: Any) -> Refilled | None:
    """``status.refilled`` with ``refilledPatchID`` and ``refilledEffectiveTime``: the slots
    refilled from that write's backlog. Missing or unreadable: None (none yet), never an error:
    status is the controller's own field."""
    if not isinstance(status, dict):
        return None
    count, patch_id = status.get("refilled"), status.get("refilledPatchID")
    if not isinstance(count, int) or not isinstance(patch_id, int) or isinstance(
            count, bool) or isinstance(patch_id, bool) or min(count, patch_id) < 0:
        return None
    return Refilled(Write(patch_id, _time(status.get("refilledEffectiveTime"))), count)


def _int(spec: Mapping[str, Any], name: str, lo: int, hi: int) -> int:
    value = spec.get(name, 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRunnerSet(f"spec.{name}: {value!r} is not an integer")
    if not lo <= value <= hi:
        raise InvalidRunnerSet(f"spec.{name}: {value} is out of range ({lo}..{hi})")
    return int(value)


# -- pods -------------------------------------------------------------------------------------
def runner_of(pod: Mapping[str, Any], registered: Mapping[Any, Registered] | None,
              busy_until: datetime | None, now: datetime,
              running: RunningRule | None = None, came_online: bool = False,
              listed_at: datetime | None = None, matching: str | None = None) -> Runner:
    """A pod as the decision sees it.

    ``registered`` is the platform's view (GitHub's runner list by runner id, Buildkite's
    connected agents by name; None when it could not say) and ``running`` the platform's rule
    that reads it for a running pod (``Kind.running``); without a rule a running pod counts as
    busy, so nothing is deleted on a guess. ``busy_until``: a recent 422 said it is busy.
    A running pod whose runner the platform has not seen online (``came_online``: since this
    controller started) ``REGISTRATION_TIMEOUT`` after it started is failed: it would be
    pending for ever (a bad JIT config, no way out to GitHub, a runner too old to connect).
    That is judged on a list read at ``listed_at`` (None: ``now``), which lists are reused:
    a list read before the timeout ran out says nothing about the runner since, so the runner
    stays pending until a list read after it says the same.

    ``matching``: the digest of the set's job-matching settings now (``podspec.matching_of``);
    a pod made for others is ``outdated`` (a pod without the annotation is not: unknown).
    """
    meta = pod.get("metadata") or {}
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    status = pod.get("status") or {}
    runner_id = _maybe_int(notes.get(ANNOTATION_RUNNER_ID))

    made_for = notes.get(ANNOTATION_MATCHING)
    outdated = matching is not None and made_for is not None and made_for != matching

    def make(phase: Phase, finished_at: datetime | None = None) -> Runner:
        return Runner(str(meta.get("name")), _maybe_int(labels.get(LABEL_PATCH)) or 0, phase,
                      runner_id, finished_at, _maybe_int(notes.get(ANNOTATION_FAILURES)) or 0,
                      _time(meta.get("creationTimestamp")), _time(notes.get(ANNOTATION_SPEC_TIME)),
                      outdated=outdated)

    if meta.get("deletionTimestamp"):
        return make(Phase.TERMINATING)
    terminated = _runner_terminated(pod)
    if terminated is not None:
        code, finished = terminated
        return make(Phase.FINISHED if code == 0 else Phase.FAILED, finished or _ended(status))
    phase = status.get("phase")
    if phase in ("Succeeded", "Failed"):
        return make(Phase.FINISHED if phase == "Succeeded" else Phase.FAILED, _ended(status))
    if phase != "Running":
        stuck_since = _stuck(pod, now)
        if stuck_since is not None:  # it would hold its slot forever: back off and replace it
            return make(Phase.FAILED, stuck_since)
        return replace(make(Phase.PENDING), unschedulable=unschedulable_of(pod),
                       cannot_start=cannot_start_of(pod))
    if (busy_until is not None and now < busy_until) or running is None:
        return make(Phase.BUSY)
    phase = running(str(meta.get("name")), notes, runner_id, registered)
    if phase is Phase.PENDING and registered is not None:
        timed_out = registration_timed_out(pod, came_online, listed_at or now)
        if timed_out is not None:
            return make(Phase.FAILED, timed_out)
    return make(phase)


def registration_timed_out(pod: Mapping[str, Any], came_online: bool,
                           at: datetime) -> datetime | None:
    """When a running pod whose runner was never seen online (``came_online``) ran out of its
    ``REGISTRATION_TIMEOUT`` (its start + the timeout), if that is at or before ``at``; None
    otherwise (not running, seen online, not started, or still in time)."""
    if came_online or (pod.get("status") or {}).get("phase") != "Running":
        return None
    started = started_at(pod)
    if started is None or at - started < REGISTRATION_TIMEOUT:
        return None
    return started + REGISTRATION_TIMEOUT


def unschedulable_of(pod: Mapping[str, Any]) -> Unschedulable | None:
    """The scheduler's word on a pod it could not place: its ``PodScheduled`` condition False
    with reason ``Unschedulable`` (no node fits: too little CPU or memory, a nodeSelector or
    taint no node matches, a volume zone; the cluster autoscaler may be adding a node). None
    for a pod scheduled, not yet tried, or refused for another reason (``SchedulingGated``:
    held on purpose)."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "PodScheduled":
            if cond.get("status") != "False" or cond.get("reason") != "Unschedulable":
                return None
            since = _time(cond.get("lastTransitionTime")) or _time(
                (pod.get("metadata") or {}).get("creationTimestamp"))
            return Unschedulable(since, str(cond.get("message") or "no node fits the pod"))
    return None


# Waiting reasons that do not clear by themselves: a pod in one of them for longer than
# STUCK_AFTER is a failed runner (a missing JIT Secret after a crash, a bad image, ...).
# (ErrImageNeverPull: imagePullPolicy Never and the image is not on the node.)
STUCK_REASONS = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName",
                           "ErrImageNeverPull", "CreateContainerConfigError",
                           "CreateContainerError"})
STUCK_AFTER = timedelta(minutes=5)
# A running runner never seen online this long after it started is failed and replaced (with
# the failed runners' backoff), as actions-runner-controller's registration timeout does.
REGISTRATION_TIMEOUT = timedelta(minutes=10)


def cannot_start_of(pod: Mapping[str, Any]) -> str | None:
    """The kubelet's word on a container of the pod that waits for a reason that does not
    clear by itself (``STUCK_REASONS``), such as ``container agent: CreateContainerConfigError:
    secret "buildkite-agent-token" not found``; None while every container may still start."""
    status = pod.get("status") or {}
    for cs in [*(status.get("initContainerStatuses") or []),
               *(status.get("containerStatuses") or [])]:
        waiting = (cs.get("state") or {}).get("waiting") if isinstance(cs, dict) else None
        if isinstance(waiting, dict) and waiting.get("reason") in STUCK_REASONS:
            message = str(waiting.get("message") or "").strip()
            said = f"container {cs.get('name')}: {waiting['reason']}"
            return f"{said}: {message[:500]}" if message else said
    return None


def _stuck(pod: Mapping[str, Any], now: datetime) -> datetime | None:
    """When the pod counts as failed (creation + STUCK_AFTER: a fixed time, so the backoff
    that follows runs from it), or None while it may still start."""
    created = _time((pod.get("metadata") or {}).get("creationTimestamp"))
    if created is None or now - created < STUCK_AFTER:
        return None
    status = pod.get("status") or {}
    for cs in [*(status.get("initContainerStatuses") or []),
               *(status.get("containerStatuses") or [])]:
        waiting = (cs.get("state") or {}).get("waiting") if isinstance(cs, dict) else None
        if isinstance(waiting, dict) and waiting.get("reason") in STUCK_REASONS:
            return created + STUCK_AFTER
    return None


def started_at(pod: Mapping[str, Any]) -> datetime | None:
    """When the runner container started (else the pod, else its creation); None while the
    runner container's status says it is not running yet (its image still being pulled while
    a sidecar runs: the pod is Running, the runner has not started)."""
    status = pod.get("status") or {}
    cs = _runner_status(pod)
    if cs is not None:
        running = (cs.get("state") or {}).get("running")
        if not isinstance(running, dict):
            return None  # waiting (or no state yet): not started
        started = _time(running.get("startedAt"))
        if started is not None:
            return started
    return _time(status.get("startTime")) or _time(
        (pod.get("metadata") or {}).get("creationTimestamp"))


def stopped(pod: Mapping[str, Any]) -> bool:
    """Has the runner stopped for good: its container terminated, or the pod ``Succeeded`` or
    ``Failed`` (evicted, OOM-killed, deleted by the node)? Such a runner runs no job, whatever
    its platform still says."""
    phase = (pod.get("status") or {}).get("phase")
    return _runner_terminated(pod) is not None or phase in ("Succeeded", "Failed")


def runner_container(template: Mapping[str, Any]) -> str:
    containers = (template.get("spec") or {}).get("containers") or [{}]
    names = [c.get("name") for c in containers]
    return RUNNER_CONTAINER if RUNNER_CONTAINER in names else str(names[0])


def _runner_status(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The runner container's entry in the pod's ``containerStatuses``, if there is one yet."""
    spec_containers = (pod.get("spec") or {}).get("containers") or []
    name = runner_container({"spec": {"containers": spec_containers}}) if spec_containers \
        else RUNNER_CONTAINER
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if isinstance(cs, dict) and cs.get("name") == name:
            return cs
    return None


def _runner_terminated(pod: Mapping[str, Any]) -> tuple[int, datetime | None] | None:
    """(exit code, finish time) once the runner container has stopped (sidecars may not have)."""
    cs = _runner_status(pod)
    done = (cs.get("state") or {}).get("terminated") if cs is not None else None
    if isinstance(done, dict):
        return int(done.get("exitCode", 1)), _time(done.get("finishedAt"))
    return None


def _ended(status: Mapping[str, Any]) -> datetime | None:
    times = [_time(cs.get("state", {}).get("terminated", {}).get("finishedAt"))
             for cs in status.get("containerStatuses") or [] if isinstance(cs, dict)]
    times += [_time(c.get("lastTransitionTime")) for c in status.get("conditions") or []
              if isinstance(c, dict)]
    known = [t for t in times if t is not None]
    return max(known) if known else None


def _time(value: Any) -> datetime | None:
    try:
        return parse_time(value) if isinstance(value, str) and value else None
    except ValueError:
        return None


def _maybe_int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None
