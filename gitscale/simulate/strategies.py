"""gitscale and the baselines it is measured against, each driving the same cluster model.

- ``gitscale``: every ``interval`` the decision ``reconcile`` runs (``gitscale.core.decide``)
  reads the queue, each write is a commit, applied ``sync_delay`` later (or at the GitOps
  engine's next poll), and gitscale's controller acts on it (``model.controller_pass``).
- ``gitscale serve`` (``simulate --serve``): webhook mode — each job's ``queued``,
  ``in_progress`` and ``completed`` events batched per ``window`` into capacity reservations
  by the rules `serve` runs (``gitscale.core.reservations``), the same decision on their
  demand, one commit per batch, the same sync and controller.
- ``arc-listener``: actions-runner-controller's scale-set listener: on every job message and
  every empty batch (50 s without one), desired = min(minRunners + queued + running, max),
  patched at once with the next patch ID (patch 0 to force the state only on an empty batch
  back at minRunners), applied by the same controller rules.
- ``arc-hra``: legacy actions-runner-controller with a HorizontalRunnerAutoscaler on
  TotalNumberOfQueuedAndInProgressWorkflowRuns: polled every 60 s, scale-up at once, scale-down
  10 minutes after the last scale-up; the RunnerDeployment keeps ``replicas`` runners,
  replacing each one that finishes, and removes idle runners first when scaled down.
- ``pod-per-job``: a pod created when each job arrives (Buildkite agent-stack-k8s).
- ``oracle``: a runner ready exactly when each job arrives (computed, not simulated).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from gitscale.controller.decide import Phase, Spec
from gitscale.core.decide import decide
from gitscale.core.forecast import forecast
from gitscale.core.limits import caps
from gitscale.core.model import Current, Decision, Demand, next_patch_id
from gitscale.core.policy import Policy
from gitscale.core.reservations import Action, Book, Event
from gitscale.core.reservations import apply as apply_events
from gitscale.core.reservations import resync as resync_book
from gitscale.simulate.model import Clock, Pool, controller_pass
from gitscale.simulate.trace import Trace
from gitscale.webhooks.batch import GRACE

DRAIN_AFTER = 1800.0  # simulated time after the last job could end: runners left are charged
DRAIN_STEP = 60.0  # the drain tail goes on in steps of this while jobs wait or run


@dataclass(frozen=True)
class Settings:
    interval: float = 10.0
    sync_delay: float = 10.0
    sync_poll: float | None = None  # GitOps engine polling instead of a push notification
    pod_start: float = 45.0
    sample_every: float = 30.0
    job_memory: bool = True  # the last write's job ids known (`run`, or a kept state cache)
    window: float = 10.0  # `serve --window`: its events land as one commit per window
    reservation: float = 600.0  # `serve --reservation`: a queued job's reservation lasts
    resync: float = 300.0  # `serve --resync`: the reservations corrected from GitHub (0: off)
    hold: float = 300.0  # `serve --hold`: a change to the reservations alone waits this long
    report_from: float = 0.0  # seconds into the trace from which outcomes are counted
    max_total_replicas: int | None = None  # gitscale.yaml's limits.maxTotalReplicas


@dataclass
class Outcome:
    """One strategy's run over a trace (all sets together)."""

    name: str
    policy: str
    waits: list[float]
    runner_seconds: float
    idle_seconds: float
    pods: int
    commits: int | None = None
    patch_only_commits: int | None = None
    unstarted: int = 0  # jobs still waiting when the run ended (the drain tail's limit)
    series: dict[str, list[tuple[float, int, int, int]]] = field(default_factory=dict)


def end_of(trace: Trace) -> float:
    last = max((j.arrival + j.duration for j in trace.jobs), default=0.0)
    return max(trace.hours * 3600, last) + DRAIN_AFTER


def _drive(clock: Clock, pools: dict[str, Pool], trace: Trace, settings: Settings) -> float:
    """Run the trace to ``end_of`` it; then, while jobs still wait or run (more jobs than
    ``maxReplicas`` let through in time), on in steps until every job has run, and
    ``DRAIN_AFTER`` more, so that no strategy looks cheap by the jobs it never ran. A policy
    that can never run them (max 0) stops at a limit no runner could need: every job run one
    after another. Returns the end."""
    clock.run(end_of(trace))
    if not _busy(pools):
        return clock.now
    limit = clock.now + sum(j.duration + settings.pod_start + DRAIN_STEP for j in trace.jobs)
    while _busy(pools) and clock.now < limit:
        clock.run(min(clock.now + DRAIN_STEP, limit))
    clock.run(min(clock.now + DRAIN_AFTER, limit))
    return clock.now


