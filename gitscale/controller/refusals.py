"""Credentials a platform refused (a 401 or 403: a revoked token, a GitHub App whose key was
revoked), given time rather than tried again by every pass.

A refusal drops the clients of the set's credentials Secret (``platforms.Platforms.refused``),
so that the next pass reads the Secret again: it may have been rotated. A refusal that lasts
then cost, on every pass of every set of the Secret, a Secret read, a new client and a request
of the platform — for a GitHub App a token exchange, so 2,880 failing exchanges a day per set
on a 30 s pass — and a log line each time Ready's message changed. Now the refusal is kept, by
client key (``platforms.Platforms.cached``):

- no client of the key is made, and nothing asked of the platform, before ``CREDENTIALS_RETRY``
  seconds, doubling with each client refused in a row up to ``CREDENTIALS_RETRY_MAX``: the pass
  meets ``StillRefused``, ``CredentialsRefused`` in Ready (the calls of one client refused in
  one pass are one refusal);
- unless the Secret changed: each pass meanwhile reads it (the API server, not the platform)
  and compares it with what the refused client was made from, so a new credential is tried at
  once (and a refusal of that one is said anew, its backoff starting over);
- a client made after the refusal that the platform accepts (``Vouched``) ends it.

A 401 (or an App's token exchange refused) refuses the credential: all of the above. A 403
refuses a permission, for one kind of call (``CredentialsError.call``: an App with "Self-hosted
runners: Read" lists runners, registers none): the client refused serves on (for a GitHub App,
its installation token: no exchange per refused attempt), and so do clients made meanwhile;
only calls of that kind wait out the backoff (``Withholding``; the list and the
unregistrations go on), and only such a call answered ends it — a read does not vouch for a
refused write, nor an answer from before the refusal. A refusal names its client by a
serial, never holds it (its connections), and goes with the last set that used its key
(``forget``).

The log says it once per streak (``gitscale.streak.Streak``): when it starts, when the error
changes, every ``REMIND_EVERY`` seconds while it lasts, and when the credentials are accepted
again.
"""
from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Callable, Protocol, runtime_checkable

from gitscale.controller.errors import ControllerError, CredentialsError, KubeError
from gitscale.controller.workqueue import RETRY
from gitscale.streak import Streak, duration
from gitscale.timeutil import backoff

log = logging.getLogger("gitscale.controller")
# Seconds before refused credentials are tried again: a failing pass's retry (the work
# queue's), doubling with each refusal in a row up to CREDENTIALS_RETRY_MAX.
CREDENTIALS_RETRY = RETRY
CREDENTIALS_RETRY_MAX = 300.0

Key = tuple[str, ...]  # a client's: (platform, namespace, Secret name, …)
SecretKey = tuple[str, str]  # (namespace, name)
Reader = Callable[[str, str], Mapping[str, str]]


@runtime_checkable
class Vouched(Protocol):
    """A client that says whether the platform accepted its credentials for a kind of call:
    answered one of its calls of that kind with anything but a refusal (``call`` None: any
    call — a refused credential works again once anything is answered; a permission refused
    — a 403 on registering runners, say — only once a call of that kind is)."""

    def vouches(self, call: str | None) -> bool: ...


@runtime_checkable
class Withholding(Protocol):
    """A client that can be told to make no call of some kinds for a while: those a permission
    was refused for, whose backoff runs (each raises ``StillRefused`` unsent)."""

    def withhold(self, calls: Collection[str], message: str, seconds: float) -> None: ...


class StillRefused(CredentialsError):
    """The credentials were refused, their wait is not over and their Secret has not changed:
    no client made (or, for a permission refused, no call of that kind made), nothing asked.
    ``after``: seconds until they are tried again."""

    def __init__(self, message: str, after: float, call: str | None = None) -> None:
        super().__init__(message, call)
        self.after = after


def digest(data: Mapping[str, str]) -> str:
    """What a Secret holds, as a digest (the values are credentials: not kept)."""
    return hashlib.sha256(json.dumps(dict(data), sort_keys=True).encode()).hexdigest()


@dataclass
class _Refusal:
    secrets: Mapping[SecretKey, str]  # what the refused client was made from (digests)
    client: int  # the serial of the client refused last (``Platforms``: not the client,
    # which would keep its connections): its other refusals are not counted again
    calls: set[str | None]  # what was refused: None the credential, else kinds of call
    message: str  # the platform's refusal
    until: float  # clock() before which nothing refused is asked again
    streak: Streak  # the refusals in a row (and what the log said of them)
    tries: int = 0  # of them, since the Secret last changed: the backoff's step


