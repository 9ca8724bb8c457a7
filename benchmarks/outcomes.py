"""The README's outcome table: `gitscale simulate` on the three synthetic shapes.

    .venv/bin/python benchmarks/outcomes.py [--seed 1] [--hours 4]

Settings of the targets: pod start 45 s, sync 10 s, decisions every 10 s, scaleDownDelay 5m,
maxReplicas 200; gitscale with buffer 0 and 2, the baselines, and gitscale behind a 3-minute
GitOps poll. Prints a Markdown table (the same numbers `gitscale simulate` prints). Then the
forecast rows: the weekly trace (two weeks of a weekday 09:00 burst), day 15 reported, gitscale
reactive and with `forecast: {}` (lookback 14d, quantile 0.9, lead 2m) beside the baselines.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

GITSCALE = str(Path(sys.executable).with_name("gitscale"))
POLICY = "{{minReplicas: 0, maxReplicas: 200, buffer: {b}, scaleDownDelay: 5m}}"


def simulate(shape: str, seed: int, hours: float, *extra: str) -> list[dict]:  # type: ignore[type-arg]
    out = subprocess.run(
        [GITSCALE, "simulate", "--synthetic", shape, "--seed", str(seed), "--hours", str(hours),
         "--policy", POLICY.format(b=0), "--policy", POLICY.format(b=2), "--output", "json",
         *extra], check=True, capture_output=True, text=True, cwd="/").stdout
    return json.loads(out)["results"]  # type: ignore[no-any-return]


def weekly(seed: int) -> list[dict]:  # type: ignore[type-arg]
    policy = "{minReplicas: 0, maxReplicas: 200, scaleDownDelay: 5m"
    out = subprocess.run(
        [GITSCALE, "simulate", "--synthetic", "weekly", "--seed", str(seed), "--report-from",
         "14d", "--policy", policy + "}", "--policy", policy + ", forecast: {}}", "--output",
         "json"], check=True, capture_output=True, text=True, cwd="/").stdout
    return json.loads(out)["results"]  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hours", type=float, default=4)
    args = parser.parse_args()
    print("| trace | strategy | wait p50 | p95 | max | runner-min × oracle | idle runner-min "
          "| pods | commits/hour |")
    print("|---|---|---|---|---|---|---|---|---|")
    for shape in ("steady", "spiky", "burst"):
        rows = simulate(shape, args.seed, args.hours)
        polled = simulate(shape, args.seed, args.hours, "--sync-poll", "3m", "--no-baselines")
        for row in rows[:2] + [dict(r, name="gitscale, 3-min poll") for r in polled[:2]] \
                + rows[2:5]:
            name = row["name"]
            if name.startswith("gitscale"):
                name = f"**{name}**, buffer {2 if 'buffer: 2' in row['policy'] else 0}"
            per_hour = row["commits_per_hour"]
            print(f"| {shape} | {name} | {row['wait_p50']:.0f} s | {row['wait_p95']:.0f} s | "
                  f"{row['wait_max']:.0f} s | {row['vs_oracle']:.2f} | "
                  f"{row['idle_runner_minutes']:.0f} | {row['pods_created']} | "
                  f"{'–' if per_hour is None else f'{per_hour:g}'} |")
    for row in weekly(args.seed)[:5]:
        name = row["name"]
        if name == "gitscale":
            name = "**gitscale, forecast**" if "forecast" in row["policy"] else "**gitscale**"
        per_hour = row["commits_per_hour"]
        print(f"| weekly, day 15 | {name} | {row['wait_p50']:.0f} s | {row['wait_p95']:.0f} s | "
              f"{row['wait_max']:.0f} s | {row['vs_oracle']:.2f} | "
              f"{row['idle_runner_minutes']:.0f} | {row['pods_created']} | "
              f"{'–' if per_hour is None else f'{per_hour:g}'} |")


if __name__ == "__main__":
    main()
