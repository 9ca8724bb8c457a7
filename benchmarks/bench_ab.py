#!/usr/bin/env python3
"""Two builds of gitscale, one CLI pass at a time, in the same minutes (A B B A A B ...).

    .venv/bin/python benchmarks/bench_ab.py --before main --passes 100          # main vs HEAD
    .venv/bin/python benchmarks/bench_ab.py --before REV --after DIR --sets 10000
    .venv/bin/python benchmarks/bench_ab.py --before main --checkout   # `--repo CHECKOUT`

Builds one steady fixture with bench_scale.py (a bare remote of --sets runner sets and the
state cache after two passes), then runs `gitscale reconcile --repo REMOTE.git --demand FILE
--now T` of each build on a fresh copy of that remote and cache, alternating, the order turned
every pass. Every pass's exit code, output (the copy's path replaced), commit id, tree and
message must be the same for both builds, or the run stops. ``--checkout``: each pass runs in
a fresh clone of that copy (`git clone`, untimed), `reconcile --repo CHECKOUT`: the CI cron
job's case, whose git differs (status, fetch, add, commit, push). A build is a git revision of this
repository (extracted with `git archive`) or a folder holding a `gitscale` package; both run
with this interpreter and its packages, each from its own source tree. Reported per build: the
median and first quartile of the wall time and of the CPU time (the process and the git it
waited for), and the median of the paired differences (each pass of one build against the
other's pass next to it) with a 95% bootstrap interval: steadier than either median on a
shared machine, whose load moves both alike. JSON with every sample goes to
benchmarks/results/ab-<UTC time>.json.
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path.insert(0, str(HERE))
import bench_reconcile as br  # noqa: E402 - the child environment and results


def source(spec: str, into: Path) -> Path:
    """A folder holding the ``gitscale`` package of ``spec`` (a folder, or a revision)."""
    if (Path(spec) / "gitscale").is_dir():
        return Path(spec).resolve()
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", spec, "gitscale"], cwd=PROJECT,
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def fixture(work: Path, sets: int) -> tuple[Path, Path, Path]:
    """The remote, the state cache and the next pass's demand file, after two passes."""
    subprocess.run([sys.executable, str(HERE / "bench_scale.py"), "--sets", str(sets),
                    "--passes", "2", "--warmup", "0", "--modes", "cli-clone",
                    "--workdir", str(work), "--keep"], check=True, stdout=subprocess.DEVNULL)
    return work / "cli-clone.git", work / "cache-cli-clone", work / "demand" / "demand-003.json"