def _busy(pools: dict[str, Pool]) -> bool:
    return any(pool.queue or pool.running for pool in pools.values())


def _pools(trace: Trace, clock: Clock, settings: Settings) -> dict[str, Pool]:
    pools = {name: Pool(clock, name, settings.pod_start, report_from=settings.report_from)
             for name in trace.sets}
    for job in trace.jobs:
        clock.at(job.arrival, pools[job.set].arrive, job)
    return pools


def _sampler(clock: Clock, pools: dict[str, Pool], every: float) -> None:
    # (periodic events reschedule themselves for as long as the run goes: ``_drive`` ends it)
    def tick() -> None:
        for pool in pools.values():
            pool.sample()
        clock.at(clock.now + every, tick)
    clock.at(0.0, tick)


def _committing(name: str, label: str, clock: Clock, pools: dict[str, Pool], trace: Trace,
                settings: Settings, changed: Callable[[Pool], None],
                step: Callable[[], None], counts: dict[str, int]) -> Outcome:
    """Run a strategy that writes to the config repo (polling, webhook mode): ``step`` from
    time 0 (it schedules its next), ``changed`` on each change of a pool; its ``counts`` of
    commits and patch-only commits go in the outcome."""
    for pool in pools.values():
        pool.on_change = changed
    clock.at(0.0, step)
    _sampler(clock, pools, settings.sample_every)
    outcome = _finish(name, label, pools, _drive(clock, pools, trace, settings))
    outcome.commits, outcome.patch_only_commits = counts["commits"], counts["patch_only"]
    return outcome


def _finish(name: str, policy: str, pools: dict[str, Pool], end: float) -> Outcome:
    waits: list[float] = []
    unstarted = sum(len(pool.queue) for pool in pools.values())
    for pool in pools.values():
        pool.close(end)
        waits += pool.waits.values()
    return Outcome(name, policy, waits, sum(p.runner_seconds for p in pools.values()),
                   sum(p.idle_seconds for p in pools.values()),
                   sum(p.created for p in pools.values()),
                   series={n: [(s.at, s.runners, s.queued, s.running) for s in p.samples]
                           for n, p in pools.items()}, unstarted=unstarted)


class _Writer:
    """What a pass (``run_gitscale``) and a batch (``run_serve``) share: each set's decision
    (``gitscale.core.decide``, fed what the manifest holds after each write), and what its
    Gitscale-Set trailers would say — the demand at each write, which a forecast policy learns
    from through the same pure function as a real pass."""

    def __init__(self, clock: Clock, pools: dict[str, Pool], policies: dict[str, Policy],
                 settings: Settings, every: float) -> None:
        self.clock, self.pools = clock, pools
        self.policies, self.settings = policies, settings
        self.current = {name: Current(0, None, backlog=0) for name in pools}  # RunnerSets
        self.history: dict[str, tuple[list[float], list[int]]] = {name: ([], []) for name in pools}
        self.window = timedelta(seconds=every)  # a forecast's count serves until the next one
        self.specs: dict[str, Spec] = {}  # what the cluster has applied, by set

    def commit(self, name: str, decision: Decision, now: datetime) -> None:
        """A written decision reaches the cluster after the sync (commits in the order they
        were made: a poll applies them in turn), and the controller acts on it."""
        spec = Spec(decision.replicas, decision.patch_id or 0, now, decision.backlog)
        self.clock.at(_synced(self.clock.now, self.settings), self._apply, name, spec)

    def _apply(self, name: str, spec: Spec) -> None:
        self.specs[name] = spec
        controller_pass(self.pools[name], spec)

    def follow(self, pool: Pool) -> None:
        """A pool changed (a runner started, a job ended): the controller's pass on the spec
        it has, if any."""
        spec = self.specs.get(pool.name)
        if spec is not None:
            controller_pass(pool, spec)

    def decide(self, demands: Mapping[str, Demand],
               now: datetime) -> dict[str, tuple[Decision, Current]]:
        """Each set's decision at ``now`` (under its share of ``max_total_replicas``, as a
        pass decides), and the RunnerSet before it (the set's state moves on when the
        decision writes)."""
        asking = {}
        for name, demand in demands.items():
            before = self.current[name]
            policy = self.policies[name]
            times, levels = self.history[name]
            predicted = None if policy.forecast is None else forecast(
                times, levels, policy.forecast, now, self.window)
            known = before if self.settings.job_memory else replace(before, jobs=None)
            asking[name] = (known, demand, policy, predicted)
        total = self.settings.max_total_replicas
        shares = caps(total, asking, now) if total is not None else {}
        decided = {}
        for name, (known, demand, policy, predicted) in asking.items():
            before = self.current[name]
            decision = decide(known, demand, policy, now, shares.get(name), predicted)
            if decision.write:
                times, levels = self.history[name]
                times.append(now.timestamp())
                levels.append(demand.queued + demand.running)
                self.current[name] = before.after(decision, demand, now)
            decided[name] = (decision, before)
        return decided


