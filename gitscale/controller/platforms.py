"""One adapter per platform behind the same four verbs, and where the loop gets them.

``env`` (what the runner container needs), ``register`` (GitHub: a JIT config; Buildkite: none),
``unregister`` (GitHub: DELETE the runner; ``RunnerBusy`` on 422) and ``registered`` (idle and
busy: GitHub's runner list by runner id, Buildkite's connected agents by name; None when the
platform cannot say).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, Callable, Protocol

from gitscale.controller.buildkite import TOKEN_KEY, Buildkite, BuildkiteAgents
from gitscale.controller.errors import ControllerError, CredentialsError
from gitscale.controller.github import (
    LIST_MAX_AGE,
    GitHub,
    Registration,
    credentials_from,
    scope_of,
)
from gitscale.controller.observe import (
    BuildkiteSettings,
    GitHubSettings,
    Registered,
    RunnerSetView,
)

CREDENTIALS_MAX_AGE = 300.0  # seconds before a credentials Secret is read again


class Platform(Protocol):
    def env(self, name: str) -> list[dict[str, Any]]: ...

    def register(self, name: str) -> Registration | None: ...

    def unregister(self, runner_id: int) -> None: ...

    def registered(self) -> Mapping[Any, Registered] | None: ...

    def busy_source(self) -> tuple[bool, str | None]:
        """(is the platform set up to say who is busy, why it cannot this time)"""
        ...


class GitHubRunners:
    def __init__(self, client: GitHub, settings: GitHubSettings,
                 list_max_age: float = LIST_MAX_AGE) -> None:
        self.client = client
        self.settings = settings
        self.list_max_age = list_max_age

    def env(self, name: str) -> list[dict[str, Any]]:
        from gitscale.controller.podspec import JIT_KEY

        # The runner reads ACTIONS_RUNNER_INPUT_<ARG> as its --<arg> option.
        return [{"name": "ACTIONS_RUNNER_INPUT_JITCONFIG",
                 "valueFrom": {"secretKeyRef": {"name": name, "key": JIT_KEY}}}]

    def register(self, name: str) -> Registration:
        return self.client.register(name, self.settings.labels, self.settings.runner_group)

    def unregister(self, runner_id: int) -> None:
        self.client.unregister(runner_id)

    def busy_source(self) -> tuple[bool, str | None]:
        return True, None

    def registered(self) -> Mapping[int, Registered]:  # by runner id
        return {i: Registered(r.online, r.busy, r.name, r.labels)
                for i, r in self.client.runners(self.list_max_age).items()}


SecretReader = Callable[[str, str], Mapping[str, str]]


class Platforms:
    """Adapters by RunnerSet, with API clients (and their tokens) reused across passes."""

    def __init__(self, read_secret: SecretReader, *, list_max_age: float = LIST_MAX_AGE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._read_secret = read_secret
        self._list_max_age = list_max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._clients: dict[tuple[str, ...], tuple[float, GitHub | BuildkiteAgents]] = {}

    def for_set(self, rs: RunnerSetView) -> Platform:
        if rs.buildkite is not None:
            return self._buildkite(rs.namespace, rs.buildkite)
        assert rs.github is not None
        key = ("github", rs.namespace, rs.github.credentials_secret, rs.github.config_url)
        client = self._cached(key, lambda: self._github(rs.namespace, rs.github))
        assert isinstance(client, GitHub)
        return GitHubRunners(client, rs.github, self._list_max_age)

    def forget(self, rs: RunnerSetView) -> None:
        """Drop a set's clients, e.g. after its credentials were refused: read them again."""
        with self._lock:
            gone = [self._clients.pop(k) for k in list(self._clients)
                    if k[1] == rs.namespace and k[2] in _secrets(rs)]
        for _, client in gone:
            client.close()

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for _, client in clients:
            client.close()

    def _cached(self, key: tuple[str, ...],
                make: Callable[[], GitHub | BuildkiteAgents]) -> GitHub | BuildkiteAgents:
        with self._lock:
            cached = self._clients.get(key)
        if cached is not None and self._clock() - cached[0] < CREDENTIALS_MAX_AGE:
            return cached[1]
        client = make()
        with self._lock:
            # A replaced client may still serve a pass in flight: it is left to the GC.
            self._clients[key] = (self._clock(), client)
        return client

    def _github(self, namespace: str, settings: GitHubSettings | None) -> GitHub:
        assert settings is not None
        source = f"Secret {namespace}/{settings.credentials_secret}"
        data = self._read_secret(namespace, settings.credentials_secret)
        return GitHub(scope_of(settings.config_url), credentials_from(data, source))

    def _buildkite(self, namespace: str, settings: BuildkiteSettings) -> Buildkite:
        """Without the agents API settings, or when its token cannot be read: no busy signal
        (the set is still served, under the graceful-stop rule; ``problem`` says why)."""
        if settings.organization is None or settings.api_token_secret is None:
            return Buildkite(settings, None, self._list_max_age)
        secret, org = settings.api_token_secret, settings.organization
        source = f"Secret {namespace}/{secret}"

        def make() -> BuildkiteAgents:
            token = self._read_secret(namespace, secret).get(TOKEN_KEY, "").strip()
            if not token:
                raise CredentialsError(f"{source}: needs the key {TOKEN_KEY} (a Buildkite REST "
                                       "API token with the read_agents scope)")
            return BuildkiteAgents(settings.api_url, org, token)

        try:
            client = self._cached(("buildkite", namespace, secret, settings.api_url, org), make)
        except ControllerError as exc:
            return Buildkite(settings, None, self._list_max_age, problem=str(exc))
        assert isinstance(client, BuildkiteAgents)
        return Buildkite(settings, client, self._list_max_age)


def _secrets(rs: RunnerSetView) -> set[str]:
    names = {rs.github.credentials_secret} if rs.github else set()
    if rs.buildkite is not None and rs.buildkite.api_token_secret:
        names.add(rs.buildkite.api_token_secret)
    return names
