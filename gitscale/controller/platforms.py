"""The platform registry: ``spec.platform`` → everything the controller does differently for it.

One line per platform. The CRD's ``platform`` enum and its ``spec.<name>`` schemas, the parsing
of a RunnerSet, the pod defaults, the busy rule, the ``BusyKnown`` condition and the adapter
all come from this map; a platform not in it is an explicit "unsupported" error. Importing it
imports no HTTP client: each platform imports its own when a set of it is served.

``Platforms`` keeps the adapters' API clients (and their tokens) across passes.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Callable

from gitscale.controller.errors import (
    ControllerError,
    CredentialsError,
    KubeError,
    UnsupportedPlatform,
)
from gitscale.controller.observe import RunnerSetView
from gitscale.controller.platform import (
    LIST_MAX_AGE,
    STATUS_LIST_MAX_AGE,
    Adapter,
    Client,
    Kind,
    SecretReader,
    Successor,
)
from gitscale.controller.platform_buildkite import BUILDKITE
from gitscale.controller.platform_github import GITHUB

PLATFORMS: Mapping[str, Kind] = {kind.name: kind for kind in (
    GITHUB,
    BUILDKITE,
)}

CREDENTIALS_MAX_AGE = 300.0  # seconds before a credentials Secret is read again


def kind_of(name: object) -> Kind:
    """The registry's entry for ``spec.platform``; ``UnsupportedPlatform`` for any other."""
    kind = PLATFORMS.get(name) if isinstance(name, str) else None
    if kind is None:
        raise UnsupportedPlatform(f"spec.platform {name!r} is not one of "
                                  f"{', '.join(PLATFORMS)}: this platform is not supported")
    return kind


class Platforms:
    """Adapters by RunnerSet, with API clients (and their tokens) reused across passes.

    ``list_max_age`` and ``status_list_max_age`` (4 × the first unless given): how old a
    platform's runner list may be for a pass that may remove a running runner, and for any
    other pass (``platform.LIST_MAX_AGE``)."""

    def __init__(self, read_secret: SecretReader, *, list_max_age: float = LIST_MAX_AGE,
                 status_list_max_age: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._read_secret = read_secret
        self.list_max_age = list_max_age
        self.status_list_max_age = (status_list_max_age if status_list_max_age is not None
                                    else list_max_age * STATUS_LIST_MAX_AGE / LIST_MAX_AGE)
        self.clock = clock
        self._lock = threading.Lock()
        self._clients: dict[tuple[str, ...], tuple[float, Client]] = {}

    def for_set(self, rs: RunnerSetView) -> Adapter:
        """The set's adapter. A set being deleted whose credentials can no longer be read (its
        Secret pruned with it, its namespace being deleted) keeps the client it last had: the
        token it holds still serves to unregister the set's runners."""
        try:
            return rs.kind.adapter(self, rs.namespace, rs.settings)
        except CredentialsError as exc:
            if not rs.deleting:
                raise
            return rs.kind.adapter(_LastRead(self, exc), rs.namespace, rs.settings)

    def read_secret(self, namespace: str, name: str) -> Mapping[str, str]:
        return self._read_secret(namespace, name)

    def refused(self, rs: RunnerSetView, exc: ControllerError) -> None:
        """A call of the set's adapter failed with ``exc``. Credentials refused: its clients
        are dropped, so the next pass reads the Secret again (it may be fixed) — unless the
        set is being deleted, whose client is the last it may get (``for_set``)."""
        if isinstance(exc, CredentialsError) and not rs.deleting:
            self._forget(rs)

    def _forget(self, rs: RunnerSetView) -> None:
        """Drop a set's clients: its credentials are read again. They are not closed: the
        pass that was refused still holds its adapter (it goes on to create runners, which
        then fail as refused too), and passes of other sets of the same Secret may be using
        them; like a replaced client, they are left to the GC."""
        secrets = rs.kind.secrets(rs.settings)
        with self._lock:
            for key in [k for k in self._clients if k[1] == rs.namespace and k[2] in secrets]:
                del self._clients[key]

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for _, client in clients:
            client.close()

    def cached(self, key: tuple[str, ...], make: Callable[[], Client]) -> Client:
        with self._lock:
            cached = self._clients.get(key)
        if cached is not None and self.clock() - cached[0] < CREDENTIALS_MAX_AGE:
            return cached[1]
        try:
            client = make()
        except KubeError:
            if cached is None:
                raise
            # the Secret could not be read this time (a timeout, the API server restarting):
            # the client read before still serves, and the Secret is read again next pass
            return cached[1]
        if cached is not None and isinstance(client, Successor):
            client.take_over(cached[1])
        with self._lock:
            # A replaced client may still serve a pass in flight: it is left to the GC.
            self._clients[key] = (self.clock(), client)
        return client


class _LastRead:
    """``Platforms`` for a set being deleted: the client it last had, however old (its Secret
    may be gone for good), else the refusal that brought it here."""

    def __init__(self, platforms: Platforms, refused: CredentialsError) -> None:
        self._platforms = platforms
        self._refused = refused  # what reading the credentials just said
        self.clock = platforms.clock

    def read_secret(self, namespace: str, name: str) -> Mapping[str, str]:
        return self._platforms.read_secret(namespace, name)

    def cached(self, key: tuple[str, ...], make: Callable[[], Client]) -> Client:
        with self._platforms._lock:
            cached = self._platforms._clients.get(key)
        if cached is None:  # (the Secret was just read, and refused: not read again)
            raise self._refused
        return cached[1]
