#!/usr/bin/env python3
"""Scale: a pass costs what changes, not what exists (issue 9's rows).

    .venv/bin/python benchmarks/bench_scale.py --sets 10000 [--changing 10] [--passes 7]
    .venv/bin/python benchmarks/bench_scale.py --sets 1000 --modes cli-clone,plan,baseline

Builds a bare remote with --sets RunnerSet manifests (the fixture of bench_reconcile.py) in one
`git fast-import` (no file is written to disk). The remote allows partial clones
(`uploadpack.allowFilter=true`), as GitHub, GitLab and Gitea do. `--remote path` (the default)
hands gitscale the remote's path: git clones a local path by linking its objects, no transfer
at all; `--remote url` hands it a file:// URL: git's transport, as over https or ssh, where a
pass makes a partial clone (commits and trees; the blobs it reads, fetched in batches). Then:

  first-pass  `gitscale reconcile --repo REMOTE.git` with an empty state cache: every set is
              new and written once (patchID 0) — the "first pass over N new sets" row
  cli-clone   `gitscale reconcile --repo REMOTE.git --demand FILE`: a fresh (sparse) clone per
              pass, the state cache on disk warm from the previous pass
  run         the pass of `gitscale run` (commands.run._one_pass) in one long-lived process
              on its kept clone: sync, plan, commit, push
  plan        `gitscale plan --repo REMOTE.git --demand FILE` (fresh clone, writes nothing)
  baseline    benchmarks/baseline_yq.sh on a checkout: yq per file + git add/commit/push

Modes are interleaved pass by pass (order rotated), so a slow spell on a shared machine lands
on all of them; every pass is checked (one commit touching exactly the expected manifests;
plan: exactly --changing sets listed as changing). Demand files are JSON by default (what a
program writes; --demand-format yaml for YAML). Results: a table and
benchmarks/results/scale-<sets>-<UTC time>.json.
"""
from __future__ import annotations

import argparse
import json
import os
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
sys.path.insert(0, str(HERE))
import bench_reconcile as br  # noqa: E402 - the fixture, the checks and the child environment

PROJECT = HERE.parent


