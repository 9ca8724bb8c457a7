"""Buildkite's agents REST API: which agents are connected and which run a job.

``GET /v2/organizations/{org}/agents`` lists connected agents only, with ``job`` set while one
runs; the list is paged (``Link: rel="next"``) and reused for a few seconds. The only module
that talks to Buildkite (httpx); the platform itself (settings, env, the busy rule) is
``platform_buildkite.py``. Messages name the URL, never the token.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

import httpx

from gitscale.controller.errors import CredentialsError, PlatformError
from gitscale.controller.platform import Registered

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
