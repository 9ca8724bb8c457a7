"""The strategies gitscale is measured against, each driving the same cluster model
(``harness``): actions-runner-controller's scale-set listener and its legacy HRA, a pod per
job, and the oracle (the module docstring of ``strategies`` describes each).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gitscale.controller.decide import Phase, Spec
from gitscale.core.model import next_patch_id
from gitscale.core.policy import Policy
from gitscale.simulate.harness import Outcome, Settings, drive, finish, make_pools, sampler
from gitscale.simulate.model import Clock, Pool, controller_pass
from gitscale.simulate.trace import Trace

QUIET_BATCH = 50.0  # the listener's long poll: no job message in this long is an empty batch
Patched = Callable[[float, str, int, int], None]


@dataclass
class _Scaler:
    """actions-runner-controller's listener scaler (``cmd/ghalistener/scaler``) for one set:
    each job message and each empty batch patches the EphemeralRunnerSet with replicas =
    min(minRunners + assigned jobs, maxRunners) and the next patch ID (the first is 0); 0
    instead when the state is forced: no job started or completed since the last patch, the
    target unchanged, and it is minRunners (an empty batch once the set is back at its min)."""

    minimum: int
    maximum: int
    target: int = -1
    patch_id: int = -1
    dirty: bool = False  # a job started or completed since the last patch

    def patch(self, assigned: int) -> tuple[int, int]:
        self.patch_id = next_patch_id(self.patch_id) if self.patch_id >= 0 else 0
        target = min(self.minimum + assigned, self.maximum)
        forced = not self.dirty and target == self.target == self.minimum
        self.target, self.dirty = target, False
        return target, 0 if forced else self.patch_id


def run_listener(trace: Trace, policies: dict[str, Policy], settings: Settings,
                 patched: Patched = lambda at, name, replicas, patch_id: None) -> Outcome:
    """The scale-set listener (``_Scaler``) on every job message — a job queued, started or
    completed, at once — and on every empty batch (``QUIET_BATCH`` after the last message or
    empty batch), its patches applied by the same controller rules. ``patched`` is told each
    patch (seconds in, set, replicas, patch ID)."""
    clock = Clock(trace.start)
    pools = make_pools(trace, clock, settings)
    scalers = {name: _Scaler(policies[name].min_replicas, policies[name].max_replicas)
               for name in pools}
    jobs: dict[str, tuple[int, int]] = {}  # (queued, running) at the last message
    polls = dict.fromkeys(pools, 0)  # long polls ended (by a message or empty): the current one
    specs: dict[str, Spec] = {}

    def patch(pool: Pool) -> None:
        replicas, patch_id = scalers[pool.name].patch(len(pool.queue) + len(pool.running))
        specs[pool.name] = Spec(replicas, patch_id, clock.time(clock.now))
        patched(clock.now, pool.name, replicas, patch_id)
        controller_pass(pool, specs[pool.name])
        polls[pool.name] += 1
        clock.at(clock.now + QUIET_BATCH, empty, pool, polls[pool.name])

    def changed(pool: Pool) -> None:
        # every job event changes (queued, running): an arrival queued (or taken at once), a
        # start, a completion; a runner that started or finished without a job changes neither
        now = (len(pool.queue), len(pool.running))
        before = jobs.get(pool.name)
        if now != before:  # a job message (the first: the session's initial statistics)
            jobs[pool.name] = now
            scalers[pool.name].dirty |= before is not None and now[1] != before[1]
            patch(pool)
        elif pool.name in specs:
            controller_pass(pool, specs[pool.name])

    def empty(pool: Pool, poll: int) -> None:
        if polls[pool.name] == poll:  # no message during this poll: an empty batch
            patch(pool)

    for pool in pools.values():
        pool.on_change = changed
        clock.at(0.0, changed, pool)
    sampler(clock, pools, settings.sample_every)
    return finish("arc-listener", "minRunners = min", pools,
                   drive(clock, pools, trace, settings))


def run_hra(trace: Trace, policies: dict[str, Policy], settings: Settings) -> Outcome:
    clock = Clock(trace.start)
    pools = make_pools(trace, clock, settings)
    replicas = {name: policies[name].min_replicas for name in pools}
    last_up = {name: -1e9 for name in pools}

    def deployment(pool: Pool) -> None:
        for pod in [p for p in pool.pods.values() if p.phase is Phase.FINISHED]:
            pool.delete(pod.name)  # an ephemeral runner that finished is replaced
        live = pool.live()
        want = replicas[pool.name]
        for _ in range(want - len(live)):
            pool.create()
        surplus = len(live) - want
        if surplus > 0:
            idle = sorted((p for p in live if p.phase is Phase.IDLE), key=lambda p: p.created)
            pending = sorted((p for p in live if p.phase is Phase.PENDING),
                             key=lambda p: -p.created)
            for pod in (idle + pending)[:surplus]:
                pool.delete(pod.name)

    def poll() -> None:
        for name, pool in pools.items():
            queued, running, _ = pool.demand()
            policy = policies[name]
            desired = min(max(queued + running, policy.min_replicas), policy.max_replicas)
            if desired > replicas[name]:
                replicas[name], last_up[name] = desired, clock.now
            elif desired < replicas[name] and clock.now - last_up[name] >= 600:
                replicas[name] = desired
            deployment(pool)
        clock.at(clock.now + 60, poll)

    for pool in pools.values():
        pool.on_change = deployment
    clock.at(0.0, poll)
    sampler(clock, pools, settings.sample_every)
    return finish("arc-hra", "60 s poll, 10 min scale-down delay", pools,
                   drive(clock, pools, trace, settings))


def run_pod_per_job(trace: Trace, settings: Settings) -> Outcome:
    clock = Clock(trace.start)
    pools = make_pools(trace, clock, settings)

    def changed(pool: Pool) -> None:
        queued = len(pool.queue)
        for pod in [p for p in pool.pods.values() if p.phase is Phase.FINISHED]:
            pool.delete(pod.name)
        pending = sum(p.phase is Phase.PENDING for p in pool.pods.values())
        for _ in range(queued - pending):
            pool.create()

    for pool in pools.values():
        pool.on_change = changed
    sampler(clock, pools, settings.sample_every)
    return finish("pod-per-job", "a pod per job on arrival", pools,
                   drive(clock, pools, trace, settings))


def oracle(trace: Trace, settings: Settings) -> Outcome:
    jobs = [j for j in trace.jobs if j.arrival >= settings.report_from]
    seconds = sum(settings.pod_start + j.duration for j in jobs)
    return Outcome("oracle", "a runner ready as each job arrives", [0.0] * len(jobs),
                   seconds, 0.0, len(jobs))
