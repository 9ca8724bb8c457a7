"""The cluster: a job queue and runner pods per set, on a discrete-event clock.

A runner pod starts (``pod_start`` seconds pending), then idles until it takes the oldest
waiting job of its set, runs it, and finishes (one job per runner, as the controller's
ephemeral runners do). Nothing here decides how many runners exist: a strategy creates and
deletes them. ``controller_pass`` is the gitscale controller's rule, by calling the same pure
``gitscale.controller.decide.decide`` that the controller runs, so the two cannot drift.
"""
from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from gitscale.controller.decide import (
    Phase,
    Refilled,
    Runner,
    Spec,
    Write,
    decide,
    record,
    refilled_after,
)
from gitscale.simulate.trace import Job


class Clock:
    """A discrete-event loop: callbacks at times in seconds, in order, ties in order given."""

    def __init__(self, start: datetime) -> None:
        self.start = start
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = 0

    def at(self, when: float, callback: Callable[..., None], *args: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (max(when, self.now), self._seq, callback, args))

    def run(self, until: float) -> None:
        while self._heap and self._heap[0][0] <= until:
            when, _, callback, args = heapq.heappop(self._heap)
            self.now = when
            callback(*args)
        self.now = until

    def time(self, seconds: float) -> datetime:
        return self.start + timedelta(seconds=seconds)


@dataclass
class Pod:
    name: str
    patch_id: int
    spec_time: datetime | None
    created: float
    phase: Phase = Phase.PENDING
    idle_since: float | None = None
    finished_at: float | None = None


@dataclass
class Sample:
    at: float
    runners: int  # pending + idle + busy
    queued: int
    running: int


@dataclass
class Pool:
    """One runner set's queue and pods, and what they cost."""

    clock: Clock
    name: str
    pod_start: float
    on_change: Callable[[Pool], None] = field(default=lambda pool: None, repr=False)
    queue: deque[Job] = field(default_factory=deque)
    pods: dict[str, Pod] = field(default_factory=dict)
    running: dict[int, Job] = field(default_factory=dict)
    waits: dict[int, float] = field(default_factory=dict)
    runner_seconds: float = 0.0
    idle_seconds: float = 0.0
    created: int = 0
    made: int = 0  # pods created, counted or not (their names)
    samples: list[Sample] = field(default_factory=list)
    last_applied: Write | None = None  # what the controller keeps in status.appliedPatchID
    refilled: Refilled | None = None  # ... and status.refilled
    # Only what happens from then on is counted (``simulate --report-from``): the waits of
    # jobs arriving, the runner and idle time after it, the pods created.
    report_from: float = 0.0

    # -- jobs ------------------------------------------------------------------------------
    def arrive(self, job: Job) -> None:
        self.queue.append(job)
        self._assign()
        self.on_change(self)

    def demand(self) -> tuple[int, int, frozenset[str]]:
        """What a CI system reports: queued, running and the ids of both."""
        ids = frozenset(str(j.id) for j in self.queue) | frozenset(str(i) for i in self.running)
        return len(self.queue), len(self.running), ids

    # -- pods ------------------------------------------------------------------------------
    def create(self, patch_id: int = 0, spec_time: datetime | None = None) -> None:
        self.created += self.clock.now >= self.report_from
        self.made += 1
        pod = Pod(f"{self.name}-{self.made}", patch_id, spec_time, self.clock.now)
        self.pods[pod.name] = pod
        self.clock.at(self.clock.now + self.pod_start, self._ready, pod)

    def delete(self, name: str) -> None:
        """Remove a pod: a busy one is never deleted (callers must not ask)."""
        pod = self.pods.get(name)
        if pod is not None and pod.phase is Phase.BUSY:
            raise AssertionError(f"{name} is busy: the rules never delete a busy runner")
        self.pods.pop(name, None)
        if pod is None or pod.phase in (Phase.FINISHED, Phase.FAILED):
            return
        self._account(pod, self.clock.now)

    def live(self) -> list[Pod]:
        return [p for p in self.pods.values() if p.phase in (Phase.PENDING, Phase.IDLE,
                                                              Phase.BUSY)]

    def sample(self) -> None:
        self.samples.append(Sample(self.clock.now, len(self.live()), len(self.queue),
                                   len(self.running)))

    def close(self, end: float) -> None:
        """Charge what still runs at the end, and the jobs that never started."""
        for pod in self.pods.values():
            if pod.phase in (Phase.PENDING, Phase.IDLE, Phase.BUSY):
                self._account(pod, end)
        for job in self.queue:
            if job.arrival >= self.report_from:
                self.waits[job.id] = end - job.arrival

    # -- internals -------------------------------------------------------------------------
    def _ready(self, pod: Pod) -> None:
        if self.pods.get(pod.name) is not pod:
            return  # deleted while pending
        pod.phase, pod.idle_since = Phase.IDLE, self.clock.now
        self._assign()
        self.on_change(self)

    def _assign(self) -> None:
        if not self.queue:
            return
        idle = sorted((p for p in self.pods.values() if p.phase is Phase.IDLE),
                      key=lambda p: (p.idle_since, p.name))
        for pod in idle:
            if not self.queue:
                break
            job = self.queue.popleft()
            now = self.clock.now
            if job.arrival >= self.report_from:
                self.waits[job.id] = now - job.arrival
            self.idle_seconds += self._span(pod.idle_since or now, now)
            pod.phase, pod.idle_since = Phase.BUSY, None
            self.running[job.id] = job
            self.clock.at(now + job.duration, self._complete, pod, job)

    def _complete(self, pod: Pod, job: Job) -> None:
        del self.running[job.id]
        pod.phase, pod.finished_at = Phase.FINISHED, self.clock.now
        self.runner_seconds += self._span(pod.created, self.clock.now)
        self.on_change(self)

    def _account(self, pod: Pod, end: float) -> None:
        self.runner_seconds += self._span(pod.created, end)
        if pod.phase is Phase.IDLE and pod.idle_since is not None:
            self.idle_seconds += self._span(pod.idle_since, end)

    def _span(self, start: float, end: float) -> float:
        """The seconds of [start, end] counted (from ``report_from`` on)."""
        return max(end - max(start, self.report_from), 0.0)