def run_gitscale(trace: Trace, policies: dict[str, Policy], settings: Settings,
                 label: str) -> Outcome:
    clock = Clock(trace.start)
    pools = _pools(trace, clock, settings)
    writer = _Writer(clock, pools, policies, settings, settings.interval)
    counts = {"commits": 0, "patch_only": 0}

    def tick() -> None:
        now = clock.time(clock.now)
        wrote, patch_only = False, True
        demands = {name: Demand(*pool.demand()) for name, pool in pools.items()}
        for name, (decision, before) in writer.decide(demands, now).items():
            if not decision.write:
                continue
            wrote = True
            patch_only = patch_only and before.replicas == decision.replicas
            writer.commit(name, decision, now)
        if wrote and clock.now >= settings.report_from:
            counts["commits"] += 1
            counts["patch_only"] += patch_only
        clock.at(clock.now + settings.interval, tick)

    return _committing("gitscale", label, clock, pools, trace, settings, writer.follow, tick,
                       counts)


def _synced(committed: float, settings: Settings) -> float:
    if settings.sync_poll:
        return math.floor(committed / settings.sync_poll + 1) * settings.sync_poll
    return committed + settings.sync_delay


# `serve` runs a batch this often without events, so that reservations expire
# (``gitscale.commands.serve.EXPIRY_CHECK``; tests/simulate check they agree)
EXPIRY_CHECK = 60.0


Batched = Callable[[float, str, Book, Decision], None]


def run_serve(trace: Trace, policies: dict[str, Policy], settings: Settings,
              label: str, batched: Batched = lambda at, name, book, decision: None) -> Outcome:
    """`gitscale serve`: each job sends ``queued`` as it arrives, ``in_progress`` as a runner
    takes it and ``completed`` as it ends; every ``window`` (and every ``EXPIRY_CHECK``
    without events) a batch applies the window's events to each set's reservations
    (``gitscale.core.reservations.apply``, the rules `serve` runs, max from the policy's
    bounds), decides from their demand as a pass does, and lands as one commit when a
    RunnerSet changed, or when the reservations changed and the first such batch since the
    last commit is ``hold`` old (``gitscale.webhooks.hold``); applied after the sync, as
    `run`'s commits are.
    Every ``resync`` (from the start) GitHub's list of queued and running jobs corrects the
    reservations (``gitscale.core.reservations.resync``, with serve's grace).
    ``batched`` is told each set's reservations and decision at each batch (seconds in)."""
    clock = Clock(trace.start)
    pools = _pools(trace, clock, settings)
    writer = _Writer(clock, pools, policies, settings, settings.window)
    books = {name: Book() for name in pools}
    pending: dict[str, list[Event]] = {name: [] for name in pools}
    told: dict[str, set[int]] = {name: set() for name in pools}  # queued sent
    started: dict[str, set[int]] = {name: set() for name in pools}  # in_progress sent
    duration = timedelta(seconds=settings.reservation)
    counts = {"commits": 0, "patch_only": 0}
    last = [-math.inf]  # when the last batch ran
    held: list[float | None] = [None]  # when the first held batch ran (serve --hold)
    listed = [-math.inf]  # when the last resync listed the jobs

    def changed(pool: Pool) -> None:
        # the webhooks of what just changed, in the order GitHub sends them
        at, events = clock.time(clock.now), pending[pool.name]
        sent, busy = told[pool.name], started[pool.name]
        for job in [*pool.queue, *pool.running.values()]:
            if job.id not in sent:
                sent.add(job.id)
                events.append(Event(pool.name, job.id, Action.QUEUED, at))
        for job_id in pool.running:
            if job_id not in busy:
                busy.add(job_id)
                events.append(Event(pool.name, job_id, Action.IN_PROGRESS, at))
        for job_id in sorted(busy - set(pool.running)):
            busy.discard(job_id)
            events.append(Event(pool.name, job_id, Action.COMPLETED, at))
        writer.follow(pool)

    def batch() -> None:
        due = bool(settings.resync) and clock.now - listed[0] >= settings.resync
        if due or any(pending.values()) or clock.now - last[0] >= EXPIRY_CHECK:
            last[0] = clock.now
            listed[0] = clock.now if due else listed[0]
            now = clock.time(clock.now)
            wrote = booked = False
            patch_only = True
            for name in pools:
                _, hi, _ = policies[name].bounds(now)
                before = books[name]
                books[name] = apply_events(before, pending[name], now, duration, hi)
                pending[name] = []
                if due:
                    pool = pools[name]
                    jobs = {job.id: False for job in pool.queue} | dict.fromkeys(pool.running,
                                                                                 True)
                    books[name], _ = resync_book(books[name], jobs, now - GRACE, now,
                                                 duration, hi)
                booked = booked or books[name] != before
            decided = writer.decide({name: books[name].demand() for name in pools}, now)
            for name, (decision, was) in decided.items():
                batched(clock.now, name, books[name], decision)
                if not decision.write:
                    continue
                wrote = True
                patch_only = patch_only and was.replicas == decision.replicas
                writer.commit(name, decision, now)
            if booked and not wrote and held[0] is None:
                held[0] = clock.now  # the reservations alone changed: held
            if wrote or (held[0] is not None and clock.now - held[0] >= settings.hold):
                held[0] = None  # what is held lands with this commit
                if clock.now >= settings.report_from:
                    counts["commits"] += 1
                    counts["patch_only"] += wrote and patch_only
        clock.at(clock.now + settings.window, batch)

    return _committing("gitscale serve", label, clock, pools, trace, settings, changed, batch,
                       counts)


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
    pools = _pools(trace, clock, settings)
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
    _sampler(clock, pools, settings.sample_every)
    return _finish("arc-listener", "minRunners = min", pools,
                   _drive(clock, pools, trace, settings))


