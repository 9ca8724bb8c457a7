"""gitscale and the baselines it is measured against, each driving the same cluster model.

- ``gitscale``: every ``interval`` the decision ``reconcile`` runs (``gitscale.core.decide``)
  reads the queue, each write is a commit, applied ``sync_delay`` later (or at the GitOps
  engine's next poll), and gitscale's controller acts on it (``model.controller_pass``).
  Its passes read their own clock, ``Settings.scaler_clock_offset`` from the cluster's
  (``scaler_time``): each effectiveTime it writes, against the runners' finishedAt.
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
from dataclasses import replace
from datetime import datetime, timedelta

from gitscale.controller.decide import Spec
from gitscale.core.decide import decide
from gitscale.core.forecast import forecast
from gitscale.core.limits import caps
from gitscale.core.model import Current, Decision, Demand
from gitscale.core.policy import Policy
from gitscale.core.reservations import Action, Book, Event
from gitscale.core.reservations import apply as apply_events
from gitscale.core.reservations import resync as resync_book
from gitscale.core.reservations import without_unseen
from gitscale.simulate.baselines import oracle, run_hra, run_listener, run_pod_per_job
from gitscale.simulate.harness import Outcome, Settings, drive, finish, make_pools, sampler
from gitscale.simulate.model import Clock, Pool, controller_pass
from gitscale.simulate.trace import Trace
from gitscale.webhooks.batch import GRACE


def _committing(name: str, label: str, clock: Clock, pools: dict[str, Pool], trace: Trace,
                settings: Settings, changed: Callable[[Pool], None],
                step: Callable[[], None], counts: dict[str, int]) -> Outcome:
    """Run a strategy that writes to the config repo (polling, webhook mode): ``step`` from
    time 0 (it schedules its next), ``changed`` on each change of a pool; its ``counts`` of
    commits and patch-only commits go in the outcome."""
    for pool in pools.values():
        pool.on_change = changed
    clock.at(0.0, step)
    sampler(clock, pools, settings.sample_every)
    outcome = finish(name, label, pools, drive(clock, pools, trace, settings))
    outcome.commits, outcome.patch_only_commits = counts["commits"], counts["patch_only"]
    return outcome


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
    pools = make_pools(trace, clock, settings)
    writer = _Writer(clock, pools, policies, settings, settings.interval)
    counts = {"commits": 0, "patch_only": 0}

    def tick() -> None:
        now = scaler_time(clock, settings)
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


def scaler_time(clock: Clock, settings: Settings) -> datetime:
    """The time on gitscale's clock (``Settings.scaler_clock_offset`` from the cluster's): what
    its decisions and every effectiveTime it writes read. The controller compares that time
    with the kubelet's finishedAt, on the cluster's clock."""
    return clock.time(clock.now + settings.scaler_clock_offset)


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
    last commit is ``hold`` old (``gitscale.webhooks.hold``; a resync's renewals and completed
    jobs' records past their time forgotten alone start no hold, as in `serve`:
    ``gitscale.core.reservations.without_unseen``); applied after the sync, as `run`'s commits
    are.
    Every ``resync`` (from the start) GitHub's list of queued and running jobs corrects the
    reservations (``gitscale.core.reservations.resync``, with serve's grace).
    ``batched`` is told each set's reservations and decision at each batch (seconds in)."""
    clock = Clock(trace.start)
    pools = make_pools(trace, clock, settings)
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
        at, events = scaler_time(clock, settings), pending[pool.name]
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
            now = scaler_time(clock, settings)
            wrote = booked = False
            patch_only = True
            for name in pools:
                _, hi, _ = policies[name].bounds(now)
                before = books[name]
                # with a listing, the resync expires what it does not renew (as serve's batch)
                books[name] = apply_events(before, pending[name], now, duration, hi,
                                           expire=not due)
                pending[name] = []
                renewed: tuple[int, ...] = ()
                corrected = False
                if due:
                    pool = pools[name]
                    jobs = {job.id: False for job in pool.queue} | dict.fromkeys(pool.running,
                                                                                 True)
                    books[name], correction = resync_book(books[name], jobs, now - GRACE, now,
                                                          duration, hi)
                    renewed, corrected = correction.renewed, bool(correction)
                # serve's rule (gitscale.webhooks.batch): a resync's renewals and forgotten
                # tombstones alone start no hold — no commit of their own, they land with the
                # next one made for anything else
                booked = booked or corrected or without_unseen(books[name], before, now,
                                                               renewed) != before
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
