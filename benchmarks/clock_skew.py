"""gitscale's clock against the cluster's: `simulate --scaler-clock-offset` on the traces.

    .venv/bin/python benchmarks/clock_skew.py [--seeds 1] [--hours 4] [--quiet-hours 24]

The controller holds the slot of a runner that finished after the spec's effectiveTime (the
write counted its job as running) and refills one that finished before. effectiveTime is
gitscale's clock, finishedAt the kubelet's: with gitscale's clock behind by Δ, a runner whose
job ended up to Δ before the pass read the demand looks finished after the write, and its slot
is held although the write did not count its job. This runs gitscale (buffer 0 and 2, polling)
at each offset on the steady, spiky and burst shapes (4 h) and on a quiet trace (Poisson, one
job every 10 minutes, median 6 min, 24 h; no synthetic shape is that quiet), and prints a
Markdown table: p95 and max wait, jobs that waited more than 2 and 5 minutes, runner-minutes × the
oracle and commits per hour (summed over the seeds for the count, worst seed for the max).
"""
from __future__ import annotations

import argparse
import math
import random
from datetime import timedelta

from gitscale.core.policy import Policy
from gitscale.simulate.baselines import oracle
from gitscale.simulate.harness import Outcome, Settings
from gitscale.simulate.report import metrics
from gitscale.simulate.strategies import run_gitscale
from gitscale.simulate.trace import DEFAULT_START, Job, Trace, synthetic

OFFSETS = (-5.0, -2.0, -1.0, -0.5, 0.0, 2.0)
# seconds: jobs that waited longer are counted (with no idle runner, a job waits at most
# a decision interval, the sync and the pod start: 65 s with the defaults)
LONG_WAITS = (120.0, 300.0)


def quiet(seed: int, hours: float, per_minute: float = 0.1) -> Trace:
    """Poisson arrivals at ``per_minute``, durations log-normal (median 6 min), as the
    synthetic shapes draw them."""
    rng = random.Random(f"{seed}/quiet")
    jobs, at = [], rng.expovariate(per_minute / 60)
    while at < hours * 3600:
        duration = min(max(rng.lognormvariate(math.log(360.0), 0.6), 30.0), 3600.0)
        jobs.append(Job(len(jobs), "default", round(at, 1), round(duration, 1)))
        at += rng.expovariate(per_minute / 60)
    return Trace(f"quiet (seed {seed})", DEFAULT_START, tuple(jobs), hours)


def run(trace: Trace, buffer: int, offset: float) -> tuple[Outcome, Outcome]:
    policy = Policy(min_replicas=0, max_replicas=200, buffer=buffer,
                    scale_down_delay=timedelta(minutes=5))
    settings = Settings(scaler_clock_offset=offset)
    return (run_gitscale(trace, {"default": policy}, settings, f"buffer {buffer}"),
            oracle(trace, settings))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--hours", type=float, default=4.0)
    parser.add_argument("--quiet-hours", type=float, default=24.0)
    parser.add_argument("--buffers", default="0,2")
    args = parser.parse_args()
    seeds = range(1, args.seeds + 1)
    shapes = {shape: [synthetic(shape, seed=s, hours=args.hours, sets=["default"])
                      for s in seeds] for shape in ("steady", "spiky", "burst")}
    shapes["quiet"] = [quiet(s, args.quiet_hours) for s in seeds]
    print("| trace | buffer | clock offset | wait p95 | max | jobs > 2 min | > 5 min | "
          "runner-min × oracle | commits/hour |")
    print("|---|---|---|---|---|---|---|---|---|")
    for shape, traces in shapes.items():
        for buffer in (int(b) for b in args.buffers.split(",")):
            for offset in OFFSETS:
                p95s, maxes, ratios, per_hour = [], [], [], []
                long = [0 for _ in LONG_WAITS]
                for trace in traces:
                    outcome, best = run(trace, buffer, offset)
                    row = metrics([outcome, best], trace)[0]
                    p95s.append(row.wait_p95)
                    maxes.append(row.wait_max)
                    for i, limit in enumerate(LONG_WAITS):
                        long[i] += sum(w > limit for w in outcome.waits)
                    ratios.append(row.vs_oracle)
                    per_hour.append(row.commits_per_hour or 0.0)
                jobs = sum(len(t.jobs) for t in traces)
                print(f"| {shape} | {buffer} | {offset:+g} s | {max(p95s):.0f} s | "
                      f"{max(maxes):.0f} s | {long[0]} of {jobs} | {long[1]} | "
                      f"{sum(ratios) / len(ratios):.2f} | "
                      f"{sum(per_hour) / len(per_hour):.1f} |", flush=True)


if __name__ == "__main__":
    main()
