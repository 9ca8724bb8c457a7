"""The platform registry: ``spec.platform`` → everything the controller does differently for it.

One line per platform. The CRD's ``platform`` enum and its ``spec.<name>`` schemas, the parsing
of a RunnerSet, the pod defaults, the busy rule, the ``BusyKnown`` condition and the adapter
all come from this map; a platform not in it is an explicit "unsupported" error. Importing it
imports no HTTP client: each platform imports its own when a set of it is served.

``Platforms`` keeps the adapters' API clients (and their tokens) across passes, and the
credentials they were refused (``refusals.py``: given time, tried again at once when their
Secret changes). Both go when no set uses their key any more: a set deleted, or moved to
another credentials Secret (each key counts the sets whose adapter got it last, so a pass that
got what its set had costs no scan of the other sets).
"""
from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Mapping
from typing import Callable, NamedTuple

from gitscale.controller.errors import (
    ControllerError,
    CredentialsError,
    CredentialsMissing,
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
from gitscale.controller.refusals import (
    Key,
    Refusals,
    SecretKey,
    StillRefused,
    Withholding,
    digest,
)

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


class _Made(NamedTuple):
    at: float  # clock() when it was made
    client: Client
    secrets: Mapping[SecretKey, str]  # the Secrets it was made from (digests)
    serial: int  # the client's number (``Refusals`` names a client by it, never holds it)


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
        self._clients: dict[Key, _Made] = {}
        self._refusals = Refusals(clock)
        self._used: dict[str, dict[Key, _Made | None]] = {}  # set → the clients its adapter got
        self._users: dict[Key, int] = {}  # key → how many sets' ``_used`` hold it
        self._making = threading.local()  # the Secrets a ``make`` of this thread read
        self._serials = itertools.count(1)

    def for_set(self, rs: RunnerSetView) -> Adapter:
        """The set's adapter. A set being deleted whose credentials can no longer be read (its
        Secret pruned with it, its namespace being deleted) keeps the client it last had: the
        token it holds still serves to unregister the set's runners."""
        used = _Used(self)
        try:
            return rs.kind.adapter(used, rs.namespace, rs.settings)
        except CredentialsError as exc:
            if not rs.deleting:
                raise
            return rs.kind.adapter(_LastRead(self, exc), rs.namespace, rs.settings)
        finally:
            self._note(rs.key, used.got)

    def read_secret(self, namespace: str, name: str) -> Mapping[str, str]:
        data = self._read_secret(namespace, name)
        reads = getattr(self._making, "reads", None)
        if reads is not None:  # (a client being made from it: ``cached``)
            reads[(namespace, name)] = digest(data)
        return data

    def made_from(self, set_key: str) -> str:
        """A digest of the credentials the set's adapter was last made with (the Secrets its
        clients read): a rotated credential changes it ("" when it has none)."""
        with self._lock:
            got = self._used.get(set_key) or {}
            return "".join(sorted(d for made in got.values() if made is not None
                                  for d in made.secrets.values()))

    def forget_set(self, set_key: str) -> None:
        """The set is gone: what its adapter got is not kept (it held the set's last clients,
        which a long-running controller would keep for every set ever deleted), nor the
        clients and refusals of the keys no other set uses."""
        self._note(set_key, None)

    def _note(self, set_key: str, got: dict[Key, _Made | None] | None) -> None:
        """What the set's adapter got this pass (None: the set is gone). A key no set uses
        any more — its last set deleted, or moved to another credentials Secret — loses its
        client and its refusal: a long-running controller would keep the HTTP client and the
        token of every Secret a set ever used. The client is not closed: a pass in flight may
        still hold it (one of a set whose adapter is being made); like a replaced client, it
        is left to the GC."""
        with self._lock:
            had = self._used.pop(set_key, None) if got is None else self._used.get(set_key)
            if got is not None:
                self._used[set_key] = got
            if had is not None and got is not None and had.keys() == got.keys():
                return  # (the same keys as its last pass: nothing to count)
            for key in got or ():
                self._users[key] = self._users.get(key, 0) + 1
            unused = []
            for key in had or ():
                left = self._users.get(key, 0) - 1
                if left > 0:
                    self._users[key] = left
                else:
                    self._users.pop(key, None)
                    self._clients.pop(key, None)
                    unused.append(key)
            if unused:  # (a refusal no set meets is not kept either: under the lock, so that
                # a pass noting the key again meanwhile cannot have its new refusal forgotten;
                # Refusals' own lock is never held while this one is taken)
                self._refusals.forget(unused)

    def refused(self, rs: RunnerSetView, exc: ControllerError) -> None:
        """A call of the set's adapter failed with ``exc``. Credentials refused: its clients
        are dropped, so that the next pass reads the Secret again (it may be fixed), and the
        clients the set's adapter got are not made again before a backoff unless the Secret
        changed (``refusals.py``) — unless the set is being deleted, whose client is the last
        it may get (``for_set``). A permission refused (a kind of call: ``exc.call``) leaves
        the credential working: its clients serve on (a GitHub App's installation token, the
        runner list), told to make no call of that kind before the backoff is over
        (``Withholding``) — a new client would cost a token exchange per refused attempt. A
        rotated Secret is still tried at once (``Refusals.rotated``), and a permission granted
        on an App's installation is in the token of the next client made (its Secret read
        again every ``CREDENTIALS_MAX_AGE``)."""
        if not isinstance(exc, CredentialsError) or rs.deleting:
            return
        if isinstance(exc, StillRefused) and exc.call is not None:
            return  # a kind of call withheld, not asked: nothing new, the client serves on
        kept = exc.call is not None and not isinstance(exc, (StillRefused, CredentialsMissing))
        if not isinstance(exc, (StillRefused, CredentialsMissing)):
            with self._lock:
                got = dict(self._used.get(rs.key) or {})
            for key, made in got.items():
                if made is None:
                    continue
                wait, said = self._refusals.refused(key, made.serial, made.client,
                                                    made.secrets, exc, rs.key)
                if exc.call is not None and isinstance(made.client, Withholding):
                    made.client.withhold({exc.call}, said, wait)
                else:
                    kept = False
        if not kept:
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
        for made in clients:
            made.client.close()

    def cached(self, key: Key, make: Callable[[], Client]) -> Client:
        return self._cached(key, make).client

    def _cached(self, key: Key, make: Callable[[], Client]) -> _Made:
        with self._lock:
            cached = self._clients.get(key)
        if cached is not None and self.clock() - cached.at < CREDENTIALS_MAX_AGE and not (
                self._refusals.rotated(key, self._read_secret)):
            self._refusals.accepted(key, cached.serial, cached.client)
            return cached
        # refused before: ``StillRefused``, or the kinds of call to withhold (a permission)
        withheld, message, left = self._refusals.check(key, self._read_secret)
        self._making.reads = {}
        try:
            client = make()
        except KubeError:
            if cached is None:
                raise
            # the Secret could not be read this time (a timeout, the API server restarting):
            # the client read before still serves, and the Secret is read again next pass
            return cached
        finally:
            reads, self._making.reads = self._making.reads, None
        if cached is not None and isinstance(client, Successor):
            client.take_over(cached.client)
        if withheld and isinstance(client, Withholding):
            client.withhold(withheld, message, left)
        made = _Made(self.clock(), client, reads, next(self._serials))
        with self._lock:
            # A replaced client may still serve a pass in flight: it is left to the GC.
            self._clients[key] = made
        return made


class _Used:
    """``Platforms`` for one set's adapter, noting the clients it got (``got``): those a
    refusal of the set's credentials is about (``Platforms.refused``)."""

    def __init__(self, platforms: Platforms) -> None:
        self._platforms = platforms
        self.clock = platforms.clock
        self.got: dict[Key, _Made | None] = {}

    def read_secret(self, namespace: str, name: str) -> Mapping[str, str]:
        return self._platforms.read_secret(namespace, name)

    def cached(self, key: Key, make: Callable[[], Client]) -> Client:
        self.got[key] = None
        made = self._platforms._cached(key, make)
        self.got[key] = made
        return made.client


class _LastRead:
    """``Platforms`` for a set being deleted: the client it last had, however old (its Secret
    may be gone for good), else the refusal that brought it here."""

    def __init__(self, platforms: Platforms, refused: CredentialsError) -> None:
        self._platforms = platforms
        self._refused = refused  # what reading the credentials just said
        self.clock = platforms.clock

    def read_secret(self, namespace: str, name: str) -> Mapping[str, str]:
        return self._platforms.read_secret(namespace, name)

    def cached(self, key: Key, make: Callable[[], Client]) -> Client:
        with self._platforms._lock:
            cached = self._platforms._clients.get(key)
        if cached is None:  # (the Secret was just read, and refused: not read again)
            raise self._refused
        return cached.client