def fast_import(remote: Path, files: dict[str, str], message: str) -> None:
    """One commit holding ``files`` on refs/heads/main of a new bare ``remote``."""
    br.git(remote.parent, "init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    br.git(remote, "config", "uploadpack.allowFilter", "true")  # as a forge does
    chunks = [f"commit refs/heads/main\ncommitter bench <bench@example.invalid> "
              f"{int(time.time())} +0000\ndata {len(message.encode())}\n{message}\n"]
    for path, text in files.items():
        data = text.encode()
        chunks.append(f"M 100644 inline {path}\ndata {len(data)}\n")
        chunks.append(data.decode() + "\n")
    stream = "".join(chunks).encode()
    proc = subprocess.run(["git", "fast-import", "--quiet"], cwd=remote, input=stream,
                          env=br.CHILD_ENV, capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.decode())


def demand_text(fx: br.Fixture, demand: dict[str, tuple[int, int]], fmt: str) -> str:
    if fmt == "json":
        return json.dumps({n: {"queued": q, "running": r} for n, (q, r) in demand.items()},
                          indent=0)
    return "".join(f"{n}: {{queued: {q}, running: {r}}}\n" for n, (q, r) in demand.items())


class Cli:
    """One gitscale subprocess per pass on a fresh clone of its own remote."""

    def __init__(self, label: str, gitscale: list[str], remote: Path, fx: br.Fixture,
                 demands: list[Path], cache_dir: Path, command: str = "reconcile",
                 location: str | None = None) -> None:
        self.label, self.gitscale, self.remote, self.fx = label, gitscale, remote, fx
        self.demands, self.command = demands, command
        self.location = location or str(remote)  # what --repo says: the path, or a URL
        self.env = {**br.CHILD_ENV, "GITSCALE_CACHE_DIR": str(cache_dir)}

    def run(self, index: int) -> dict[str, Any]:
        before = br.remote_head(self.remote)
        argv = [*self.gitscale, self.command, "--repo", self.location, "--demand",
                str(self.demands[index])]
        run = timed_rss(argv, self.env)
        if self.command == "plan":
            listed = sum(1 for line in run["stdout"].splitlines() if line.startswith("~ "))
            ok = run["code"] == 2 and listed == self.fx.changing \
                and br.remote_head(self.remote) == before
            check = {"ok": ok, "problem": f"exit {run['code']}, {listed} sets listed"}
        else:
            check = br.verify_pass(self.remote, before, self.fx.expected_paths(index))
            ok = run["code"] == 0 and check["ok"]
        if not ok:
            raise br._failed(self.label, index, run["code"], check,
                             run["stdout"] + run["stderr"])
        return {"wall": run["wall"], "cpu": run["cpu"], "rss_kib": run["maxrss_kib"]}

    def close(self) -> dict[str, Any]:
        return {}


def timed_rss(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """br.timed_child, with the peak RSS measured by GNU time: a child forked from this
    (large) process inherits its resident size in ru_maxrss until it execs."""
    with tempfile.NamedTemporaryFile("r") as out:
        time_bin = shutil.which("time") or "/usr/bin/time"
        wrapped = [time_bin, "-f", "%M", "-o", out.name, *argv] if Path(time_bin).exists() \
            else argv
        run = br.timed_child(wrapped, env=env)
        text = Path(out.name).read_text().strip().splitlines()
        if text and text[-1].isdigit():
            run["maxrss_kib"] = int(text[-1])
    return run


def vm_hwm_kib() -> int:
    """This process's peak RSS since it started its program (ru_maxrss counts the parent's
    memory it was forked with)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class Loop:
    """The pass of `gitscale run` in a worker process that keeps its clone between passes."""

    def __init__(self, python: str, remote: Path, demands: list[Path], fx: br.Fixture,
                 cache_dir: Path, location: str | None = None) -> None:
        self.remote, self.fx = remote, fx
        env = {**br.CHILD_ENV, "GITSCALE_CACHE_DIR": str(cache_dir)}
        self.proc = subprocess.Popen(
            [python, __file__, "--loop-worker", location or str(remote),
             json.dumps([str(d) for d in demands])],
            cwd=PROJECT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.hello = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("loop worker died")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"loop worker: {reply['error']}")
        return reply

    def run(self, index: int) -> dict[str, Any]:
        assert self.proc.stdin is not None
        before = br.remote_head(self.remote)
        self.proc.stdin.write(f"{index}\n")
        self.proc.stdin.flush()
        sample = self._read()
        check = br.verify_pass(self.remote, before, self.fx.expected_paths(index))
        if sample["code"] != 0 or not check["ok"]:
            raise br._failed("run", index, sample["code"], check, sample.get("log", ""))
        return sample

    def close(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=120)
        return {"first_pass_in_loop_s": self.hello.get("first_pass_s")}


def loop_worker(remote: str, demands_json: str) -> int:
    """`gitscale run`'s pass, driven one pass per line on stdin."""
    import contextlib
    import io
    import traceback

    from gitscale.files import default_cache_dir
    from gitscale.plan.cache import StateCache
    from gitscale.commands import RepoOptions
    from gitscale.commands.run import LoopState, _one_pass
    from gitscale.demand.resolve import Sources
    from gitscale.metrics import LoopMetrics
    from gitscale.timeutil import utcnow
    from gitscale.repo.opening import open_workspace

    demands = json.loads(demands_json)
    opts = RepoOptions(remote, None, "gitscale.yaml")
    cache = StateCache.load(default_cache_dir())
    sources = Sources(None)
    state = LoopState(30.0)
    metrics = LoopMetrics()  # as `run` keeps them (no listener)
    out = sys.stdout
    with open_workspace(remote, None, sparse=True, kept=True) as ws:  # as `run` opens it
        out.write(json.dumps({"ready": True}) + "\n")
        out.flush()
        number = 0
        for line in sys.stdin:
            index = int(line)
            log = io.StringIO()
            try:
                with contextlib.redirect_stderr(log), contextlib.redirect_stdout(log):
                    t0 = time.perf_counter()
                    usage0 = resource.getrusage(resource.RUSAGE_SELF)
                    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    code = _one_pass(ws, opts, demands[index], cache, sources, state, utcnow,
                                     number, metrics)
                    wall = time.perf_counter() - t0
                    usage1 = resource.getrusage(resource.RUSAGE_SELF)
                    kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                number += 1
                cpu = sum(getattr(b, f) - getattr(a, f) for a, b in ((usage0, usage1),
                                                                     (kids0, kids1))
                          for f in ("ru_utime", "ru_stime"))
                out.write(json.dumps({"wall": wall, "cpu": cpu, "code": code,
                                      "rss_kib": vm_hwm_kib(),
                                      "log": log.getvalue()[-2000:]}) + "\n")
            except Exception:  # noqa: BLE001 - reported to the driving process
                out.write(json.dumps({"error": traceback.format_exc()}) + "\n")
            out.flush()
    return 0


class Baseline:
    def __init__(self, checkout: Path, remote: Path, fx: br.Fixture, flavor: str,
                 edits: Path) -> None:
        self.inner = br.BaselineRunner(checkout, remote, fx, flavor, edits)

    def run(self, index: int) -> dict[str, Any]:
        sample = self.inner.run(index)
        return {"wall": sample["wall"], "cpu": sample["cpu"], "rss_kib": 0}  # (see timed_rss)

    def close(self) -> dict[str, Any]:
        return self.inner.close()


def stats(samples: list[dict[str, Any]]) -> dict[str, Any]:
    walls = [s["wall"] for s in samples]
    return {"walls_s": walls, "median_s": statistics.median(walls), "min_s": min(walls),
            "max_s": max(walls), "cpu_median_s": statistics.median(s["cpu"] for s in samples),
            "peak_rss_kib": max(s["rss_kib"] for s in samples)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", type=int, default=10_000)
    parser.add_argument("--changing", type=int, default=10)
    parser.add_argument("--passes", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--modes", default="cli-clone,run,plan,baseline")
    parser.add_argument("--demand-format", choices=["json", "yaml"], default="json")
    parser.add_argument("--remote", choices=["path", "url"], default="path",
                        help="--repo as the remote's path, or as a file:// URL (see above)")
    parser.add_argument("--seed", type=int, default=20261122)
    parser.add_argument("--workdir")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--loop-worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.loop_worker:
        return loop_worker(*args.loop_worker)
    modes = [m for m in args.modes.split(",") if m]
    python = sys.executable
    script = Path(python).parent / "gitscale"
    gitscale = [str(script)] if script.exists() else [python, "-m", "gitscale"]
    work = Path(args.workdir or tempfile.mkdtemp(prefix="gitscale-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    br.CHILD_ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    br.CHILD_ENV["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    total = args.warmup + args.passes + 1
    fx = br.Fixture(args.sets, args.changing, total, args.seed)
    fx.changing = args.changing  # type: ignore[attr-defined]
    suffix = args.demand_format
    results: dict[str, Any] = {
        "params": vars(args) | {"modes": modes},
        "command": " ".join(["benchmarks/bench_scale.py", *(argv or sys.argv[1:])]),
        "environment": {"python": sys.version.split()[0], "cpus": os.cpu_count(),
                        "git": subprocess.run(["git", "--version"], capture_output=True,
                                              text=True).stdout.strip(),
                        "gitscale_commit": subprocess.run(
                            ["git", "rev-parse", "HEAD"], cwd=PROJECT, capture_output=True,
                            text=True).stdout.strip()},
        "modes": {}}
    try:
        print(f"building {args.sets} runner sets in {work} (git fast-import) ...", flush=True)
        t0 = time.perf_counter()
        template = work / "template.git"
        files = {fx.paths[n]: fx.texts[n] for n in fx.names}
        files["gitscale.yaml"] = fx.config_text()
        files["demand.yaml"] = fx.demand_text(0)
        fast_import(template, files, "Add runner sets")
        results["build_s"] = time.perf_counter() - t0
        demand_dir = work / "demand"
        demand_dir.mkdir()
        demands = []
        for index in range(len(fx.demand)):
            path = demand_dir / f"demand-{index:03d}.{suffix}"
            path.write_text(demand_text(fx, fx.demand[index], args.demand_format))
            demands.append(path)
        # plan compares with the state after the first pass: its demand moves --changing sets
        plan_demands = []
        for index in range(len(fx.demand)):
            moved = dict(fx.demand[0]) | {n: fx.demand[index][n] for n in fx.changed[index]}
            path = demand_dir / f"plan-{index:03d}.{suffix}"
            path.write_text(demand_text(fx, moved, args.demand_format))
            plan_demands.append(path)

        print("first pass over every set (empty state cache) ...", flush=True)
        first_cache = work / "cache-first"
        where = template.as_uri() if args.remote == "url" else str(template)
        first = timed_rss([*gitscale, "reconcile", "--repo", where, "--demand",
                           str(demands[0])],
                          {**br.CHILD_ENV, "GITSCALE_CACHE_DIR": str(first_cache)})
        if first["code"] != 0:
            raise RuntimeError(f"first pass failed:\n{first['stdout'][-2000:]}{first['stderr']}")
        written = br.git(template, "diff-tree", "--no-commit-id", "--name-only", "-r", "main")
        if len(written.splitlines()) != args.sets:
            raise RuntimeError(f"first pass wrote {len(written.splitlines())} files")
        results["first_pass"] = {"wall_s": first["wall"], "cpu_s": first["cpu"],
                                 "peak_rss_kib": first["maxrss_kib"]}
        print(f"  {first['wall']:.2f}s, peak RSS {first['maxrss_kib'] // 1024} MiB", flush=True)

        runners: dict[str, Any] = {}
        for mode in modes:
            remote = work / f"{mode}.git"
            shutil.copytree(template, remote, symlinks=True)
            cache = work / f"cache-{mode}"
            shutil.copytree(first_cache, cache)  # each mode starts from the first pass's cache
            location = remote.as_uri() if args.remote == "url" else str(remote)
            if mode == "cli-clone":
                runners[mode] = Cli(mode, gitscale, remote, fx, demands, cache,
                                    location=location)
            elif mode == "plan":
                runners[mode] = Cli(mode, gitscale, remote, fx, plan_demands, cache, "plan",
                                    location=location)
            elif mode == "run":
                runners[mode] = Loop(python, remote, demands, fx, cache, location)
            elif mode == "baseline":
                yq = br.detect_yq()
                if yq["flavor"] is None:
                    print(f"baseline skipped: {yq['hint']}")
                    continue
                checkout = work / "baseline-checkout"
                br.git(work, "clone", "--quiet", str(remote), str(checkout))
                runners[mode] = Baseline(checkout, remote, fx, yq["flavor"],
                                         work / "baseline-edits")
        order = list(runners)
        samples: dict[str, list[dict[str, Any]]] = {k: [] for k in order}
        for n in range(args.warmup + args.passes):
            index = n + 1
            turn = order[n % len(order):] + order[:n % len(order)]
            shown = []
            for key in turn:
                sample = runners[key].run(index)
                if n >= args.warmup:
                    samples[key].append(sample)
                shown.append(f"{key} {sample['wall']:.2f}s")
            tag = "warm-up" if n < args.warmup else f"pass {n - args.warmup + 1}/{args.passes}"
            print(f"  {tag}: " + ", ".join(shown), flush=True)
        for key in order:
            results["modes"][key] = stats(samples[key]) | runners[key].close()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    base = results["modes"].get("baseline")
    print(f"\n{args.sets} sets, {args.changing} changing per pass, median of {args.passes} "
          f"passes (demand as {args.demand_format}, --repo as a {args.remote}); first pass "
          "over every set: "
          f"{results['first_pass']['wall_s']:.2f}s")
    print(f"{'mode':<10} {'median':>8} {'min':>8} {'max':>8} {'cpu':>7} {'peak RSS':>9} "
          f"{'baseline/x':>10}")
    for key, m in results["modes"].items():
        ratio = base["median_s"] / m["median_s"] if base else None
        m["ratio_baseline_over_mode"] = ratio
        print(f"{key:<10} {m['median_s']:>7.3f}s {m['min_s']:>7.3f}s {m['max_s']:>7.3f}s "
              f"{m['cpu_median_s']:>6.2f}s {m['peak_rss_kib'] / 1024:>6.0f} MiB "
              f"{'' if ratio is None else f'{ratio:>9.2f}×'}")
    out = br.write_results(f"scale-{args.sets}", results)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
