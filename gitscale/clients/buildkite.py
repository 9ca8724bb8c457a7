"""Buildkite's two APIs, on the one HTTP client (``http.py``).

- ``Metrics``: the agent metrics API, ``GET {apiUrl}/metrics/queue?name=QUEUE`` with
  ``Authorization: Token <agent token>`` — a queue's scheduled, running and waiting jobs, and
  the ``Buildkite-Agent-Metrics-Poll-Duration`` header (the demand source);
- ``Agents``: the REST API's ``GET /v2/organizations/{org}/agents`` with a bearer REST API
  token (scope ``read_agents``) — the *connected* agents, each with the ``job`` it runs, paged
  by ``Link: rel="next"`` (the controller).

Rate limits (429 with ``RateLimit-Reset``) and errors are the HTTP client's.

https://buildkite.com/docs/apis/agent-api/metrics, https://buildkite.com/docs/apis/rest-api/agents
"""
from __future__ import annotations

import time
from typing import Any, Callable

from gitscale.clients.http import Answer, EtagCache, HttpClient

AGENT_PAGES_MAX = 50  # 5,000 connected agents: a bound on one listing


class Metrics:
    """The agent metrics API of one ``apiUrl`` (``https://agent.buildkite.com/v3``) and token."""

    def __init__(self, api_url: str, token: str, *, cache: EtagCache | None = None,
                 timeout: float = 10.0, transport: Any = None) -> None:
        self.api = api_url.rstrip("/")
        self.http = HttpClient(name=f"buildkite ({self.api})",
                               headers=lambda: {"Authorization": f"Token {token}"},
                               cache=cache, timeout=timeout, transport=transport)

    def close(self) -> None:
        self.http.close()

    def save(self) -> None:
        self.http.save()

    def queue(self, name: str) -> Answer:
        """The queue's metrics: the JSON body and the headers (the poll duration)."""
        return self.http.get(f"{self.api}/metrics/queue", {"name": name})


class Agents:
    """The REST API's agents of one organization, with one API token."""

    def __init__(self, api_url: str, organization: str, token: str, *, timeout: float = 15.0,
                 retries: int = 0, max_wait: float = 0.0, transport: Any = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.url = f"{api_url.rstrip('/')}/v2/organizations/{organization}/agents"
        self.http = HttpClient(name=f"buildkite ({api_url.rstrip('/')})",
                               headers=lambda: {"Authorization": f"Bearer {token}"},
                               timeout=timeout, retries=retries, max_wait=max_wait,
                               transport=transport, sleep=sleep)

    def close(self) -> None:
        self.http.close()

    def connected(self) -> list[Any]:
        """Every connected agent (Buildkite lists no other), as its JSON object."""
        return self.http.paginate(self.url, {"per_page": 100}, "", limit=AGENT_PAGES_MAX)
