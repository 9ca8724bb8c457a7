"""What passes learn that the cluster does not hold, kept in the controller process.

Runners GitHub called busy (a 422 on unregister), runners seen online, the sets whose last creations were refused
(slow start, and the backoff before the next try), JIT Secrets whose handover to their pod
failed, registrations suspected to be crash leftovers (seen with no pod; removed once they
stay so for a grace period), pods whose creation got no answer and could not be looked for
(the next pass looks again before it counts the set's runners), and when each set's Secrets
were last swept. All of it may be
lost on a restart (or a change of leader): each item only saves API calls or delays an
action, and is learnt again — the Secrets whose handover failed, by the next sweep of the
set's labelled Secrets (``leftovers.sweep_secrets``).
"""
from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class Refusal:
    """A set's creations refused ``count`` passes in a row: none is tried before ``until``
    unless the pods would be made otherwise (``shape``: a digest of the template and the
    platform's settings); ``message`` and ``reason`` (the Ready reason) say why, meanwhile."""

    count: int
    until: datetime
    message: str
    reason: str
    shape: str = ""


class Memory:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy: dict[str, dict[str, datetime]] = {}
        self._said: dict[str, set[str]] = {}
        self._online: dict[str, set[str]] = {}
        self._unowned: dict[str, set[str]] = {}
        self._refused: dict[str, Refusal] = {}
        self._suspects: dict[str, dict[int, datetime]] = {}
        self._swept: dict[str, datetime] = {}
        self._secrets_swept: dict[str, datetime] = {}
        self._said_of: dict[tuple[str, str], str] = {}
        self._maybe: dict[str, set[str]] = {}

    # -- refused creations: slow start and backoff -------------------------------------------
    def refusal(self, set_key: str) -> Refusal | None:
        """The set's last creations were refused (None: they were not, or it was never tried)."""
        with self._lock:
            return self._refused.get(set_key)

    def set_refusal(self, set_key: str, refusal: Refusal | None) -> None:
        with self._lock:
            if refusal is None:
                self._refused.pop(set_key, None)
            else:
                self._refused[set_key] = refusal

    def forget(self, set_key: str) -> None:
        """The set is gone."""
        self.keep_only(set_key, set())
        self.set_refusal(set_key, None)
        with self._lock:
            self._suspects.pop(set_key, None)
            self._swept.pop(set_key, None)
            self._secrets_swept.pop(set_key, None)
            for topic in [t for t in self._said_of if t[0] == set_key]:
                del self._said_of[topic]
            self._unowned.pop(set_key, None)  # (the set's Secrets go with it)
            self._maybe.pop(set_key, None)

    # -- pods whose creation got no answer, not found nor ruled out yet ------------------------
    def maybe_created(self, set_key: str, pod: str) -> None:
        with self._lock:
            self._maybe.setdefault(set_key, set()).add(pod)

    def maybe_created_of(self, set_key: str) -> list[str]:
        with self._lock:
            return sorted(self._maybe.get(set_key, set()))

    def known(self, set_key: str, pod: str) -> None:
        """Whether ``pod`` exists is known now (it is in the cache, or it is not stored)."""
        with self._lock:
            names = self._maybe.get(set_key, set())
            names.discard(pod)
            if not names:
                self._maybe.pop(set_key, None)

    # -- JIT Secrets not handed to their pod (still the set's) --------------------------------
    def unowned(self, set_key: str) -> list[str]:
        with self._lock:
            return sorted(self._unowned.get(set_key, set()))

    def secret_sweep_due(self, set_key: str, now: datetime, every: timedelta) -> bool:
        """Look for the set's Secrets left behind now? On its first pass here (a new process,
        a new leader), then every ``every``; True records the sweep."""
        with self._lock:
            last = self._secrets_swept.get(set_key)
            if last is not None and now - last < every:
                return False
            self._secrets_swept[set_key] = now
            return True

    def leading(self) -> None:
        """This replica took the Lease: every set's Secrets are swept on its next pass (the
        replica that led meanwhile may have left some)."""
        with self._lock:
            self._secrets_swept.clear()

    def say(self, set_key: str, topic: str, message: str) -> bool:
        """Say ``message`` about the set's ``topic`` now? True when it is not what was said
        last (an empty message says the trouble is over: never said, but remembered)."""
        with self._lock:
            before = self._said_of.get((set_key, topic), "")
            self._said_of[(set_key, topic)] = message
            return bool(message) and message != before

    def add_unowned(self, set_key: str, name: str) -> None:
        with self._lock:
            self._unowned.setdefault(set_key, set()).add(name)

    def owned(self, set_key: str, name: str) -> None:
        with self._lock:
            self._unowned.get(set_key, set()).discard(name)

    # -- runners GitHub called busy ----------------------------------------------------------
    def busy_until(self, set_key: str, pod: str) -> datetime | None:
        with self._lock:
            return self._busy.get(set_key, {}).get(pod)

    def mark_busy(self, set_key: str, pod: str, until: datetime) -> bool:
        """Remember; True the first time for this runner (say it once)."""
        with self._lock:
            self._busy.setdefault(set_key, {})[pod] = until
            said = self._said.setdefault(set_key, set())
            first = pod not in said
            said.add(pod)
            return first

    def keep_only(self, set_key: str, pods: set[str]) -> None:
        """Forget runners that are gone (all of them when the set is gone)."""
        with self._lock:
            busy = self._busy.get(set_key, {})
            for pod in [p for p in busy if p not in pods]:
                busy.pop(pod, None)
            for seen in (self._said.get(set_key, set()), self._online.get(set_key, set())):
                seen.intersection_update(pods)
            if not pods:
                self._busy.pop(set_key, None)
                self._said.pop(set_key, None)
                self._online.pop(set_key, None)

    # -- runners seen online (the registration timeout is for those never seen so) ----------
    def came_online(self, set_key: str, pod: str) -> bool:
        with self._lock:
            return pod in self._online.get(set_key, set())

    def mark_online(self, set_key: str, pod: str) -> None:
        with self._lock:
            self._online.setdefault(set_key, set()).add(pod)

    # -- crash leftovers: registrations with no pod ------------------------------------------
    def sweep_due(self, set_key: str, now: datetime, every: timedelta) -> bool:
        """Look for leftovers now? On a set's first pass, every ``every``, and while suspects
        wait for their grace period to end."""
        with self._lock:
            last = self._swept.get(set_key)
            return last is None or now - last >= every or bool(self._suspects.get(set_key))

    def suspect(self, set_key: str, runner_ids: Iterable[int], now: datetime,
                grace: timedelta) -> tuple[list[int], float | None]:
        """Record the registrations seen without a pod in this sweep. Returns those seen so for
        ``grace`` (to remove now), and the seconds until the next one's grace ends (or None)."""
        with self._lock:
            self._swept[set_key] = now
            seen = self._suspects.get(set_key, {})
            current = {i: seen.get(i, now) for i in runner_ids}
            ripe = sorted(i for i, first in current.items() if now - first >= grace)
            waiting = {i: t for i, t in current.items() if i not in ripe}
            self._suspects[set_key] = waiting
            wake = min((t + grace - now).total_seconds() for t in waiting.values()) \
                if waiting else None
            return ripe, wake
