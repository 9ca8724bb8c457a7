"""GitHub Actions as a controller platform: ``spec.github``, JIT runners, the runner list.

Each runner is registered just in time (its config handed to the pod through a Secret) and
unregistered before its pod is deleted. Idle or busy comes from GitHub's runner list, by the
runner id the pod carries; without the list a running runner counts as busy, so nothing is
deleted on a guess. The adapter ``github.py`` (on ``gitscale.clients.github``) is imported
only when a set is served.

The runner container starts ``/home/runner/run.sh`` unless the template gives it a ``command``:
``ghcr.io/actions/actions-runner`` (actions/runner ``images/Dockerfile``: ``WORKDIR
/home/runner``, ``USER runner``) has no ENTRYPOINT and no CMD of its own, so a container started
from it with no command would exit at once. actions-runner-controller sets the same command.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from gitscale.controller.decide import Phase
from gitscale.controller.errors import InvalidRunnerSet
from gitscale.controller.platform import (
    Adapter,
    Clients,
    Kind,
    Listed,
    Registered,
    Registration,
)
from gitscale.controller.podspec import JIT_KEY
from gitscale.controller.status import BUSY, Condition
from gitscale.redact import redact

if TYPE_CHECKING:
    from gitscale.controller.github import GitHub

# The runner image's start script (the runner release is unpacked into /home/runner); it reads
# ACTIONS_RUNNER_INPUT_JITCONFIG as its --jitconfig.
RUN_SH = "/home/runner/run.sh"

SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Settings of a GitHub Actions set (platform: github).",
    "required": ["configURL", "credentialsSecret"],  # as settings() requires
    "properties": {
        "configURL": {"type": "string", "pattern": "^https?://",
                      "description": "Org, repo or enterprise URL runners register to."},
        "labels": {"type": "array", "items": {"type": "string", "minLength": 1},
                   "description": "Labels each runner registers with (default: the set's "
                                  "name). Keep them equal to the labels of the set's source "
                                  "in gitscale.yaml."},
        "runnerGroup": {"type": "string",
                        "description": "Runner group, by name (empty or Default: the default "
                                       "group). Ignored for a repository URL."},
        "credentialsSecret": {"type": "string", "minLength": 1,
                              "description": "Secret (in the set's namespace) with github_token "
                                             "or the github_app_* keys."},
    },
}


@dataclass(frozen=True)
class GitHubSettings:
    config_url: str
    labels: tuple[str, ...]
    runner_group: str | None
    credentials_secret: str


def is_api_host(host: str) -> bool:
    """Whether ``host`` is GitHub's REST API rather than a web address runners register at:
    ``api.github.com``, or ``api.SUBDOMAIN.ghe.com`` (a tenant's own ``SUBDOMAIN.ghe.com``,
    even one named ``api``, is not). GitHub Enterprise Server serves both on one host."""
    labels = host.lower().split(".")
    return host.lower() == "api.github.com" or (
        len(labels) >= 4 and labels[0] == "api" and labels[-2:] == ["ghe", "com"])


def where(config_url: str) -> tuple[str, str]:
    """``configURL`` → (the REST API's base, the scope's path: ``orgs/NAME``,
    ``repos/OWNER/REPO`` or ``enterprises/NAME``), as actions-runner-controller derives them:
    github.com → ``https://api.github.com``, ``*.ghe.com`` → ``https://api.HOST``, any other
    host is GitHub Enterprise Server, ``HOST/api/v3``. An address of the API itself is
    refused: derived again, it would name an API that does not exist."""
    url = urlsplit(config_url)
    parts = [p for p in url.path.split("/") if p]
    host = url.netloc.lower()
    # (said in the RunnerSet's status, which is not masked: a token in its query is, here)
    shown = redact(config_url)
    if is_api_host(url.hostname or "") or parts[:2] == ["api", "v3"]:
        raise InvalidRunnerSet(
            f"spec.github.configURL {shown!r} is the REST API's address: give where "
            "runners register, the organization's, repository's or enterprise's web address "
            "(https://github.com/ORG, https://SUBDOMAIN.ghe.com/ORG; GitHub Enterprise Server: "
            "https://HOST/ORG); the API's address is derived from it")
    if host in ("github.com", "www.github.com"):
        api = "https://api.github.com"
    elif host.endswith(".ghe.com"):
        api = f"{url.scheme}://api.{host}"
    else:
        api = f"{url.scheme}://{url.netloc}/api/v3"
    if len(parts) == 2 and parts[0] == "enterprises":
        return api, f"enterprises/{parts[1]}"
    if len(parts) == 1:
        return api, f"orgs/{parts[0]}"
    if len(parts) == 2:
        return api, f"repos/{parts[0]}/{parts[1]}"
    raise InvalidRunnerSet(f"spec.github.configURL {shown!r} is not an organization, "
                           "repository or enterprise URL (e.g. https://github.com/acme)")


def settings(raw: Any, set_name: str) -> GitHubSettings:
    if not isinstance(raw, dict) or not isinstance(raw.get("configURL"), str):
        raise InvalidRunnerSet("spec.github.configURL is required for platform github")
    try:
        netloc = urlsplit(raw["configURL"]).netloc
    except ValueError:
        raise InvalidRunnerSet("spec.github.configURL is not a URL") from None
    if "@" in netloc:  # the URL is logged and shown in status: never echo a credential
        raise InvalidRunnerSet("spec.github.configURL must not carry credentials (user:token@): "
                               "put them in the Secret named by spec.github.credentialsSecret")
    where(raw["configURL"])  # an address of the API itself, or of no scope: said here
    if not raw.get("credentialsSecret"):
        raise InvalidRunnerSet("spec.github.credentialsSecret is required: the Secret with "
                               "github_token or the github_app_* keys")
    labels = tuple(str(x) for x in raw.get("labels") or ()) or (set_name,)
    group = raw.get("runnerGroup") or None
    return GitHubSettings(raw["configURL"], labels, group, str(raw["credentialsSecret"]))


def running(name: str, annotations: Mapping[str, Any], runner_id: int | None,
            registered: Mapping[Any, Registered] | None) -> Phase:
    """By the runner id on the pod (by name if it has none) in GitHub's runner list."""
    if registered is None:
        return Phase.BUSY  # GitHub could not be asked: nothing is removed on a guess
    seen = registered.get(runner_id) if runner_id is not None else next(
        (r for r in registered.values() if r.name == name), None)
    if seen is not None and seen.busy:
        return Phase.BUSY  # offline too: its connection dropped mid-job, GitHub still waits
    if seen is None or not seen.online:
        return Phase.PENDING  # started, not connected yet (or already gone after a job)
    return Phase.IDLE


