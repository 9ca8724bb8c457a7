"""Buildkite's agents, for the controller: which agents are connected and which run a job.

The REST API's agents list (``gitscale.clients.buildkite.Agents``: connected agents only, each
with ``job`` set while it runs one, every page by ``Link``) is reused for a few seconds. Its
errors become the controller's here: 401/403 ``CredentialsError`` (the token needs the
``read_agents`` scope), a rate limit, no answer or a 5xx ``PlatformOutage``, anything else
``PlatformError``.
Messages name the URL, never the token. After a 5xx or no answer, the API is not asked
again before a wait (``outage.py``). The platform itself (settings, env, the busy rule) is
``platform_buildkite.py``.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from gitscale.clients.buildkite import Agents
from gitscale.clients.errors import ApiError, RateLimited, Unreachable, Unsendable
from gitscale.controller.errors import CredentialsError, PlatformError, PlatformOutage
from gitscale.controller.outage import Outage
from gitscale.controller.platform import Listed, Registered


class BuildkiteAgents:
    """The agents REST API for one organization and token. Thread-safe: passes share it."""

    def __init__(self, api_url: str, organization: str, token: str, *, timeout: float = 15.0,
                 clock: Callable[[], float] = time.monotonic, source: str = "") -> None:
        self._api = Agents(api_url, organization, token, timeout=timeout)
        self._source = source  # where the token was read ("Secret NS/NAME, key token")
        self.url = self._api.url
        self._clock = clock
        self._lock = threading.Lock()
        self._listed: tuple[float, dict[str, Registered]] | None = None
        # Buildkite failing (a 5xx, no answer): asked again by no set before a wait, then once.
        self.outage = Outage("Buildkite", clock=clock)
        self.accepted = False  # the token worked once (``vouches``)

    def close(self) -> None:
        self._api.close()

    def vouches(self, call: str | None) -> bool:
        """Whether the token worked once (``refusals.Vouched``: one kind of call, the list)."""
        return self.accepted

    def agents(self, max_age: float) -> Listed:
        """Connected agents by name, reused for ``max_age`` seconds (``Listed.age``: how long
        ago they were read)."""
        with self._lock:
            if self._listed is not None:
                age = self._clock() - self._listed[0]
                if age < max_age:
                    return Listed(self._listed[1], max(age, 0.0))
        read_at = self._clock()
        listed = self.outage.ask(self._api.connected,
                                 lambda e: translate(e, self._source))
        self.accepted = True
        found: dict[str, Registered] = {}
        for agent in listed:
            if isinstance(agent, dict) and agent.get("name"):
                name = str(agent["name"])
                found[name] = Registered(agent.get("connection_state") == "connected",
                                         isinstance(agent.get("job"), dict), name)
        with self._lock:
            self._listed = (read_at, found)
        return Listed(found, max(self._clock() - read_at, 0.0))


def translate(exc: ApiError, source: str = "") -> PlatformError:
    """The client's error as the controller's; a refusal names the token's ``source``."""
    named = f" (the credential of {source})" if source else ""
    if isinstance(exc, Unsendable):  # a token the Secret holds broken: read it again
        return CredentialsError(f"{exc}{named}")
    if isinstance(exc, (RateLimited, Unreachable)) or exc.status >= 500:
        return PlatformOutage(str(exc))
    if exc.status in (401, 403):
        return CredentialsError(f"{exc}: the API token was refused (it needs the read_agents "
                                f"scope){named}")
    return PlatformError(str(exc))
