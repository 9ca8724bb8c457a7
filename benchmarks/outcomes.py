"""The README's outcome tables: `gitscale simulate` on the three synthetic shapes.

    .venv/bin/python benchmarks/outcomes.py [--seed 1] [--hours 4]

Settings of the targets: pod start 45 s, sync 10 s, decisions every 10 s, scaleDownDelay 5m,
maxReplicas 200; gitscale with buffer 0 and 2, the baselines, gitscale behind a 3-minute
GitOps poll, and webhook mode (`gitscale serve`: window 10 s, `simulate --serve`). Then under saturation (more jobs than maxReplicas): spiky on the `default` preset
(max 10) and the burst at max 100, gitscale (polling and webhook mode) beside the listener and
the HRA, with the
saturation targets checked. Then the forecast rows: the weekly trace (two weeks of a weekday
09:00 burst), day 15 reported, gitscale reactive, with `forecast: {}` (lookback 14d,
quantile 0.9, lead 1m: the same weekday) and with `forecast: {days: workdays}` beside the
baselines. Prints Markdown tables (the same numbers
`gitscale simulate` prints).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

GITSCALE = str(Path(sys.executable).with_name("gitscale"))
POLICY = "{{minReplicas: 0, maxReplicas: 200, buffer: {b}, scaleDownDelay: 5m}}"


# (trace, the policy it runs under, its label) of the saturated rows
SATURATED = (("spiky", "default", "default preset"),
             ("burst", "{maxReplicas: 100, scaleDownDelay: 5m}", "max 100"))


def simulate(shape: str, seed: int, hours: float, *extra: str,
             policies: tuple[str, ...] = (POLICY.format(b=0), POLICY.format(b=2))
             ) -> list[dict]:  # type: ignore[type-arg]
    argv = [arg for policy in policies for arg in ("--policy", policy)]
    out = subprocess.run(
        [GITSCALE, "simulate", "--synthetic", shape, "--seed", str(seed), "--hours", str(hours),
         *argv, "--output", "json", *extra],
        check=True, capture_output=True, text=True, cwd="/").stdout
    return json.loads(out)["results"]  # type: ignore[no-any-return]


def serve_rows(shape: str, seed: int, hours: float, **kw: tuple[str, ...]
               ) -> list[dict]:  # type: ignore[type-arg]
    """Webhook mode (`simulate --serve`: window 10 s, reservation 10m, resync 5m) per policy."""
    rows = simulate(shape, seed, hours, "--serve", "--no-baselines", **kw)
    return [r for r in rows if r["name"] == "gitscale serve"]


def weekly(seed: int) -> list[dict]:  # type: ignore[type-arg]
    policy = "{minReplicas: 0, maxReplicas: 200, scaleDownDelay: 5m"
    out = subprocess.run(
        [GITSCALE, "simulate", "--synthetic", "weekly", "--seed", str(seed), "--report-from",
         "14d", "--policy", policy + "}", "--policy", policy + ", forecast: {}}", "--policy",
         policy + ", forecast: {days: workdays}}", "--output", "json"],
        check=True, capture_output=True, text=True, cwd="/").stdout
    return json.loads(out)["results"]  # type: ignore[no-any-return]


def forecasts(seed: int) -> None:
    print("\n| trace | strategy | wait p50 | p95 | max | runner-min × oracle | idle runner-min "
          "| pods | commits/hour |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in weekly(seed)[:6]:
        name = r["name"]
        if name == "gitscale":
            name = ("**gitscale**" if "forecast" not in r["policy"] else
                    "**gitscale, forecast workdays**" if "workdays" in r["policy"] else
                    "**gitscale, forecast**")
        print(row("weekly, day 15", name, r))


def row(shape: str, name: str, r: dict) -> str:  # type: ignore[type-arg]
    per_hour = r["commits_per_hour"]
    return (f"| {shape} | {name} | {r['wait_p50']:.0f} s | {r['wait_p95']:.0f} s | "
            f"{r['wait_max']:.0f} s | {r['vs_oracle']:.2f} | {r['idle_runner_minutes']:.0f} | "
            f"{r['pods_created']} | {'–' if per_hour is None else f'{per_hour:g}'} |")


def within(ours: float, theirs: float) -> bool:
    """The saturation target: within 10 % or 20 s of the listener's, whichever is larger."""
    return ours <= theirs + max(0.1 * theirs, 20)


def saturated(seed: int, hours: float) -> None:
    print("\n| trace | strategy | wait p50 | p95 | max | runner-min × oracle | idle runner-min "
          "| pods | commits/hour |")
    print("|---|---|---|---|---|---|---|---|---|")
    verdicts = []
    for shape, policy, label in SATURATED:
        rows = simulate(shape, seed, hours, policies=(policy,))
        gitscale, listener = rows[0], rows[1]
        for r in rows[:1] + serve_rows(shape, seed, hours, policies=(policy,)) + rows[1:3]:
            name = f"**{r['name']}**" if r["name"].startswith("gitscale") else r["name"]
            print(row(f"{shape}, {label}", name, r))
        p50, p95 = (within(gitscale[k], listener[k]) for k in ("wait_p50", "wait_p95"))
        cost = gitscale["runner_minutes"] / listener["runner_minutes"]
        verdicts.append(f"{shape}: p50 {gitscale['wait_p50']:.0f} s vs {listener['wait_p50']:.0f}"
                        f" s ({'met' if p50 else 'MISSED'}), p95 {gitscale['wait_p95']:.0f} s vs "
                        f"{listener['wait_p95']:.0f} s ({'met' if p95 else 'MISSED'}), "
                        f"runner-minutes {cost:.3f}x the listener's "
                        f"({'met' if cost <= 1.05 else 'MISSED'}), "
                        f"{gitscale['commits_per_hour']:g} commits/hour"
                        + (f" ({'met' if gitscale['commits_per_hour'] <= 30 else 'MISSED'})"
                           if policy == "default" else ""))
    print()
    for verdict in verdicts:
        print(f"- {verdict}")


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
        served = serve_rows(shape, args.seed, args.hours)
        for r in rows[:2] + [dict(r, name="gitscale, 3-min poll") for r in polled[:2]] \
                + served + rows[2:5]:
            name = r["name"]
            if name.startswith("gitscale"):
                name = f"**{name}**, buffer {2 if 'buffer: 2' in r['policy'] else 0}"
            print(row(shape, name, r))
    saturated(args.seed, args.hours)
    forecasts(args.seed)


if __name__ == "__main__":
    main()
