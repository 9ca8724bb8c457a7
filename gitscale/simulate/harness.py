"""What every strategy of ``simulate`` runs on: its settings and outcome, the set's pools fed
the trace's jobs, the samples, and the drive to the end of the trace and its drain tail.

``strategies`` (gitscale, polling and webhook mode) and ``baselines`` (the tools it is
measured against, and the oracle) each run a trace through these.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gitscale.simulate.model import Clock, Pool
from gitscale.simulate.trace import Trace

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
    # gitscale's clock minus the cluster's, in seconds (negative: the scaler's runs behind):
    # its passes, batches and every effectiveTime it writes read that clock, the controller's
    # pods (finishedAt) the cluster's
    scaler_clock_offset: float = 0.0


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


def drive(clock: Clock, pools: dict[str, Pool], trace: Trace, settings: Settings) -> float:
    """Run the trace to ``end_of`` it; then, while jobs still wait or run (more jobs than
    ``maxReplicas`` let through in time), on in steps until every job has run, and
    ``DRAIN_AFTER`` more, so that no strategy looks cheap by the jobs it never ran. A policy
    that can never run them (max 0) stops at a limit no runner could need: every job run one
    after another. Returns the end."""
    clock.run(end_of(trace))
    if not busy(pools):
        return clock.now
    limit = clock.now + sum(j.duration + settings.pod_start + DRAIN_STEP for j in trace.jobs)
    while busy(pools) and clock.now < limit:
        clock.run(min(clock.now + DRAIN_STEP, limit))
    clock.run(min(clock.now + DRAIN_AFTER, limit))
    return clock.now


def busy(pools: dict[str, Pool]) -> bool:
    return any(pool.queue or pool.running for pool in pools.values())


def make_pools(trace: Trace, clock: Clock, settings: Settings) -> dict[str, Pool]:
    pools = {name: Pool(clock, name, settings.pod_start, report_from=settings.report_from)
             for name in trace.sets}
    for job in trace.jobs:
        clock.at(job.arrival, pools[job.set].arrive, job)
    return pools


def sampler(clock: Clock, pools: dict[str, Pool], every: float) -> None:
    # (periodic events reschedule themselves for as long as the run goes: ``drive`` ends it)
    def tick() -> None:
        for pool in pools.values():
            pool.sample()
        clock.at(clock.now + every, tick)
    clock.at(0.0, tick)


def finish(name: str, policy: str, pools: dict[str, Pool], end: float) -> Outcome:
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