def busy_known(configured: bool, failure: str | None) -> Condition:
    if failure:
        return Condition(BUSY, False, "RunnerListUnavailable",
                         f"{failure}: running runners count as busy (none is removed)")
    return Condition(BUSY, True, "RunnerList", "idle and busy from GitHub's runner list")


class GitHubRunners:
    def __init__(self, client: GitHub, settings: GitHubSettings) -> None:
        self.client = client
        self.settings = settings

    def env(self, name: str) -> list[dict[str, Any]]:
        # The runner reads ACTIONS_RUNNER_INPUT_<ARG> as its --<arg> option.
        return [{"name": "ACTIONS_RUNNER_INPUT_JITCONFIG",
                 "valueFrom": {"secretKeyRef": {"name": name, "key": JIT_KEY}}}]

    def register(self, name: str) -> Registration:
        return self.client.register(name, self.settings.labels, self.settings.runner_group)

    def unregister(self, runner_id: int) -> None:
        self.client.unregister(runner_id)

    def busy_source(self) -> tuple[bool, str | None]:
        return True, None

    def registered(self, max_age: float) -> Listed:  # by runner id
        return Listed(*self.client.listed(max_age))  # read-only, shared: not copied


def adapter(clients: Clients, namespace: str, settings: GitHubSettings) -> Adapter:
    from gitscale.controller.github import GitHub, credentials_from, scope_of

    secret = settings.credentials_secret

    scope = scope_of(settings.config_url)

    def make() -> GitHub:
        data = clients.read_secret(namespace, secret)
        return GitHub(scope, credentials_from(data, f"Secret {namespace}/{secret}"),
                      monotonic=clients.clock)

    # One client, and so one runner list, for every set of the same credentials and scope
    # (``https://github.com/acme`` and ``…/acme/`` alike).
    client = clients.cached(("github", namespace, secret, scope.api, scope.path), make)
    assert isinstance(client, GitHub)
    return GitHubRunners(client, settings)


def matching(settings: GitHubSettings) -> tuple[str, ...]:
    """What decides which jobs a runner takes: where it registers (the API and the org, repo or
    enterprise), its labels and its runner group (as it registered)."""
    url = urlsplit(settings.config_url)
    where = f"{url.netloc}/{url.path.strip('/')}".lower()  # (GitHub's names ignore case)
    repository = url.path.strip("/").count("/") == 1 and not url.path.strip("/").startswith(
        "enterprises/")
    group = "Default" if repository else settings.runner_group or "Default"
    return (where, f"group={group}", *sorted(set(settings.labels)))


GITHUB = Kind(
    name="github", schema=SCHEMA, settings=settings, running=running, adapter=adapter,
    secrets=lambda s: frozenset({s.credentials_secret}), busy_known=busy_known,
    matching=matching,
    registration_labels=lambda s: frozenset(s.labels),
    runner_defaults={"command": [RUN_SH]},
)
