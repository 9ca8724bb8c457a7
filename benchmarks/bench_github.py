#!/usr/bin/env python3
"""Benchmark the GitHub polling source: requests and wall time per pass, cold and warm cache.

    .venv/bin/python benchmarks/bench_github.py [--repos 100] [--passes 5] [--latency-ms 0]

Serves an org of --repos repos from the fake GitHub of the tests (tests/demand/fake_github.py,
a real HTTP server on 127.0.0.1, pages capped at --per-page like api.github.com's 100), with a
few queued and in-progress runs per repo, one repo with --busy-runs queued runs and one run
with --matrix-jobs jobs (both more than a page). Three runner sets share one org poll.

Each pass is one ``read_demand`` of the config, as `gitscale reconcile` does it:

  cold        an empty cache directory: every page is a 200
  warm-cron   a new ``Sources`` per pass loading the ETag cache file (one CLI run per pass)
  warm-loop   one ``Sources`` kept across passes (what a loop keeps in memory)

--latency-ms makes the server wait before every answer, as a far-away API would; the poll
sends up to ``source.github.concurrency`` (8) requests at once, so wall time is about
requests × latency / 8. Requests per pass: the org's repo pages, one per repo and run status
(queued, in_progress, waiting: 3 × repos), and one per page of each listed run's jobs.
Figures: a table on stdout; nothing is written outside a temporary directory.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "tests" / "demand"))

import fake_github  # type: ignore[import-not-found]  # noqa: E402  (tests/demand/fake_github.py)

from gitscale.config.load import load_config  # noqa: E402
from gitscale.demand.resolve import Sources, read_demand  # noqa: E402

TOKEN = "ghp_benchmark_token_0000000000000000000000"
SETS = [("linux-x64", ["self-hosted", "linux", "x64"]),
        ("gpu", ["self-hosted", "linux", "gpu"]),
        ("arm64", ["self-hosted", "linux", "arm64"])]


def write_config(root: Path, url: str) -> None:
    lines = ["runnerSets:"]
    for name, labels in SETS:
        lines += [f"  - name: {name}", f"    manifest: sets/{name}.yaml",
                  f"    source: {{github: {{org: acme, labels: [{', '.join(labels)}], "
                  f"apiUrl: '{url}', token: {{env: BENCH_GH_TOKEN}}}}}}",
                  "    policy: {minReplicas: 0, maxReplicas: 1000}"]
    (root / "gitscale.yaml").write_text("\n".join(lines) + "\n")


def one_pass(fake: fake_github.FakeGitHub, root: Path, sources: Sources,
             fixture: fake_github.OrgFixture) -> dict[str, float]:
    config = load_config(root)
    fake.clear_log()
    limit_before = fake.remaining
    started = time.perf_counter()
    reading = read_demand(root, config, None, sources)
    wall = time.perf_counter() - started
    if reading.errors:
        raise SystemExit(f"a pass failed: {reading.errors}")
    for name, labels in SETS:  # the benchmark checks what it measures
        got = (reading.demands[name].queued, reading.demands[name].running)
        if got != fixture.expected(labels):
            raise SystemExit(f"{name}: read {got}, expected {fixture.expected(labels)}")
    log = list(fake.log)
    return {"wall": wall, "requests": len(log), "ok": sum(r.status == 200 for r in log),
            "not_modified": sum(r.status == 304 for r in log),
            "rate_limit": limit_before - fake.remaining}


def cache_size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("etags-*.json"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repos", type=int, default=100)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--per-page", type=int, default=100, help="the server's page cap")
    parser.add_argument("--busy-runs", type=int, default=150)
    parser.add_argument("--matrix-jobs", type=int, default=120)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parser.parse_args()
    os.environ["BENCH_GH_TOKEN"] = TOKEN

    with tempfile.TemporaryDirectory(prefix="gitscale-bench-github-") as tmp, \
            fake_github.FakeGitHub(token=TOKEN, max_per_page=args.per_page) as fake:
        work = Path(tmp)
        fixture = fake_github.populate_org(fake, "acme", args.repos,
                                           busy_repo_runs=args.busy_runs,
                                           matrix_jobs=args.matrix_jobs)
        if args.latency_ms:
            fake.fail("slow", delay=args.latency_ms / 1000)
        root = work / "repo"
        root.mkdir()
        write_config(root, fake.url)
        runs = sum(1 for rs in fake.runs.values() for r in rs if r.status != "completed")
        jobs = len(fixture.jobs)

        results: dict[str, list[dict[str, float]]] = {"cold": [], "warm-cron": [],
                                                      "warm-loop": []}
        sizes: dict[str, int] = {}
        for i in range(args.passes):
            cold_dir = work / f"cold-{i}"
            cold_dir.mkdir()
            sources = Sources(cold_dir)
            results["cold"].append(one_pass(fake, root, sources, fixture))
            sources.close()
            sizes["cold"] = cache_size(cold_dir)
        warm_dir = work / "cold-0"  # the cache the first cold pass left behind
        for _ in range(args.passes):
            sources = Sources(warm_dir)
            results["warm-cron"].append(one_pass(fake, root, sources, fixture))
            sources.close()
        sizes["warm-cron"] = cache_size(warm_dir)
        loop = Sources(warm_dir)
        for _ in range(args.passes):
            results["warm-loop"].append(one_pass(fake, root, loop, fixture))
        loop.close()
        sizes["warm-loop"] = cache_size(warm_dir)

    print(f"gitscale GitHub polling: {args.repos} repos (+1 archived), {runs} queued/in-progress "
          f"runs, {jobs} jobs (all states); pages of {args.per_page}; 3 sets, one org poll; "
          f"server latency {args.latency_ms:g} ms; {args.passes} passes per mode")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs\n")
    header = (f"{'mode':<10} {'requests':>8} {'200':>5} {'304':>5} {'304 %':>6} "
              f"{'limit used':>10} {'wall median':>11} {'min':>7} {'max':>7} "
              f"{'ms/req':>7} {'cache file':>10}")
    print(header)
    print("-" * len(header))
    for mode, samples in results.items():
        walls = [s["wall"] for s in samples]
        last = samples[-1]
        median = statistics.median(walls)
        print(f"{mode:<10} {last['requests']:>8.0f} {last['ok']:>5.0f} "
              f"{last['not_modified']:>5.0f} "
              f"{100 * last['not_modified'] / last['requests']:>5.1f}% "
              f"{last['rate_limit']:>10.0f} {median:>10.3f}s {min(walls):>6.3f}s "
              f"{max(walls):>6.3f}s {1000 * median / last['requests']:>7.2f} "
              f"{sizes[mode] / 1e6:>8.2f}MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
