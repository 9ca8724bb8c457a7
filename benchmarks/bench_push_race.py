#!/usr/bin/env python3
"""Benchmark push races: many `gitscale reconcile` processes writing one branch at once.

    .venv/bin/python benchmarks/bench_push_race.py [--writers 16] [--rounds 20]

A real ``git daemon`` on 127.0.0.1 serves one config repo (the integration tests' seed). Each
writer is a thread that runs ``gitscale reconcile --repo git://… --demand FILE`` --rounds times
in a row, each time with its own demand and new job ids, so every run has a change to land. All
writers run at once. A run that loses a race fetches, recomputes and retries until its deadline
(``gitscale.plan.landing.DEADLINE``).

Reported: failed runs (the target is 0), attempts per run, wall time per run, commits landed
(must equal writers × rounds, in one linear history). JSON goes to benchmarks/results/.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path.insert(0, str(PROJECT))

from gitscale.plan.landing import BACKOFF, BACKOFF_CAP, DEADLINE, PRIORITY_AFTER  # noqa: E402
from tests.integration import seed  # noqa: E402
from tests.integration.conftest import start_daemon  # noqa: E402

RESULTS = HERE / "results"


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if not 1 <= args.writers <= 17:
        parser.error("--writers: 1 to 17 (targets 3 + writer must stay within the seed's max 20)")

    work = Path(tempfile.mkdtemp(prefix="gitscale-bench-race-"))
    base = work / "srv"
    base.mkdir()
    daemon = start_daemon(base)
    runs: list[dict[str, Any]] = []
    lock = threading.Lock()
    try:
        files = dict(seed.FILES)  # room for a count of its own per run
        files["gitscale.yaml"] = files["gitscale.yaml"].replace("maxReplicas: 20",
                                                              "maxReplicas: 10000")
        bare = daemon.create(files)
        original = seed.git(bare, "rev-parse", "refs/heads/main")

        def writer(number: int) -> None:
            for round_no in range(args.rounds):
                demand = work / f"demand-{number}-{round_no}.yaml"
                # a count of its own: every run has a change to make, whoever landed last
                demand.write_text(seed.demand_text((3 + number * args.rounds + round_no, 0),
                                                   jobs=[number * 1000 + round_no]))
                started = time.perf_counter()
                proc = subprocess.run([sys.executable, "-m", "gitscale", "reconcile", "--repo",
                                       daemon.url(), "--demand", str(demand), "--now", seed.NOW],
                                      cwd=work, capture_output=True, text=True, timeout=300)
                wall = time.perf_counter() - started
                retried = re.search(r"after (\d+) retries", proc.stdout)
                with lock:
                    runs.append({
                        "writer": number, "round": round_no, "code": proc.returncode,
                        "landed": "and pushed to" in proc.stdout, "wall_s": round(wall, 3),
                        "attempts": 1 + int(retried.group(1)) if retried else 1,
                        "error": proc.stderr.strip()[-500:] if proc.returncode else "",
                    })
                    done = len(runs)
                if done % args.writers == 0:
                    print(f"  {done}/{args.writers * args.rounds} runs", flush=True)

        print(f"{args.writers} writers x {args.rounds} rounds against {daemon.url()} ...",
              flush=True)
        started = time.perf_counter()
        threads = [threading.Thread(target=writer, args=(n,)) for n in range(args.writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        total = time.perf_counter() - started
        history = seed.commits(bare)
        linear = not seed.merges(bare) and history[-1] == original
    finally:
        daemon.stop()
        shutil.rmtree(work, ignore_errors=True)

    attempts = [r["attempts"] for r in runs]
    walls = [r["wall_s"] for r in runs]
    failed = [r for r in runs if r["code"] != 0 or not r["landed"]]
    results = {
        "params": {"writers": args.writers, "rounds": args.rounds, "deadline_s": DEADLINE,
                   "backoff_s": BACKOFF, "backoff_cap_s": BACKOFF_CAP,
                   "priority_after_s": PRIORITY_AFTER},
        "runs": len(runs), "failed_runs": len(failed), "failures": failed[:10],
        "commits_landed": len(history) - 1, "linear_history": linear,
        "attempts": {"max": max(attempts), "p95": percentile(attempts, 0.95),
                     "median": statistics.median(attempts), "mean": statistics.fmean(attempts)},
        "run_wall_s": {"max": max(walls), "p95": percentile(walls, 0.95),
                       "median": statistics.median(walls)},
        "total_wall_s": round(total, 1),
    }
    args.results.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = args.results / f"push-race-{stamp}.json"
    out.write_text(json.dumps(results, indent=2))
    a, w = results["attempts"], results["run_wall_s"]
    print(f"runs {len(runs)}, failed {len(failed)}, commits landed {results['commits_landed']} "
          f"({'linear' if linear else 'NOT linear'}), {total:.0f} s in all")
    print(f"attempts per run: max {a['max']}, p95 {a['p95']}, median {a['median']}, "
          f"mean {a['mean']:.2f}")
    print(f"wall per run: max {w['max']:.1f} s, p95 {w['p95']:.1f} s, median {w['median']:.1f} s "
          f"(deadline {DEADLINE:.0f} s)")
    print(f"results: {out}")
    return 0 if not failed and results["commits_landed"] == len(runs) and linear else 1


if __name__ == "__main__":
    sys.exit(main())