def one_pass(name: str, src: Path, work: Path, remote: Path, cache: Path, demand: Path,
             now: str, env: dict[str, str],
             checkout: bool = False) -> tuple[float, float, tuple[Any, ...]]:
    here = work / f"pass-{name}"
    shutil.rmtree(here, ignore_errors=True)
    here.mkdir()
    shutil.copytree(remote, here / "remote.git", symlinks=True)
    shutil.copytree(cache, here / "cache")
    repo = here / "remote.git"
    if checkout:
        repo = here / "checkout"
        subprocess.run(["git", "clone", "--quiet", str(here / "remote.git"), str(repo)],
                       env=env, check=True)
    code = (f"import sys; sys.path.insert(0, {str(src)!r}); sys.argv[0] = 'gitscale'; "
            "from gitscale.cli import main; sys.exit(main())")
    argv = [sys.executable, "-c", code, "reconcile", "--repo", str(repo),
            "--demand", str(demand), "--now", now]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env={**env, "GITSCALE_CACHE_DIR": str(here / "cache")},
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    head = br.git(here / "remote.git", "log", "-1", "--format=%H %T%n%B", "main")
    seen = (proc.returncode, proc.stdout.replace(str(here), "D"),
            proc.stderr.replace(str(here), "D"), head)
    return wall, cpu, seen


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median_ms": statistics.median(ordered) * 1000,
            "q1_ms": ordered[len(ordered) // 4] * 1000}


def paired(a: list[float], b: list[float], rng: random.Random) -> dict[str, float]:
    diffs = [x - y for x, y in zip(a, b)]
    boot = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(2000))
    return {"median_ms": statistics.median(diffs) * 1000, "low_ms": boot[50] * 1000,
            "high_ms": boot[1949] * 1000, "b_faster": sum(d > 0 for d in diffs),
            "pairs": len(diffs)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="a revision or a folder (build A)")
    parser.add_argument("--after", default=str(PROJECT), help="build B (default: this tree)")
    parser.add_argument("--sets", type=int, default=1000)
    parser.add_argument("--passes", type=int, default=40)
    parser.add_argument("--now", help="the pinned clock (default: 30 s after the fixture's last "
                        "commit, inside the span its settled sets hold for)")
    parser.add_argument("--workdir")
    parser.add_argument("--fixture", help="a bench_scale.py work folder of two passes to use "
                        "(--keep; cache-cli-clone/ may hold build A's cache files beside B's) "
                        "instead of building one")
    parser.add_argument("--results", help="where the JSON goes (default: benchmarks/results)")
    parser.add_argument("--checkout", action="store_true",
                        help="run each pass in a checkout of the remote's copy (--repo CHECKOUT)")
    args = parser.parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="gitscale-ab-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**br.CHILD_ENV, "PYTHONPYCACHEPREFIX": str(work / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    try:
        builds = {"A": source(args.before, work / "src-A"), "B": source(args.after, work / "src-B")}
        print(f"building the {args.sets}-set fixture in {work} ...", flush=True)
        if args.fixture:
            where = Path(args.fixture)
            remote, cache = where / "cli-clone.git", where / "cache-cli-clone"
            demand = where / "demand" / "demand-003.json"
        else:
            remote, cache, demand = fixture(work / "fixture", args.sets)
        if args.now is None:
            # A fixed time would leave the settled answers of the fixture's passes (made at
            # the real time, each holding from then on) unused whenever it falls outside their
            # span: every set decided again, which no steady pass does.
            last = int(br.git(remote, "log", "-1", "--format=%ct", "main"))
            args.now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(last + 30))
        walls: dict[str, list[float]] = {"A": [], "B": []}
        cpus: dict[str, list[float]] = {"A": [], "B": []}
        reference = None
        load = [os.getloadavg()[0]]
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
        for number in range(args.passes):
            for name in ("A", "B") if number % 2 == 0 else ("B", "A"):
                wall, cpu, seen = one_pass(name, builds[name], work, remote, cache, demand,
                                           args.now, env, args.checkout)
                if reference is None:
                    reference = seen
                elif seen != reference:
                    print(f"pass {number + 1}, build {name}: not what the other build did "
                          f"(exit {seen[0]}):\n{seen[2][-1500:]}", file=sys.stderr)
                    return 1
                walls[name].append(wall)
                cpus[name].append(cpu)
        load.append(os.getloadavg()[0])
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    rng = random.Random(20261127)
    results = {"params": vars(args), "started_utc": started, "load": load,
               "builds": {k: str(v) for k, v in builds.items()},
               "wall": {k: summary(v) for k, v in walls.items()},
               "cpu": {k: summary(v) for k, v in cpus.items()},
               "paired_wall": paired(walls["A"], walls["B"], rng),
               "paired_cpu": paired(cpus["A"], cpus["B"], rng),
               "samples": {"wall": walls, "cpu": cpus}}
    print(f"{started} UTC, load {load[0]:.2f} -> {load[1]:.2f}, {args.passes} passes each, "
          f"{args.sets} sets{', in a checkout' if args.checkout else ''}")
    for name in ("A", "B"):
        w, c = results["wall"][name], results["cpu"][name]
        print(f"  {name}: wall median {w['median_ms']:.1f} ms (first quartile "
              f"{w['q1_ms']:.1f}), CPU median {c['median_ms']:.1f} ms ({c['q1_ms']:.1f})")
    for what in ("wall", "cpu"):
        p = results[f"paired_{what}"]
        print(f"  A - B, {what}: {p['median_ms']:.1f} ms (95%: {p['low_ms']:.1f} to "
              f"{p['high_ms']:.1f}), B faster in {p['b_faster']} of {p['pairs']}")
    if args.results:
        br.RESULTS = Path(args.results)
    out = br.write_results("ab", results)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
