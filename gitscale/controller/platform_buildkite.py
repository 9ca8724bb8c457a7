"""Buildkite as a controller platform: ``spec.buildkite``, do-once agents, the agents API.

The controller never reads the agent token: the pod takes it from the Secret named in
``spec.buildkite.agentTokenSecret`` (key ``token``). The runner container gets environment
variables only, never a command or arguments: the ``buildkite/agent`` image starts by itself
(``ENTRYPOINT ["buildkite-agent-entrypoint"]``, ``CMD ["start"]``: tini, then
``buildkite-agent start``), and ``buildkite-agent start`` reads each of its flags from its
variable. ``BUILDKITE_AGENT_DISCONNECT_AFTER_JOB=true`` makes each agent exit after one job, and
``BUILDKITE_AGENT_NAME`` names it after its pod, so its pod ends Succeeded (one pod per do-once
agent).

Idle or busy: with ``spec.buildkite.organization`` and ``apiTokenSecret`` (a REST API token
with the read_agents scope, key ``token``), the agents API (``buildkite.py``) says which agents
are connected and which run a job; a pass that deletes running agents' pods (a scale-down,
agents of another queue or tags, one past its registration timeout) reads that list again
first (the one it decided on may be 15 s old, 60 s for outdated agents, and Buildkite has no
guard against stopping an agent that took a job since), and keeps those it shows running one
(and a timed-out one it shows connected).
Without them, or when the API cannot be read, a running
agent is idle unless its pod says ``gitscale.dev/busy: "true"`` (the agent's ``environment``
hook can set it and its ``pre-exit`` hook clear it). Scale-down stays safe either way: the pod
is deleted with SIGTERM, on which buildkite-agent stops taking jobs and finishes the one it
runs; runner pods get ``terminationGracePeriodSeconds: 3600`` unless the template sets its own.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from gitscale.controller.decide import Phase
from gitscale.controller.errors import ControllerError, CredentialsMissing, InvalidRunnerSet
from gitscale.controller.observe import REGISTRATION_TIMEOUT, runner_container
from gitscale.controller.platform import Adapter, Clients, Kind, Registered
from gitscale.controller.status import BUSY, Condition
from gitscale.redact import hold

if TYPE_CHECKING:
    from gitscale.controller.buildkite import BuildkiteAgents

API = "https://api.buildkite.com"
TOKEN_KEY = "token"  # the key of both tokens in their Secrets
ANNOTATION_BUSY = "gitscale.dev/busy"  # set by the agent's hooks (optional)
GRACEFUL = ("an agent counts as idle unless its pod says gitscale.dev/busy=true; a scale-down "
            "stops it with SIGTERM, on which it finishes its job first")

SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Settings of a Buildkite set (platform: buildkite).",
    "required": ["queue"],
    "properties": {
        "queue": {"type": "string", "minLength": 1,
                  "description": "The queue; each agent gets the tag queue=<queue> (no "
                                 "comma in it)."},
        "tags": {"type": "array", "items": {"type": "string"},
                 "description": "More agent tags, key=value each (no comma in one, no "
                                "queue=)."},
        "agentTokenSecret": {"type": "string", "minLength": 1,
                             "description": "Secret (in the set's namespace) whose key token "
                                            "is the agent token: the pod reads it, the "
                                            "controller never does."},
        "organization": {"type": "string", "minLength": 1,
                         "description": "Organization slug, for the agents REST API "
                                        "(which agent runs a job)."},
        "apiTokenSecret": {"type": "string", "minLength": 1,
                           "description": "Secret with key token: a REST API token "
                                          "with the read_agents scope."},
        "apiURL": {"type": "string", "pattern": "^https?://",
                   "description": f"Default {API}."},
    },
}


@dataclass(frozen=True)
class BuildkiteSettings:
    queue: str
    tags: tuple[str, ...]
    agent_token_secret: str | None
    # The agents REST API (which agent runs a job): an organization slug and a Secret with a
    # REST API token (key ``token``, scope read_agents). Without them: the graceful-stop rule.
    organization: str | None = None
    api_token_secret: str | None = None
    api_url: str = API


def settings(raw: Any, set_name: str) -> BuildkiteSettings:
    if not isinstance(raw, dict) or not raw.get("queue"):
        raise InvalidRunnerSet("spec.buildkite.queue is required for platform buildkite")
    organization, secret = raw.get("organization") or None, raw.get("apiTokenSecret") or None
    if (organization is None) != (secret is None):
        raise InvalidRunnerSet("spec.buildkite.organization and spec.buildkite.apiTokenSecret "
                               "go together: the agents API needs both (or leave both out)")
    api_url = str(raw.get("apiURL") or API).rstrip("/")
    try:
        parts = urlsplit(api_url)
    except ValueError:
        raise InvalidRunnerSet("spec.buildkite.apiURL is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.netloc or "@" in parts.netloc:
        raise InvalidRunnerSet("spec.buildkite.apiURL must be an http(s) URL without "
                               "credentials (the token goes in spec.buildkite.apiTokenSecret)")
    queue = str(raw["queue"])
    if "," in queue:  # BUILDKITE_AGENT_TAGS is comma-separated: the rest would be a tag
        raise InvalidRunnerSet(f"spec.buildkite.queue: {queue!r} holds a comma: the agent "
                               "reads its tags split at commas, so its queue would be the part "
                               "before it (a queue name has none)")
    tags = tuple(str(t) for t in raw.get("tags") or ())
    for tag in tags:
        if "," in tag:  # BUILDKITE_AGENT_TAGS is comma-separated: it would be several tags
            raise InvalidRunnerSet(f"spec.buildkite.tags: {tag!r} holds a comma: give each "
                                   "tag as an item of its own")
        if tag.strip().startswith("queue="):
            raise InvalidRunnerSet(
                f"spec.buildkite.tags: {tag!r}: the queue goes in spec.buildkite.queue (a "
                "second queue tag would have the agents take jobs the set is not scaled for)")
    return BuildkiteSettings(queue, tags,
                             raw.get("agentTokenSecret") or None,
                             str(organization) if organization else None,
                             str(secret) if secret else None, api_url)


# What the controller decides for every agent (``env``), said as ``buildkite-agent start``'s
# flags: a flag in the runner container's command or args wins over its variable (the agent
# reads the command line first), so the agent would take another queue's jobs, stop being
# found by its name in the agents API, or run more than one job. ``--token`` would also put a
# credential in the pod spec, where every reader of pods sees it.
OWN_FLAGS = {"name": "BUILDKITE_AGENT_NAME (the pod's name)",
             "tags": "BUILDKITE_AGENT_TAGS (spec.buildkite.queue and tags)",
             "queue": "BUILDKITE_AGENT_TAGS (spec.buildkite.queue)",
             "disconnect-after-job": "BUILDKITE_AGENT_DISCONNECT_AFTER_JOB (true: one job)",
             "token": "BUILDKITE_AGENT_TOKEN (from spec.buildkite.agentTokenSecret)",
             "spawn": "one agent per pod (do-once)",
             "acquire-job": "one agent per pod that takes the queue's next job"}
# What a flag may say because it is what the controller sets anyway (flag, value).
AS_SET = {("disconnect-after-job", ""), ("disconnect-after-job", "true"), ("spawn", "1")}
# Variables of the template that break an agent the controller starts: buildkite-agent start
# exits at once when a queue comes both from BUILDKITE_AGENT_QUEUE and from the tags;
# SPAWN starts several agents in one pod (one slot, several jobs, names the agents API does
# not know); ACQUIRE_JOB runs one given job, not the queue's.
REFUSED_ENV = {"BUILDKITE_AGENT_QUEUE": "the queue goes in spec.buildkite.queue (the agent "
                                        "refuses to start with a queue from both)",
               "BUILDKITE_AGENT_SPAWN": "one agent per pod: a pod holds one slot",
               "BUILDKITE_AGENT_ACQUIRE_JOB": "the agents take the queue's jobs, not one given"}


def check_template(template: Mapping[str, Any]) -> None:
    """The runner container's command, args and env must leave the agent as ``env`` sets it
    (see ``OWN_FLAGS`` and ``REFUSED_ENV``): refused as ``InvalidSpec`` rather than started as
    an agent that takes the wrong jobs, or none."""
    containers = (template.get("spec") or {}).get("containers") or []
    name = runner_container(template)
    container: Mapping[str, Any] = next((c for c in containers if c.get("name") == name), {})
    where = f"spec.template container {name!r}"
    for field_name in ("command", "args"):
        words = container.get(field_name) or []
        words = [str(w) for w in words] if isinstance(words, list) else []
        for at, word in enumerate(words):
            flag, said, value = word.partition("=") if word.startswith("-") else ("", "", "")
            flag = flag.lstrip("-")
            if not said and at + 1 < len(words) and not words[at + 1].startswith("-"):
                value = words[at + 1]  # (``--spawn 1``; a boolean flag takes no word)
            if flag in OWN_FLAGS and (flag, value if said or flag == "spawn" else "") not in AS_SET:
                raise InvalidRunnerSet(
                    f"{where}: {field_name} passes --{flag} to the agent; the controller sets "
                    f"{OWN_FLAGS[flag]}, and a flag would override it: remove it")
    for variable in container.get("env") or []:
        var = variable.get("name") if isinstance(variable, dict) else None
        if var == "BUILDKITE_AGENT_SPAWN" and str(variable.get("value")) == "1" and \
                "valueFrom" not in variable:
            continue  # the default, said out loud
        if var in REFUSED_ENV:
            raise InvalidRunnerSet(f"{where}: env sets {var}: {REFUSED_ENV[var]}; remove it")


def failing_hint(settings: BuildkiteSettings, namespace: str) -> str:
    """An agent whose token Buildkite refuses exits at once (its registration answered 401 is
    not retried) and its pod fails, again and again: the usual cause, and where it is said."""
    token = (f"Secret {namespace}/{settings.agent_token_secret}, key {TOKEN_KEY}"
             if settings.agent_token_secret else "BUILDKITE_AGENT_TOKEN of the runner container")
    # No Secret at all (made in another namespace, or under another key) is no refusal: the
    # pod never starts, so it has no log, and the kubelet's event says which is missing.
    missing = (f"; a pod that never started (CreateContainerConfigError) has no log: the "
               f"Secret {namespace}/{settings.agent_token_secret}, or its key {TOKEN_KEY}, is "
               f"missing (kubectl -n {namespace} describe pod POD says which)"
               if settings.agent_token_secret else "")
    listed = (f"; agents that run but are replaced after {REGISTRATION_TIMEOUT.seconds // 60} minutes were "
              f"never listed in organization {settings.organization!r} "
              "(spec.buildkite.organization): the one their token joins them to?"
              if settings.organization else "")
    return (f"an agent that exits soon after it starts was most often refused by Buildkite: its "
            f"agent token ({token}) wrong, revoked or rotated, or of another organization or "
            f"cluster than queue {settings.queue!r} — the failed pod's log says "
            f"(kubectl -n {namespace} logs POD){missing}{listed}")


def running(name: str, annotations: Mapping[str, Any], runner_id: int | None,
            registered: Mapping[Any, Registered] | None) -> Phase:
    """By the agent's name in the agents API, or the pod's own word."""
    if str(annotations.get(ANNOTATION_BUSY)).lower() == "true":
        return Phase.BUSY  # the agent's hooks say so
    if registered is None:
        return Phase.IDLE  # taking jobs, as far as anyone can tell
    agent = registered.get(name)
    if agent is not None and agent.busy:
        # whatever its connection_state: `stopping` (stopped from Buildkite's UI or API, it
        # finishes its job first) or `lost` mid-job (its pings missed) runs a job all the same
        return Phase.BUSY
    if agent is None or not agent.online:
        return Phase.PENDING  # not connected yet (or gone after its job)
    return Phase.IDLE


def busy_known(configured: bool, failure: str | None) -> Condition:
    if not configured:
        return Condition(BUSY, False, "NoAgentsAPIToken",
                         f"spec.buildkite.organization and apiTokenSecret are not set: {GRACEFUL}")
    if failure:
        return Condition(BUSY, False, "AgentsAPIUnavailable", f"{failure}: {GRACEFUL}")
    return Condition(BUSY, True, "AgentsAPI", "idle and busy from Buildkite's agents API")


class BuildkiteAgentRunners:
    def __init__(self, settings: BuildkiteSettings, api: BuildkiteAgents | None,
                 problem: str | None = None) -> None:
        self.settings = settings
        self.api = api
        self.problem = problem  # why the agents API is configured but not used

    def env(self, name: str) -> list[dict[str, Any]]:
        bk = self.settings
        env: list[dict[str, Any]] = [
            {"name": "BUILDKITE_AGENT_NAME", "value": name},
            {"name": "BUILDKITE_AGENT_TAGS", "value": ",".join((f"queue={bk.queue}", *bk.tags))},
            {"name": "BUILDKITE_AGENT_DISCONNECT_AFTER_JOB", "value": "true"},
        ]
        if bk.agent_token_secret:
            env.append({"name": "BUILDKITE_AGENT_TOKEN", "valueFrom": {"secretKeyRef": {
                "name": bk.agent_token_secret, "key": TOKEN_KEY}}})
        return env

    def register(self, name: str) -> None:
        return None  # the agent registers itself with its token

    def unregister(self, runner_id: int) -> None:
        return None  # nothing to undo: an agent that never connected left no trace

    def busy_source(self) -> tuple[bool, str | None]:
        return self.api is not None or self.problem is not None, self.problem

    def registered(self, max_age: float) -> Mapping[str, Registered] | None:
        """Connected agents by name (None without the agents API: see the module docstring)."""
        return None if self.api is None else self.api.agents(max_age)


def adapter(clients: Clients, namespace: str, settings: BuildkiteSettings) -> Adapter:
    """Without the agents API settings, or when its token cannot be read: no busy signal
    (the set is still served, under the graceful-stop rule; ``problem`` says why)."""
    if settings.organization is None or settings.api_token_secret is None:
        return BuildkiteAgentRunners(settings, None)
    from gitscale.controller.buildkite import BuildkiteAgents

    secret, org = settings.api_token_secret, settings.organization

    def make() -> BuildkiteAgents:
        token = hold(clients.read_secret(namespace, secret).get(TOKEN_KEY, "")).strip()
        if not token:
            raise CredentialsMissing(f"Secret {namespace}/{secret}: needs the key {TOKEN_KEY} (a "
                                   "Buildkite REST API token with the read_agents scope)")
        return BuildkiteAgents(settings.api_url, org, token, clock=clients.clock,
                               source=f"Secret {namespace}/{secret}, key {TOKEN_KEY}")

    try:
        client = clients.cached(("buildkite", namespace, secret, settings.api_url, org), make)
    except ControllerError as exc:
        return BuildkiteAgentRunners(settings, None, problem=str(exc))
    assert isinstance(client, BuildkiteAgents)
    return BuildkiteAgentRunners(settings, client)


def _secrets(settings: BuildkiteSettings) -> frozenset[str]:
    return frozenset({settings.api_token_secret} if settings.api_token_secret else ())


def matching(settings: BuildkiteSettings) -> tuple[str, ...]:
    """What decides which jobs an agent takes: its queue and tags (as it was started with)."""
    return (f"queue={settings.queue}", *sorted(settings.tags))


BUILDKITE = Kind(
    name="buildkite", schema=SCHEMA, settings=settings, running=running, adapter=adapter,
    secrets=_secrets, busy_known=busy_known, matching=matching, check_template=check_template,
    failing_hint=failing_hint,
    # The agents list is reused up to LIST_MAX_AGE, and a pod deleted is an agent stopped,
    # whatever job it took since: a pass that deletes running agents reads the list again first.
    fresh_before_removal=True,
    # SIGTERM makes the agent finish its job before exiting: give it the time to.
    pod_defaults={"terminationGracePeriodSeconds": 3600},
    # No runner_defaults: a command would replace the image's entrypoint (and tini with it).
)
