"""Raw API objects → the decision's values. Pure: dicts in, frozen dataclasses out.

A RunnerSet that cannot be acted on raises ``InvalidRunnerSet`` with a message naming the field,
which the loop records as a condition (and then serves the other sets). A pod becomes a
``Runner`` whose phase comes from its runner container and, for a running pod, from what the
platform knows (GitHub's runner list, or the ``gitscale.dev/busy`` annotation for Buildkite).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, TypedDict
from urllib.parse import urlsplit

from gitscale.controller.decide import Phase, Runner, Spec, Write
from gitscale.controller.errors import InvalidRunnerSet
from gitscale.runnerset_api import PATCH_ID_MAX, REPLICAS_MAX
from gitscale.timeutil import parse_time

LABEL_SET = "gitscale.dev/runnerset"
LABEL_PATCH = "gitscale.dev/patch-id"
ANNOTATION_FAILURES = "gitscale.dev/failures"
ANNOTATION_RUNNER_ID = "gitscale.dev/runner-id"
ANNOTATION_SPEC_TIME = "gitscale.dev/effective-time"  # of the spec that created the pod
ANNOTATION_BUSY = "gitscale.dev/busy"  # Buildkite: set by the agent's hooks (optional)
RUNNER_CONTAINER = "runner"
FINALIZER = "gitscale.dev/runners"  # held until the set's runners are unregistered and gone

Platform = Literal["github", "buildkite"]


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
class GitHubSettings:
    config_url: str
    labels: tuple[str, ...]
    runner_group: str | None
    credentials_secret: str


BUILDKITE_API = "https://api.buildkite.com"


@dataclass(frozen=True)
class BuildkiteSettings:
    queue: str
    tags: tuple[str, ...]
    agent_token_secret: str | None
    # The agents REST API (which agent runs a job): an organization slug and a Secret with a
    # REST API token (key ``token``, scope read_agents). Without them: the graceful-stop rule.
    organization: str | None = None
    api_token_secret: str | None = None
    api_url: str = BUILDKITE_API


@dataclass(frozen=True)
class RunnerSetView:
    namespace: str
    name: str
    uid: str
    spec: Spec
    platform: Platform
    template: dict[str, Any] = field(repr=False)
    github: GitHubSettings | None = None
    buildkite: BuildkiteSettings | None = None
    deleting: bool = False  # metadata.deletionTimestamp is set
    applied: Write | None = None  # status: the last write a pass fully applied (None: unknown)
    generation: int | None = None  # metadata.generation, reported back as observedGeneration

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def key_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def parse_runnerset(obj: Mapping[str, Any]) -> RunnerSetView:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise InvalidRunnerSet("spec is missing")
    replicas = _int(spec, "replicas", 0, REPLICAS_MAX)
    patch_id = _int(spec, "patchID", 0, PATCH_ID_MAX)
    effective = spec.get("effectiveTime")
    try:
        when = parse_time(effective) if isinstance(effective, str) and effective else None
    except ValueError as exc:
        raise InvalidRunnerSet(f"spec.effectiveTime: {exc}") from None
    platform = spec.get("platform")
    if platform not in ("github", "buildkite"):
        raise InvalidRunnerSet(f"spec.platform {platform!r} is not one of github, buildkite")
    template = spec.get("template")
    if not isinstance(template, dict):
        raise InvalidRunnerSet("spec.template is missing: a pod template for one runner")
    containers = (template.get("spec") or {}).get("containers")
    if not isinstance(containers, list) or not containers or not all(
            isinstance(c, dict) and c.get("name") and c.get("image") for c in containers):
        raise InvalidRunnerSet("spec.template.spec.containers needs at least one container "
                               "with a name and an image")
    view = RunnerSetView(str(meta.get("namespace", "")), str(meta.get("name", "")),
                         str(meta.get("uid", "")), Spec(replicas, patch_id, when), platform,
                         template, deleting=bool(meta.get("deletionTimestamp")),
                         applied=applied_write(obj.get("status")),
                         generation=_maybe_int(meta.get("generation")))
    if platform == "github":
        return _with_github(view, spec.get("github"))
    return _with_buildkite(view, spec.get("buildkite"))


def applied_write(status: Any) -> Write | None:
    """``status.appliedPatchID`` and ``appliedEffectiveTime``: what the controller recorded as
    the last write it fully applied. Missing or unreadable: None (the gate then falls back to
    the runners' labels), never an error: status is the controller's own field."""
    if not isinstance(status, dict):
        return None
    patch_id = status.get("appliedPatchID")
    if isinstance(patch_id, bool) or not isinstance(patch_id, int) or patch_id < 0:
        return None
    return Write(patch_id, _time(status.get("appliedEffectiveTime")))


def _with_github(view: RunnerSetView, raw: Any) -> RunnerSetView:
    if not isinstance(raw, dict) or not isinstance(raw.get("configURL"), str):
        raise InvalidRunnerSet("spec.github.configURL is required for platform github")
    try:
        netloc = urlsplit(raw["configURL"]).netloc
    except ValueError:
        raise InvalidRunnerSet("spec.github.configURL is not a URL") from None
    if "@" in netloc:  # the URL is logged and shown in status: never echo a credential
        raise InvalidRunnerSet("spec.github.configURL must not carry credentials (user:token@): "
                               "put them in the Secret named by spec.github.credentialsSecret")
    if not raw.get("credentialsSecret"):
        raise InvalidRunnerSet("spec.github.credentialsSecret is required: the Secret with "
                               "github_token or the github_app_* keys")
    labels = tuple(str(x) for x in raw.get("labels") or ()) or (view.name,)
    group = raw.get("runnerGroup") or None
    settings = GitHubSettings(raw["configURL"], labels, group, str(raw["credentialsSecret"]))
    return RunnerSetView(**{**view.__dict__, "github": settings})


def _with_buildkite(view: RunnerSetView, raw: Any) -> RunnerSetView:
    if not isinstance(raw, dict) or not raw.get("queue"):
        raise InvalidRunnerSet("spec.buildkite.queue is required for platform buildkite")
    organization, secret = raw.get("organization") or None, raw.get("apiTokenSecret") or None
    if (organization is None) != (secret is None):
        raise InvalidRunnerSet("spec.buildkite.organization and spec.buildkite.apiTokenSecret "
                               "go together: the agents API needs both (or leave both out)")
    api_url = str(raw.get("apiURL") or BUILDKITE_API).rstrip("/")
    try:
        parts = urlsplit(api_url)
    except ValueError:
        raise InvalidRunnerSet("spec.buildkite.apiURL is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.netloc or "@" in parts.netloc:
        raise InvalidRunnerSet("spec.buildkite.apiURL must be an http(s) URL without "
                               "credentials (the token goes in spec.buildkite.apiTokenSecret)")
    settings = BuildkiteSettings(str(raw["queue"]), tuple(str(t) for t in raw.get("tags") or ()),
                                 raw.get("agentTokenSecret") or None,
                                 str(organization) if organization else None,
                                 str(secret) if secret else None, api_url)
    return RunnerSetView(**{**view.__dict__, "buildkite": settings})


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
@dataclass(frozen=True)
class Registered:
    """What the platform says about a registered runner (GitHub's list). None: unknown."""

    online: bool
    busy: bool
    name: str = ""
    labels: tuple[str, ...] = ()


def runner_of(pod: Mapping[str, Any], registered: Mapping[int | str, Registered] | None,
              busy_until: datetime | None, now: datetime) -> Runner:
    """A pod as the decision sees it.

    ``registered`` is the platform's view: GitHub's runner list by runner id (None when GitHub
    could not be asked: then a running runner counts as busy, so nothing is deleted on a
    guess); Buildkite's connected agents by name (None without the agents API: then an agent
    is idle unless its pod says ``gitscale.dev/busy``, and a scale-down relies on the agent
    finishing its job on SIGTERM). ``busy_until``: a recent 422 said this runner is busy.
    """
    meta = pod.get("metadata") or {}
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    status = pod.get("status") or {}
    runner_id = _maybe_int(notes.get(ANNOTATION_RUNNER_ID))

    def make(phase: Phase, finished_at: datetime | None = None) -> Runner:
        return Runner(str(meta.get("name")), _maybe_int(labels.get(LABEL_PATCH)) or 0, phase,
                      runner_id, finished_at, _maybe_int(notes.get(ANNOTATION_FAILURES)) or 0,
                      _time(meta.get("creationTimestamp")), _time(notes.get(ANNOTATION_SPEC_TIME)))

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
        return make(Phase.PENDING)
    if busy_until is not None and now < busy_until:
        return make(Phase.BUSY)
    if runner_id is None:  # Buildkite
        if str(notes.get(ANNOTATION_BUSY)).lower() == "true":
            return make(Phase.BUSY)  # the agent's hooks say so
        if registered is None:
            return make(Phase.IDLE)  # taking jobs, as far as anyone can tell
        agent = registered.get(str(meta.get("name")))
        if agent is None or not agent.online:
            return make(Phase.PENDING)  # not connected yet (or gone after its job)
        return make(Phase.BUSY if agent.busy else Phase.IDLE)
    if registered is None:
        return make(Phase.BUSY)
    seen = registered.get(runner_id)
    if seen is None or not seen.online:
        return make(Phase.PENDING)  # started, not connected yet (or already gone after a job)
    return make(Phase.BUSY if seen.busy else Phase.IDLE)


# Waiting reasons that do not clear by themselves: a pod in one of them for longer than
# STUCK_AFTER is a failed runner (a missing JIT Secret after a crash, a bad image, ...).
STUCK_REASONS = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName",
                           "CreateContainerConfigError", "CreateContainerError"})
STUCK_AFTER = timedelta(minutes=5)


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


def runner_container(template: Mapping[str, Any]) -> str:
    containers = (template.get("spec") or {}).get("containers") or [{}]
    names = [c.get("name") for c in containers]
    return RUNNER_CONTAINER if RUNNER_CONTAINER in names else str(names[0])


def _runner_terminated(pod: Mapping[str, Any]) -> tuple[int, datetime | None] | None:
    """(exit code, finish time) once the runner container has stopped (sidecars may not have)."""
    spec_containers = (pod.get("spec") or {}).get("containers") or []
    name = runner_container({"spec": {"containers": spec_containers}}) if spec_containers \
        else RUNNER_CONTAINER
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == name:
            done = (cs.get("state") or {}).get("terminated")
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
