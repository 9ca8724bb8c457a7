"""Leader election with a ``coordination.k8s.io/v1`` Lease, as client-go does it.

Every replica runs its informers; only the holder of the Lease acts. A candidate takes the
Lease when it is free (no holder, or released) or when its holder has not renewed it for the
lease duration, *as observed by the candidate's own clock* (from the moment it saw the record
change: clocks of different nodes are never compared). Every write is conditional on the
resourceVersion read, so two candidates racing for it cannot both win.

The leader renews every ``retry`` seconds. One that has not renewed for ``renew_deadline``
(< ``duration``) stops acting at once (``on_stop``): creations not yet started are skipped. The
deadline is kept by a timer, not by the renewal loop, so a renewal stuck on a black-holed
connection cannot keep a leader acting; and each Lease call has a timeout of the time left
until the deadline, so the loop comes back to try again. A candidate waits for ``duration``
after the last renewal it saw, so the old leader has stopped at least ``duration -
renew_deadline`` before a new one starts. On a clean stop the leader releases the Lease (empty
holder), so the other replica takes over without waiting.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Literal

from gitscale.controller.errors import Conflict, ControllerError, KubeError
from gitscale.controller.kube import Kube
from gitscale.controller.observe import RawObject
from gitscale.timeutil import format_micro_time as micro_time, utcnow

log = logging.getLogger("gitscale.controller")


@dataclass(frozen=True)
class LeaseConfig:
    namespace: str
    identity: str
    name: str = "gitscale-controller"
    duration: int = 15  # seconds a lease holds without renewal (whole seconds, as the API)
    renew_deadline: float = 10.0  # a leader unable to renew for this long stops acting
    retry: float = 2.0  # seconds between attempts (and renewals)

    def __post_init__(self) -> None:
        if not 0 < self.retry < self.renew_deadline < self.duration:
            raise ValueError("leader election needs retry < renew deadline < lease duration")


Outcome = Literal["ours", "theirs", "unknown"]  # of one attempt: unknown = the API failed
MIN_CALL_TIMEOUT = 0.05  # seconds: a call with less left before the deadline fails at once


class _Term:
    """One spell as leader: until ``deadline`` unless renewed; ``ended`` once given up."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.ended = False
        self.why = ""
        self.stopped = threading.Event()  # on_stop has returned


