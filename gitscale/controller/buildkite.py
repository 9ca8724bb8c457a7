"""Buildkite's side of a runner: a do-once agent configured through its environment.

The controller never reads the agent token: the pod takes it from the Secret named in
``spec.buildkite.agentTokenSecret`` (key ``token``). Each agent runs with
``--disconnect-after-job`` (``BUILDKITE_AGENT_DISCONNECT_AFTER_JOB``) and is named after its
pod, so it exits after one job and its pod ends Succeeded (one pod per do-once agent).

Idle or busy: with ``spec.buildkite.organization`` and ``apiTokenSecret`` (a REST API token
with the read_agents scope, key ``token``), the agents API says which agents are connected and
which run a job (``GET /v2/organizations/{org}/agents``: connected agents only, ``job`` set
while one runs); the list is paged (``Link: rel="next"``) and reused for a few seconds. Without
them, or when the API cannot be read, a running agent is idle unless its pod says
``gitscale.dev/busy: "true"`` (the agent's ``environment`` hook can set it and its ``pre-exit``
hook clear it). Scale-down stays safe either way: the pod is deleted with SIGTERM, on which
buildkite-agent stops taking jobs and finishes the one it runs; runner pods get
``terminationGracePeriodSeconds: 3600`` unless the template sets its own.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, Callable

import httpx

from gitscale.controller.errors import CredentialsError, PlatformError
from gitscale.controller.observe import BuildkiteSettings, Registered

TOKEN_KEY = "token"
PAGES_MAX = 50  # 5,000 connected agents: a bound on one listing


class BuildkiteAgents:
    """The agents REST API for one organization and token. Thread-safe: passes share it."""

    def __init__(self, api_url: str, organization: str, token: str, *, timeout: float = 15.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.url = f"{api_url}/v2/organizations/{organization}/agents"
        self._http = httpx.Client(timeout=timeout, headers={
            "Authorization": f"Bearer {token}", "User-Agent": "gitscale-controller"})
        self._clock = clock
        self._lock = threading.Lock()
        self._listed: tuple[float, dict[str, Registered]] | None = None

    def close(self) -> None:
        self._http.close()

    def agents(self, max_age: float) -> dict[str, Registered]:
        """Connected agents by name, reused for ``max_age`` seconds."""
        with self._lock:
            if self._listed is not None and self._clock() - self._listed[0] < max_age:
                return self._listed[1]
        found: dict[str, Registered] = {}
        url: str | None = self.url
        params: dict[str, Any] | None = {"per_page": 100}
        for _ in range(PAGES_MAX):
            if url is None:
                break
            page = self._get(url, params)
            for agent in page.json():
                if isinstance(agent, dict) and agent.get("name"):
                    name = str(agent["name"])
                    found[name] = Registered(agent.get("connection_state") == "connected",
                                             isinstance(agent.get("job"), dict), name)
            url, params = page.links.get("next", {}).get("url"), None
        with self._lock:
            self._listed = (self._clock(), found)
        return found

    def _get(self, url: str, params: dict[str, Any] | None) -> httpx.Response:
        where = f"Buildkite GET {self.url}"
        try:
            response = self._http.get(url, params=params)
        except httpx.HTTPError as exc:
            raise PlatformError(f"{where}: {type(exc).__name__}: no answer") from None
        if response.status_code in (401, 403):
            raise CredentialsError(f"{where}: {response.status_code}: the API token was "
                                   "refused (it needs the read_agents scope)")
        if response.status_code >= 400:
            raise PlatformError(f"{where}: {response.status_code}")
        try:
            body = response.json()
        except ValueError:
            raise PlatformError(f"{where}: the answer is not JSON") from None
        if not isinstance(body, list):
            raise PlatformError(f"{where}: the answer is not a list of agents")
        return response


class Buildkite:
    def __init__(self, settings: BuildkiteSettings, api: BuildkiteAgents | None = None,
                 list_max_age: float = 15.0, problem: str | None = None) -> None:
        self.settings = settings
        self.api = api
        self.list_max_age = list_max_age
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

    def registered(self) -> Mapping[str, Registered] | None:
        """Connected agents by name (None without the agents API: see the module docstring)."""
        return None if self.api is None else self.api.agents(self.list_max_age)