def run_hra(trace: Trace, policies: dict[str, Policy], settings: Settings) -> Outcome:
    clock = Clock(trace.start)
    pools = _pools(trace, clock, settings)
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
    _sampler(clock, pools, settings.sample_every)
    return _finish("arc-hra", "60 s poll, 10 min scale-down delay", pools,
                   _drive(clock, pools, trace, settings))


def run_pod_per_job(trace: Trace, settings: Settings) -> Outcome:
    clock = Clock(trace.start)
    pools = _pools(trace, clock, settings)

    def changed(pool: Pool) -> None:
        queued = len(pool.queue)
        for pod in [p for p in pool.pods.values() if p.phase is Phase.FINISHED]:
            pool.delete(pod.name)
        pending = sum(p.phase is Phase.PENDING for p in pool.pods.values())
        for _ in range(queued - pending):
            pool.create()

    for pool in pools.values():
        pool.on_change = changed
    _sampler(clock, pools, settings.sample_every)
    return _finish("pod-per-job", "a pod per job on arrival", pools,
                   _drive(clock, pools, trace, settings))


def oracle(trace: Trace, settings: Settings) -> Outcome:
    jobs = [j for j in trace.jobs if j.arrival >= settings.report_from]
    seconds = sum(settings.pod_start + j.duration for j in jobs)
    return Outcome("oracle", "a runner ready as each job arrives", [0.0] * len(jobs),
                   seconds, 0.0, len(jobs))


BASELINES = 3  # listener, HRA, pod per job


def run_all(trace: Trace, policies: Sequence[tuple[str, dict[str, Policy]]],
            settings: Settings, baselines: bool = True,
            done: Callable[[str], None] = lambda name: None,
            serve: bool = False) -> list[Outcome]:
    """Every policy through gitscale (``serve``: each through webhook mode too, after it),
    then the baselines (with the first policy's bounds). ``done`` is told the name of each
    strategy run (one or two per policy, then the baselines)."""
    outcomes = []
    for label, by_set in policies:
        outcomes.append(run_gitscale(trace, by_set, settings, label))
        done(f"gitscale {label}")
        if serve:
            outcomes.append(run_serve(trace, by_set, settings, label))
            done(f"gitscale serve {label}")
    if baselines:
        first = policies[0][1]
        runs: tuple[tuple[Callable[[], Outcome], str], ...] = (
            (lambda: run_listener(trace, first, settings), "arc-listener"),
            (lambda: run_hra(trace, first, settings), "arc-hra"),
            (lambda: run_pod_per_job(trace, settings), "pod-per-job"))
        for run, name in runs:
            outcomes.append(run())
            done(name)
    outcomes.append(oracle(trace, settings))
    return outcomes