class LeaderElector:
    def __init__(self, kube: Kube, config: LeaseConfig, *, on_start: Callable[[], None],
                 on_stop: Callable[[], None], clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], datetime] = utcnow) -> None:
        self.kube = kube
        self.config = config
        self._on_start, self._on_stop = on_start, on_stop
        self._clock, self._wall = clock, wall
        self.leading = threading.Event()
        self._seen: tuple[str, float] | None = None  # (resourceVersion, when we saw it)
        # Why the last attempt failed (readiness: a replica that cannot take part in the
        # election is not ready), and whether the streak's refusal was said.
        self.problem: str | None = None
        self._said = False
        self._cv = threading.Condition()

    def run(self, stop: threading.Event, release: threading.Event) -> None:
        """Campaign, lead, and campaign again after losing, until ``stop``. Releases the Lease
        on the way out when ``release`` is set (a clean stop; not a simulated crash)."""
        cfg = self.config
        while not stop.is_set():
            asked = self._clock()
            if self._try(cfg.renew_deadline) != "ours":
                stop.wait(cfg.retry)
                continue
            self._lead(stop, asked)
            if stop.is_set():
                if release.is_set():
                    self._release()
                return

    def _lead(self, stop: threading.Event, acquired: float) -> None:
        """Act until the Lease is lost (another holder, or no renewal by the deadline, which a
        timer enforces) or ``stop``. Deadlines run from when the winning write was sent (the
        server recorded it later; an answer may come late)."""
        cfg = self.config
        term = _Term(acquired + cfg.renew_deadline)
        self.leading.set()
        log.info("leader election: %s leads (Lease %s/%s)", cfg.identity, cfg.namespace,
                 cfg.name)
        self._on_start()
        threading.Thread(target=self._watch, args=(term,), name="leader-deadline",
                         daemon=True).start()
        while not stop.wait(cfg.retry) and not term.ended:
            asked = self._clock()
            outcome = self._try(term.deadline - asked)
            if outcome == "ours":
                with self._cv:
                    if not term.ended:  # a late renewal after the deadline starts a new term
                        term.deadline = asked + cfg.renew_deadline
            elif outcome == "theirs":
                self._end(term, "another replica holds the Lease")
        self._end(term, "")
        term.stopped.wait()  # the timer may be stopping it: done before a next term starts
        if term.why:
            log.warning("leader election: %s stopped acting: %s", cfg.identity, term.why)

    def _watch(self, term: _Term) -> None:
        """The deadline's timer: give leadership up when no renewal came by then."""
        with self._cv:
            while not term.ended and (left := term.deadline - self._clock()) > 0:
                self._cv.wait(left)
        self._end(term, f"could not renew the Lease for {self.config.renew_deadline:g}s")

    def _end(self, term: _Term, why: str) -> None:
        """Stop acting (once per term): from the timer, or the loop."""
        with self._cv:
            if term.ended:
                return
            term.ended, term.why = True, why
            self.leading.clear()
            self._cv.notify_all()
        try:
            self._on_stop()
        finally:
            term.stopped.set()

    def _try(self, budget: float) -> Outcome:
        """Acquire or renew the Lease, within ``budget`` seconds."""
        cfg = self.config
        until = self._clock() + budget

        def timeout() -> float:
            return max(until - self._clock(), MIN_CALL_TIMEOUT)

        try:
            lease = self.kube.read_lease(cfg.namespace, cfg.name, timeout=timeout())
            if lease is None:
                self._note(self.kube.create_lease(self._body(None), timeout=timeout()))
                return self._answered("ours")
            self._note(lease)
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            if holder and holder != cfg.identity and not self._expired(spec):
                return self._answered("theirs")
            self._note(self.kube.replace_lease(self._body(lease), timeout=timeout()))
        except Conflict:
            return self._answered("theirs")  # another candidate wrote it since we read it
        except ControllerError as exc:
            self._refused(exc)
            return "unknown"
        return self._answered("ours")

    def _refused(self, exc: ControllerError) -> None:
        """A Lease call failed. A refusal (401, 403: the Role, the token) is said once a
        streak: it lasts until someone fixes it, and the elector tries again every ``retry``
        seconds meanwhile; an outage (no answer, a 5xx) is the informers' to say."""
        self.problem = str(exc)
        if isinstance(exc, KubeError) and exc.status in (401, 403) and not self._said:
            self._said = True
            log.warning("leader election: %s (this replica cannot lead, and is not ready, "
                        "until it can; tried again every %gs)", exc, self.config.retry)
        else:
            log.debug("leader election: %s", exc)

    def _answered(self, outcome: Outcome) -> Outcome:
        if self._said:
            log.info("leader election: the Lease %s/%s can be read and written again",
                     self.config.namespace, self.config.name)
        self.problem, self._said = None, False
        return outcome

    def _expired(self, spec: dict[str, Any]) -> bool:
        assert self._seen is not None
        duration = spec.get("leaseDurationSeconds")
        seconds = float(duration) if isinstance(duration, int) else self.config.duration
        return self._clock() - self._seen[1] >= seconds

    def _note(self, lease: RawObject) -> None:
        version = str((lease.get("metadata") or {}).get("resourceVersion", ""))
        if self._seen is None or self._seen[0] != version:
            self._seen = (version, self._clock())

    def _body(self, current: RawObject | None) -> RawObject:
        cfg, now = self.config, micro_time(self._wall())
        old = (current or {}).get("spec") or {}
        ours = old.get("holderIdentity") == cfg.identity
        transitions = int(old.get("leaseTransitions") or 0) + (0 if ours or current is None
                                                               else 1)
        meta: dict[str, Any] = {"name": cfg.name, "namespace": cfg.namespace}
        if current is not None:
            meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                "spec": {"holderIdentity": cfg.identity,
                         "leaseDurationSeconds": cfg.duration,
                         "acquireTime": old.get("acquireTime") if ours else now,
                         "renewTime": now, "leaseTransitions": transitions}}

    def _release(self) -> None:
        """Give the Lease up (only if it is still ours): the other replica need not wait."""
        cfg = self.config
        try:
            lease = self.kube.read_lease(cfg.namespace, cfg.name, timeout=cfg.retry)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != cfg.identity:
                return
            spec = {**(lease.get("spec") or {}), "holderIdentity": "",
                    "leaseDurationSeconds": 1, "renewTime": micro_time(self._wall())}
            self.kube.replace_lease({**lease, "spec": spec}, timeout=cfg.retry)
            log.info("leader election: %s released the Lease", cfg.identity)
        except ControllerError as exc:
            log.warning("leader election: could not release the Lease: %s", exc)
