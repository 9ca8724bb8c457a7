#!/usr/bin/env python3
"""The forecast's day-15 target over many seeds, through the real CLI.

    .venv/bin/python benchmarks/forecast_seeds.py [--seeds 1-20] [--days weekly|repeat|holiday]
        [--policy '{…, forecast: {…}}'] [--gitscale PATH] [--rows]

Runs `gitscale simulate --synthetic weekly --seed S --report-from 14d --policy P
--no-baselines --output json` for each seed (two weeks of a weekday 09:00 burst of 100–140
jobs within 5 minutes, centred on 09:00 ± 3 min, then the Monday after) and prints one
Markdown row: on how many seeds p95 wait ≤ 30 s, runner-minutes × the oracle's (min, median,
max; how many ≤ 1.30), both targets, and commits per hour on day 15 (median, range).

`--days` picks what the past Mondays hold:
  weekly   the trace as drawn: every day its own burst (what the target is about);
  repeat   the two past Mondays are copies of day 15 (same jobs, same times): what the
           scaling itself costs when the pattern repeats exactly;
  holiday  day 15 without its burst (a burst that does not come): what the forecast pays
           (runner-minutes: the oracle's are a few background jobs').
`repeat` and `holiday` are written as a CSV trace (RFC 3339 arrivals) and run with `--trace`;
commits per hour then count from day 15 to the last arrival.

`--gitscale` runs another build (say, main's venv) for a before/after table. About 4 s a seed.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gitscale.simulate.trace import WEEKLY_HOURS, Job, synthetic  # noqa: E402

POLICY = "{minReplicas: 0, maxReplicas: 200, scaleDownDelay: 5m, forecast: {}}"
DAY = 86400.0
DAY_15 = 14 * DAY
BURST = (8.8 * 3600, 9.2 * 3600)  # 08:48–09:12: every burst job falls inside


def seeds(text: str) -> list[int]:
    found: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        found += range(int(low), int(high or low) + 1)
    return found


def jobs_of(seed: int, days: str) -> list[Job]:
    trace = synthetic("weekly", seed=seed, hours=WEEKLY_HOURS, sets=["default"])
    jobs = list(trace.jobs)
    if days == "holiday":
        # and one job at the end of day 15, so that the trace reaches it on every seed
        return [j for j in jobs if not DAY_15 + BURST[0] <= j.arrival < DAY_15 + BURST[1]] \
            + [Job(0, "default", DAY_15 + DAY - 60, 30.0)]
    # repeat: the Mondays before hold day 15's jobs (its background too), a week and two early
    monday = [j for j in jobs if j.arrival >= DAY_15]
    others = [j for j in jobs if j.arrival < DAY_15 and not (0 <= j.arrival < DAY
                                                             or 7 * DAY <= j.arrival < 8 * DAY)]
    copies = [Job(0, j.set, j.arrival - shift, j.duration)
              for shift in (14 * DAY, 7 * DAY) for j in monday]
    return sorted(copies + others + monday, key=lambda j: j.arrival)


def simulate(gitscale: str, seed: int, days: str, policy: str, scratch: Path) -> dict:  # type: ignore[type-arg]
    if days == "weekly":
        source = ["--synthetic", "weekly", "--seed", str(seed), "--report-from", "14d"]
    else:
        trace = synthetic("weekly", seed=seed, hours=WEEKLY_HOURS, sets=["default"])
        csv = scratch / f"{days}-{seed}.csv"
        csv.write_text("arrival,duration\n" + "".join(
            f"{(trace.start + timedelta(seconds=j.arrival)).isoformat()},{j.duration:g}\n"
            for j in jobs_of(seed, days)))
        start = (trace.start + timedelta(seconds=DAY_15)).isoformat()
        source = ["--trace", str(csv), "--report-from", start]
    out = subprocess.run([gitscale, "simulate", *source, "--policy", policy, "--no-baselines",
                          "--output", "json"], check=True, capture_output=True, text=True,
                         cwd="/").stdout
    return json.loads(out)["results"][0]  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default="1-20")
    parser.add_argument("--days", choices=("weekly", "repeat", "holiday"), default="weekly")
    parser.add_argument("--policy", default=POLICY)
    parser.add_argument("--gitscale", default=str(Path(sys.executable).with_name("gitscale")))
    parser.add_argument("--label", default="", help="the first cell of the row")
    parser.add_argument("--rows", action="store_true", help="also one line per seed")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for seed in seeds(args.seeds):
            r = results[seed] = simulate(args.gitscale, seed, args.days, args.policy,
                                         Path(scratch))
            if args.rows:
                print(f"seed {seed:2d}: p95 {r['wait_p95']:5.1f} s, max {r['wait_max']:5.1f} s, "
                      f"{r['vs_oracle']:.2f}x oracle, idle {r['idle_runner_minutes']:.0f} "
                      f"runner-min, {r['pods_created']} pods for {r['jobs']} jobs, "
                      f"{r['commits_per_hour']:g} commits/hour", file=sys.stderr, flush=True)
    rows = list(results.values())
    fast = sum(r["wait_p95"] <= 30 for r in rows)
    cheap = sum(r["vs_oracle"] <= 1.30 for r in rows)
    both = sum(r["wait_p95"] <= 30 and r["vs_oracle"] <= 1.30 for r in rows)
    costs = [r["vs_oracle"] for r in rows]
    commits = [r["commits_per_hour"] for r in rows]
    minutes = [r["runner_minutes"] for r in rows]
    print("| | p95 ≤ 30 s | runner-min × oracle: min / median / max | ≤ 1.30× | both "
          "| runner-min: median | commits/hour: median (range) |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {args.label or args.days} | {fast} of {len(rows)} | {min(costs):.2f} / "
          f"{statistics.median(costs):.2f} / {max(costs):.2f} | {cheap} | {both} | "
          f"{statistics.median(minutes):.0f} | "
          f"{statistics.median(commits):g} ({min(commits):g}–{max(commits):g}) |")


if __name__ == "__main__":
    main()