class Refusals:
    """By client key; thread-safe (the passes of every set of a Secret share it). A client is
    named by a serial (``Platforms``: one per client made), never held."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._by_key: dict[Key, _Refusal] = {}

    def check(self, key: Key, read: Reader) -> tuple[set[str], str, float]:
        """Before a client of ``key`` is made: ``StillRefused`` while the refusal of its
        credential waits and the Secrets it was made from hold what they held (``read`` reads
        one again). Else the kinds of call whose permission was refused and is still waited
        for, with the refusal and the seconds left (``Withholding``): the client is made, its
        other calls go on."""
        with self._lock:
            refusal = self._by_key.get(key)
            if refusal is None:
                return set(), "", 0.0
            left = refusal.until - self._clock()
            calls = set(refusal.calls)
        if left <= 0:
            return set(), "", 0.0  # tried again
        if _changed(refusal.secrets, read):
            self._anew(refusal)
            return set(), "", 0.0
        if None not in calls:
            return {c for c in calls if c is not None}, self.said(refusal), left
        raise StillRefused(self.said(refusal), left)

    def rotated(self, key: Key, read: Reader) -> bool:
        """Before a client of ``key`` made earlier is reused: while a refusal of it waits,
        whether its Secret changed (then it is tried at once, by a new client)."""
        with self._lock:
            refusal = self._by_key.get(key)
            if refusal is None or refusal.until <= self._clock():
                return False
        if not _changed(refusal.secrets, read):
            return False
        self._anew(refusal)
        return True

    def _anew(self, refusal: _Refusal) -> None:
        """Its Secret changed: tried at once; a refusal of the new value is said anew."""
        with self._lock:
            refusal.until, refusal.tries, refusal.streak.said = 0.0, 0, None

    @staticmethod
    def said(refusal: _Refusal) -> str:
        names = ", ".join(f"{ns}/{name}" for ns, name in refusal.secrets) or "its Secret"
        return (f"{refusal.message} (credentials refused: tried again after a backoff of up to "
                f"{duration(CREDENTIALS_RETRY_MAX)}, at once when Secret {names} changes)")

    def refused(self, key: Key, serial: int, client: object, secrets: Mapping[SecretKey, str],
                error: CredentialsError, who: str) -> tuple[float, str]:
        """``client`` (number ``serial``) of ``key``, made from ``secrets``, was refused
        (``error``: its ``call``, what was refused) in a pass of set ``who``: back off, and say
        so when the streak wants it said. Returns the seconds of the backoff, and what a call
        withheld meanwhile says (``Withholding``)."""
        with self._lock:
            refusal = self._by_key.get(key)
            if refusal is not None and refusal.client == serial and \
                    self._clock() < refusal.until:
                # (counted: another call of the same client, sent before its backoff began;
                # a client kept after a permission refused is refused anew once it is over)
                refusal.calls.add(error.call)
                return max(refusal.until - self._clock(), 0.0), self.said(refusal)
            if refusal is not None and isinstance(client, Vouched):
                # what the client had answered is no longer refused: a refused credential that
                # answered anything, a refused permission that answered a call of its kind
                refusal.calls = _unanswered(refusal.calls, client)
                if not refusal.calls:
                    refusal = None  # accepted since the last refusal: a new streak
            if refusal is None:
                refusal = _Refusal(secrets, serial, set(), str(error), 0.0,
                                   Streak(clock=self._clock))
                self._by_key[key] = refusal
            refusal.secrets, refusal.client, refusal.message = secrets, serial, str(error)
            refusal.calls.add(error.call)
            say = refusal.streak.failed(str(error))
            count = refusal.streak.count
            refusal.tries += 1
            wait = backoff(CREDENTIALS_RETRY, refusal.tries - 1, CREDENTIALS_RETRY_MAX)
            refusal.until = self._clock() + wait
            lasted = refusal.streak.lasted()
            said = self.said(refusal)
        if say:
            again = f" (still, {count} refusals in a row over {lasted})" if count > 1 else ""
            log.warning("%s: credentials refused%s: %s; tried again in %s, or at once when "
                        "their Secret changes", who, again, error, duration(wait))
        return wait, said

    def accepted(self, key: Key, serial: int, client: object) -> None:
        """A client of ``key`` is in use: if it was made after a refusal — or it is the client
        refused, kept after a permission refused, and its backoff is over — and the platform
        has accepted it for what was refused since (``Vouched``), the streak is over (said
        once)."""
        with self._lock:
            refusal = self._by_key.get(key)
            if refusal is None or not isinstance(client, Vouched) or (
                    refusal.client == serial and self._clock() < refusal.until):
                return
            refusal.calls = _unanswered(refusal.calls, client)
            if refusal.calls:
                return  # (what was refused is still refused, or not asked yet)
            del self._by_key[key]
            ended = refusal.streak.ended()
        if ended is not None:
            log.info("%s: credentials accepted again, after %d refusal(s) over %s",
                     "/".join(key[1:3]), *ended)

    def forget(self, keys: Collection[Key]) -> None:
        """The refusals of ``keys`` are not kept: no set uses their clients any more."""
        with self._lock:
            for key in keys:
                self._by_key.pop(key, None)


def _unanswered(calls: set[str | None], client: Vouched) -> set[str | None]:
    """What was refused that ``client`` has not had answered since."""
    return {call for call in calls if not client.vouches(call)}


def _changed(secrets: Mapping[SecretKey, str], read: Reader) -> bool:
    """Does a Secret hold something else than when its digest was taken? Not when it cannot
    be read this time (the refusal is what is known); yes when it is gone or unreadable (the
    client made next says why)."""
    for (namespace, name), seen in secrets.items():
        try:
            if digest(read(namespace, name)) != seen:
                return True
        except KubeError:
            continue
        except ControllerError:
            return True
    return False
