"""Benchmark `gitscale simulate` on a day of jobs (not a test).

    .venv/bin/python benchmarks/bench_simulate.py              # steady, seed 7, 24 h: 2,085 jobs
    .venv/bin/python benchmarks/bench_simulate.py --hours 1 --runs 1      # quick

Two measurements, each repeated ``--runs`` times (the median is reported):
1. ``cli``: ``python -m gitscale simulate --synthetic SHAPE --seed N --hours H`` with every
   baseline (ARC listener, ARC HRA, pod per job, oracle), decisions every 10 s, JSON output, as
   a user runs it: interpreter start, imports, the trace, every strategy, the report. Wall
   time, CPU time (user + sys: steadier than wall time on a busy machine), and peak RSS from ``os.wait4`` on the child (the same figure as ``/usr/bin/time -v``).
2. ``in-process``: the same trace through each strategy in this process, timed one by one, to
   show where the time goes.
The process and its children are pinned to one CPU (``--no-pin`` to leave them be), since the
target is for one core. Exits 1 when the CLI's median is over ``--budget`` seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gitscale.core.policy import Policy  # noqa: E402
from gitscale.simulate import baselines, harness, strategies  # noqa: E402
from gitscale.simulate.trace import Trace, synthetic  # noqa: E402
from gitscale.timeutil import parse_duration  # noqa: E402

# The outcome targets' policy; the baselines take their bounds from it.
POLICY = "{minReplicas: 0, maxReplicas: 200, scaleDownDelay: 5m}"


def cli_run(argv: list[str]) -> tuple[float, float, float, str]:
    """(wall seconds, CPU seconds, peak RSS in MiB, stdout) of one CLI process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-m", "gitscale", *argv], cwd=ROOT, env=env,
                                 stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)  # reaped here, for its own rusage
        wall = time.perf_counter() - start
        child.returncode = code = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if code != 0:
            raise SystemExit(f"simulate exited {code}: {err.read().decode(errors='replace')}")
        cpu = usage.ru_utime + usage.ru_stime
        return wall, cpu, usage.ru_maxrss / 1024, out.read().decode()


def in_process(trace: Trace, policy: Policy, settings: harness.Settings,
               runs: int) -> dict[str, float]:
    """Median seconds of each strategy on ``trace``."""
    by_set = {name: policy for name in trace.sets}
    steps: dict[str, Callable[[], object]] = {
        "gitscale": lambda: strategies.run_gitscale(trace, by_set, settings, POLICY),
        "arc-listener": lambda: baselines.run_listener(trace, by_set, settings),
        "arc-hra": lambda: baselines.run_hra(trace, by_set, settings),
        "pod-per-job": lambda: baselines.run_pod_per_job(trace, settings),
        "oracle": lambda: baselines.oracle(trace, settings),
    }
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(runs):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=["steady", "spiky", "burst"], default="steady")
    parser.add_argument("--seed", type=int, default=7, help="steady, seed 7, 24 h: 2,085 jobs")
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--budget", type=float, default=5.0, help="seconds, the CLI's median")
    parser.add_argument("--no-pin", action="store_true", help="do not pin to one CPU")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()

    cpu = None
    if not args.no_pin and hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})  # inherited by the CLI children
    argv = ["simulate", "--synthetic", args.shape, "--seed", str(args.seed), "--hours",
            f"{args.hours:g}", "--interval", "10s", "--policy", POLICY, "--output", "json"]
    walls, cpus, rss, document = [], [], [], {}
    for _ in range(args.runs):
        wall, cpu_time, peak, out = cli_run(argv)
        walls.append(wall)
        cpus.append(cpu_time)
        rss.append(peak)
        document = json.loads(out)
    names = [row["name"] for row in document["results"]]
    if names != ["gitscale", "arc-listener", "arc-hra", "pod-per-job", "oracle"]:
        raise SystemExit(f"unexpected strategies: {names}")
    jobs = document["trace"]["jobs"]
    if any(row["jobs"] != jobs for row in document["results"]):
        raise SystemExit("a strategy did not account for every job")

    trace = synthetic(args.shape, seed=args.seed, hours=args.hours, sets=["default"])
    policy = Policy(0, 200, 0, parse_duration("5m"))
    split = in_process(trace, policy, harness.Settings(interval=10.0), args.runs)
    median = statistics.median(walls)
    figures = {
        "trace": document["trace"]["name"], "jobs": jobs, "hours": args.hours,
        "cpu": cpu, "runs": args.runs, "cli_wall_median": round(median, 3),
        "cli_wall_min": round(min(walls), 3), "cli_wall_max": round(max(walls), 3),
        "cli_cpu_median": round(statistics.median(cpus), 3),
        "cli_peak_rss_mib": round(max(rss), 1),
        "in_process": {name: round(seconds, 3) for name, seconds in split.items()},
        "budget": args.budget, "within_budget": median <= args.budget,
    }
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        pinned = f"pinned to CPU {cpu}" if cpu is not None else "not pinned"
        print(f"trace: {figures['trace']}, {jobs} jobs over {args.hours:g} h, decisions every "
              f"10s, all baselines; {pinned}")
        print(f"cli: median {median:.2f} s (min {min(walls):.2f}, max {max(walls):.2f}, "
              f"{args.runs} runs), CPU {statistics.median(cpus):.2f} s, peak RSS {max(rss):.0f} MiB; budget {args.budget:g} s: "
              f"{'met' if median <= args.budget else 'EXCEEDED'}")
        print("in-process, median per strategy: " + ", ".join(
            f"{name} {seconds:.2f} s" for name, seconds in split.items()))
    return 0 if median <= args.budget else 1


if __name__ == "__main__":
    sys.exit(main())
