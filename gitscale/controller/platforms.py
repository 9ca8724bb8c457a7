"""One adapter per platform behind the same four verbs, and where the loop gets them.

``env`` (what the runner container needs), ``register`` (GitHub: a JIT config; Buildkite: none),
``unregister`` (GitHub: DELETE the runner; ``RunnerBusy`` on 422) and ``registered`` (GitHub's
runner list by id, for idle and busy; None when the platform cannot say).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, Callable, Protocol

from gitscale.controller.buildkite import Buildkite
from gitscale.controller.github import (
    LIST_MAX_AGE,
    GitHub,
    Registration,
    credentials_from,
    scope_of,
)
from gitscale.controller.observe import GitHubSettings, Registered, RunnerSetView

CREDENTIALS_MAX_AGE = 300.0  # seconds before a credentials Secret is read again


class Platform(Protocol):
    def env(self, name: str) -> list[dict[str, Any]]: ...

    def register(self, name: str) -> Registration | None: ...

    def unregister(self, runner_id: int) -> None: ...

    def registered(self) -> Mapping[int, Registered] | None: ...


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

    def registered(self) -> Mapping[int, Registered]:
        return {i: Registered(r.online, r.busy, r.name, r.labels)
                for i, r in self.client.runners(self.list_max_age).items()}


SecretReader = Callable[[str, str], Mapping[str, str]]


class Platforms:
    """Adapters by RunnerSet, with GitHub clients (and their tokens) reused across passes."""

    def __init__(self, read_secret: SecretReader, *, list_max_age: float = LIST_MAX_AGE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._read_secret = read_secret
        self._list_max_age = list_max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._github: dict[tuple[str, str, str], tuple[float, GitHub]] = {}

    def for_set(self, rs: RunnerSetView) -> Platform:
        if rs.buildkite is not None:
            return Buildkite(rs.buildkite)
        assert rs.github is not None
        return GitHubRunners(self._client(rs.namespace, rs.github), rs.github, self._list_max_age)

    def forget(self, rs: RunnerSetView) -> None:
        """Drop a set's client, e.g. after GitHub refused its credentials: read them again."""
        if rs.github is not None:
            with self._lock:
                old = self._github.pop(self._key(rs.namespace, rs.github), None)
            if old is not None:
                old[1].close()

    def close(self) -> None:
        with self._lock:
            clients, self._github = list(self._github.values()), {}
        for _, client in clients:
            client.close()

    @staticmethod
    def _key(namespace: str, settings: GitHubSettings) -> tuple[str, str, str]:
        return (namespace, settings.credentials_secret, settings.config_url)

    def _client(self, namespace: str, settings: GitHubSettings) -> GitHub:
        key = self._key(namespace, settings)
        with self._lock:
            cached = self._github.get(key)
        if cached is not None and self._clock() - cached[0] < CREDENTIALS_MAX_AGE:
            return cached[1]
        source = f"Secret {namespace}/{settings.credentials_secret}"
        data = self._read_secret(namespace, settings.credentials_secret)
        client = GitHub(scope_of(settings.config_url), credentials_from(data, source))
        with self._lock:
            # A replaced client may still serve a pass in flight: it is left to the GC.
            self._github[key] = (self._clock(), client)
        return client
