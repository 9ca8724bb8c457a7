"""Leader election with a ``coordination.k8s.io/v1`` Lease, as client-go does it.

Every replica runs its informers; only the holder of the Lease acts. A candidate takes the
Lease when it is free (no holder, or released) or when its holder has not renewed it for the
lease duration, *as observed by the candidate's own clock* (from the moment it saw the record
change: clocks of different nodes are never compared). Every write is conditional on the
resourceVersion read, so two candidates racing for it cannot both win.

The leader renews every ``retry`` seconds. One that has not renewed for ``renew_deadline``
(< ``duration``) stops acting at once (``on_stop``): creations not yet started are skipped. A
candidate waits for ``duration`` after the last renewal it saw, so the old leader has stopped
at least ``duration - renew_deadline`` before a new one starts. On a clean stop the leader
releases the Lease (empty holder), so the other replica takes over without waiting.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Literal

from gitscale.controller.errors import Conflict, ControllerError
from gitscale.controller.kube import Kube
from gitscale.controller.observe import RawObject
from gitscale.timeutil import utcnow

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


def micro_time(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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

    def run(self, stop: threading.Event, release: threading.Event) -> None:
        """Campaign, lead, and campaign again after losing, until ``stop``. Releases the Lease
        on the way out when ``release`` is set (a clean stop; not a simulated crash)."""
        cfg = self.config
        while not stop.is_set():
            if self._try() != "ours":
                stop.wait(cfg.retry)
                continue
            renewed = self._clock()
            self.leading.set()
            log.info("leader election: %s leads (Lease %s/%s)", cfg.identity, cfg.namespace,
                     cfg.name)
            self._on_start()
            outcome: Outcome = "ours"
            while not stop.wait(cfg.retry):
                outcome = self._try()
                if outcome == "ours":
                    renewed = self._clock()
                elif outcome == "theirs" or self._clock() - renewed >= cfg.renew_deadline:
                    break
            self.leading.clear()
            self._on_stop()
            if stop.is_set():
                if release.is_set():
                    self._release()
                return
            log.warning("leader election: %s stopped acting: %s", cfg.identity,
                        "another replica holds the Lease" if outcome == "theirs" else
                        f"could not renew the Lease for {cfg.renew_deadline:g}s")

    def _try(self) -> Outcome:
        """Acquire or renew the Lease."""
        cfg = self.config
        try:
            lease = self.kube.read_lease(cfg.namespace, cfg.name)
            if lease is None:
                self._note(self.kube.create_lease(self._body(None)))
                return "ours"
            self._note(lease)
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            if holder and holder != cfg.identity and not self._expired(spec):
                return "theirs"
            self._note(self.kube.replace_lease(self._body(lease)))
        except Conflict:
            return "theirs"  # another candidate wrote it since we read it
        except ControllerError as exc:
            log.debug("leader election: %s", exc)
            return "unknown"
        return "ours"

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
            lease = self.kube.read_lease(cfg.namespace, cfg.name)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != cfg.identity:
                return
            spec = {**(lease.get("spec") or {}), "holderIdentity": "",
                    "leaseDurationSeconds": 1, "renewTime": micro_time(self._wall())}
            self.kube.replace_lease({**lease, "spec": spec})
            log.info("leader election: %s released the Lease", cfg.identity)
        except ControllerError as exc:
            log.warning("leader election: could not release the Lease: %s", exc)