def controller_pass(pool: Pool, spec: Spec) -> None:
    """One pass of gitscale's controller over ``pool``: the pure decide(), its effects applied.

    Pods carry what the controller's pods carry: the patch ID and effectiveTime of the spec that
    created them, a creationTimestamp, and when they finished; the pool keeps the last write a
    pass fully applied, as the controller keeps it in status (every creation succeeds in the
    model, so each acting pass records its write). Times are read as the controller reads them,
    at 1 s resolution (``_second``): the spec's effectiveTime as a manifest holds it, a pod's
    creationTimestamp and finishedAt as Kubernetes keeps them — so a runner that finished in
    the second of the write counts as finished before it, and its slot is refilled.
    """
    clock = pool.clock
    spec = replace(spec, effective_time=_second(spec.effective_time))
    runners = [Runner(name=p.name, patch_id=p.patch_id, phase=p.phase,
                      finished_at=_second(clock.time(p.finished_at)) if p.finished_at is not None
                      else None,
                      created_at=_second(clock.time(p.created)), spec_time=p.spec_time)
               for p in pool.pods.values()]
    actions = decide(spec, runners, clock.time(clock.now), pool.last_applied, pool.refilled)
    for _ in range(actions.successors):
        pool.create(actions.create_patch_id, spec.effective_time)
    for delete in actions.deletes:
        pool.delete(delete.name)
    if actions.refills:
        pool.refilled = refilled_after(spec, pool.refilled, len(actions.refills))
    pool.last_applied = record(spec, pool.last_applied, all_created=True)


def _second(when: datetime | None) -> datetime | None:
    """A time as an RFC 3339 timestamp of the API server or a manifest keeps it: whole seconds
    (``timeutil.format_time``; Kubernetes' ``metav1.Time``)."""
    return None if when is None else when.replace(microsecond=0)
