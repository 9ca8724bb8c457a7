#!/usr/bin/env python3
"""`gitscale plan` with a forecast policy on two weeks of scaling history, through the real CLI.

    .venv/bin/python benchmarks/bench_forecast.py [--days 14] [--seed 1] [--passes 5]

Builds (benchmarks/forecast_repo.py, one `git fast-import`) a bare config repo whose main
branch holds --days of scaling commits of `gitscale simulate`'s weekly trace (a weekday 09:00
burst of 100–140 jobs), one set on {maxReplicas: 200, scaleDownDelay: 5m, forecast: {lookback:
14d, quantile: 0.9, lead: 1m}}, served by URL (file://). Then, at 08:59 UTC on day 15:

  cold     `gitscale plan --repo URL` with an empty state cache: the clone, deepened to the
           lookback, and every scaling commit of the window read
  warm     the same with the cache of the run before: the series from the cache, no git log
  new      a commit pushed between two runs: only it is read (git log LAST..HEAD)
  reactive the same repo and pass with the forecast taken out of the policy (what a pass
           costs without it)

and checks that each forecast plan scales the set up before 09:00 with the reason `forecast`
to demand (0) + the cushion the pure function gives for the same history (the jobs the past
Mondays saw arrive within one reach), capped by maxReplicas 200. JSON results go to
benchmarks/results/forecast-<UTC time>.json.
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
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_reconcile as br  # noqa: E402
import forecast_repo as fr  # noqa: E402

from gitscale.core.forecast import ForecastPolicy, forecast  # noqa: E402

GITSCALE = str(Path(sys.executable).with_name("gitscale"))


def plan(url: str, demand: Path, now: str, cache: Path) -> tuple[float, dict[str, Any]]:
    env = {**os.environ, "GITSCALE_CACHE_DIR": str(cache)}
    started = time.perf_counter()
    done = subprocess.run([GITSCALE, "plan", "--repo", url, "--demand", str(demand), "--now",
                           now, "--output", "json"], capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 2):
        raise RuntimeError(done.stderr)
    return elapsed, json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=float, default=14)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        remote = root / "remote.git"
        started = time.perf_counter()
        series = fr.build(remote, days=args.days, seed=args.seed)
        built = time.perf_counter() - started
        url = f"file://{remote}"
        demand = root / "demand.yaml"
        demand.write_text(f"{fr.SET}: {{queued: 0, running: 0}}\n")
        now = fr.day(int(args.days) + 1, 8, 59)
        # the init commit (series[0]'s time) records no demand: the history is the rest
        expected = forecast([t for t, _ in series[1:]], [v for _, v in series[1:]],
                            ForecastPolicy(), now)
        assert expected.extra is not None and expected.extra > 0, expected.detail
        replicas = min(0 + expected.extra, 200)  # demand 0 + the cushion, capped by max
        stamp = now.isoformat()
        times: dict[str, list[float]] = {"cold": [], "warm": [], "new": [], "reactive": []}
        for index in range(args.passes):
            cache = root / f"cache-{index}"
            for label in ("cold", "warm"):
                elapsed, doc = plan(url, demand, stamp, cache)
                change, = doc["changes"]
                assert change["reason"] == "forecast", change
                assert change["to"]["replicas"] == replicas, (change, expected)
                times[label].append(elapsed)
            work = root / f"push-{index}"
            br.git(root, "clone", "--quiet", url, str(work))
            br.git(work, "commit", "--quiet", "--allow-empty", "-m",
                   "gitscale: linux 0 (patch 1)\n\nGitscale-Set: linux replicas=0 previous=0 "
                   "patch=1 queued=0 running=0 reason=reaffirm")
            br.git(work, "push", "--quiet", "origin", "main")
            elapsed, doc = plan(url, demand, stamp, cache)
            assert doc["changes"][0]["reason"] == "forecast"
            times["new"].append(elapsed)
        reactive = root / "reactive.git"
        br.git(root, "clone", "--quiet", "--bare", str(remote), str(reactive))
        work = root / "reactive-work"
        br.git(root, "clone", "--quiet", str(reactive), str(work))
        config = (work / "gitscale.yaml").read_text().replace(
            ", forecast: {lookback: 14d, quantile: 0.9, lead: 1m}", "")
        (work / "gitscale.yaml").write_text(config)
        br.git(work, "commit", "--quiet", "-am", "no forecast")
        br.git(work, "push", "--quiet", "origin", "main")
        for index in range(args.passes):
            elapsed, doc = plan(f"file://{reactive}", demand, stamp, root / f"rcache-{index}")
            times["reactive"].append(elapsed)
    results = {"days": args.days, "seed": args.seed, "commits": len(series),
               "build_seconds": round(built, 2), "forecast": expected.extra, "replicas": replicas,
               "detail": expected.detail,
               **{label: {"median": round(statistics.median(v), 3), "min": round(min(v), 3),
                          "max": round(max(v), 3)} for label, v in times.items()}}
    print(json.dumps(results, indent=2))
    br.write_results("forecast", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
