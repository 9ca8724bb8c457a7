#!/usr/bin/env python3
"""`gitscale history` over a URL on a long history, and a pass on a long history.

    .venv/bin/python benchmarks/bench_history.py [--commits 100000] [--sets 1000] [--passes 5]

Builds with one `git fast-import` a config repo whose main branch has --commits scaling
commits (one every 30 s up to now, each a real gitscale commit: subject, body, Gitscale-Set
trailers, and the manifest it changed), plus a copy with the same final tree and only 100
commits. Both are served by URL (file://, through git's upload-pack, with
uploadpack.allowFilter on as on GitHub and GitLab). Interleaved, per pass:

  history-since   `gitscale history --repo URL --since <2 hours ago>`: a recent window
  history-all     `gitscale history --repo URL`: every row
  first-row       the time until the first row of history-all reaches stdout (streaming)
  pass-long       `gitscale reconcile --repo URL --demand FILE` on the long history
  pass-short      the same pass on the 100-commit copy (the ratio long/short is the row)

and the steps of history-all one by one (wall and CPU), to show where its time goes:

  step-start      `gitscale --version`: the interpreter and the CLI's imports
  step-clone      the clone history makes (`git clone --bare --filter=tree:0`)
  step-log        the `git log` history runs, in that clone (gitscale.record.history.LOG_ARGS)
  step-python     the Python per row: that log's output parsed and laid out as the table,
                  in one process (µs per row; in `history` it runs alongside git log)

With --checkout, `gitscale history` runs in a checkout of that history instead (a plain
clone), where it also reads the commits by people on managed files: --hand-labels N commits
by a bot that change only a label in a manifest (Renovate bumping something: no row) and
--hand-replicas M that change a set's replicas by hand (a row each), spread evenly through
the history (`fast-import` too). --before DIR times the same with an older gitscale (its
source folder, e.g. `git archive COMMIT gitscale | tar -x -C DIR`), interleaved run by run:

    .venv/bin/python benchmarks/bench_history.py --checkout --commits 20000 --sets 100 \
        --hand-labels 2000 --hand-replicas 20 --passes 5 [--before /tmp/gitscale-main]

Without --checkout, --before DIR times that older gitscale's `history --repo URL` over every
commit alongside (history-all-before, first-row-before), the two in alternating order.

Every history run is checked (the row count against the fixture). JSON results go to
benchmarks/results/history-<UTC time>.json.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import re
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
import bench_reconcile as br  # noqa: E402
import bench_scale as bs  # noqa: E402

PROJECT = HERE.parent
STEP = 30  # seconds between scaling commits


def build_history(remote: Path, fx: br.Fixture, commits: int, end: int, labels: int = 0,
                  hand_replicas: int = 0) -> dict[str, int]:
    """``commits`` scaling commits on main, the last one at ``end`` (epoch seconds), and
    ``labels`` + ``hand_replicas`` commits by a bot spread evenly between them (10 s after the
    scaling commit before each): the first change only a label of a manifest, the others its
    replicas (every (labels + hand_replicas) / hand_replicas-th one). Returns the commit times
    (to count rows in a window)."""
    br.git(remote.parent, "init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    files = {fx.paths[n]: fx.texts[n] for n in fx.names}
    files["gitscale.yaml"] = fx.config_text()
    files["demand.yaml"] = fx.demand_text(0)
    start = end - STEP * (commits - 1)
    out = subprocess.Popen(["git", "fast-import", "--quiet"], cwd=remote, stdin=subprocess.PIPE,
                           env=br.CHILD_ENV)
    assert out.stdin is not None
    write = out.stdin.write

    def data(text: str) -> None:
        raw = text.encode()
        write(b"data %d\n" % len(raw) + raw + b"\n")

    write(f"commit refs/heads/main\ncommitter bench <b@example.invalid> {start - STEP} "
          "+0000\n".encode())
    data("Add runner sets")
    for path, text in files.items():
        write(f"M 100644 inline {path}\n".encode())
        data(text)
    replicas = {n: 1 for n in fx.names}
    texts = dict(fx.texts)  # each manifest as its last commit left it
    hand = labels + hand_replicas
    after = {(k * commits) // hand: k for k in range(hand)} if hand else {}
    every = hand // hand_replicas if hand_replicas else 0
    for number in range(commits):
        name = fx.names[number % len(fx.names)]
        old, new = replicas[name], (replicas[name] % 9) + 1
        replicas[name] = new
        when = start + STEP * number
        message = (f"gitscale: {name} {old}→{new}\n\n- {name}: demand {new} (queued {new - 1}, "
                   f"running 1)\n\nGitscale-Set: {name} replicas={new} previous={old} "
                   f"patch={number + 1} queued={new - 1} running=1 reason=scale-up\n"
                   f"Gitscale-Base: {'0' * 40}\n")
        write(f"commit refs/heads/main\ncommitter gitscale <g@example.invalid> {when} "
              "+0000\n".encode())
        data(message)
        write(f"M 100644 inline {fx.paths[name]}\n".encode())
        texts[name] = fx.texts[name].replace("replicas: ", f"replicas: {new} # ", 1)
        data(texts[name])
        if number in after:
            k = after[number]
            name = fx.names[k % len(fx.names)]
            if every and k % every == every - 1:  # a person sets the count
                replicas[name] = (replicas[name] % 9) + 1
                texts[name] = fx.texts[name].replace("replicas: ", f"replicas: "
                                                     f"{replicas[name]} # ", 1)
                subject = f"{name}: hold {replicas[name]} runners"
            else:  # a bot bumps a label: nothing gitscale owns
                base = re.sub(r'\n  labels: \{bump: "\d+", ', "\n  labels: {", texts[name],
                              count=1)
                texts[name] = base.replace("\n  labels: {", f"\n  labels: {{bump: \"{k}\", ", 1)
                subject = f"chore(deps): update runner label to {k}"
            write(f"commit refs/heads/main\ncommitter Renovate Bot <bot@example.invalid> "
                  f"{when + 10} +0000\n".encode())
            data(subject)
            write(f"M 100644 inline {fx.paths[name]}\n".encode())
            data(texts[name])
    out.stdin.close()
    if out.wait() != 0:
        raise RuntimeError("git fast-import failed")
    br.git(remote, "config", "uploadpack.allowFilter", "true")
    br.git(remote, "config", "uploadpack.allowAnySHA1InWant", "true")
    br.git(remote, "gc", "--quiet")  # a served repo is packed (with bitmaps), as a host's is
    return {"start": start, "end": end}


def short_copy(long: Path, short: Path, keep: int) -> None:
    """The same final tree with only the last ``keep`` commits (a fresh root below them)."""
    shutil.copytree(long, short, symlinks=True)
    tip = br.git(short, "rev-parse", "main")
    cut = br.git(short, "rev-parse", f"main~{keep}")
    tree = br.git(short, "rev-parse", f"{cut}^{{tree}}")
    root = subprocess.run(["git", "commit-tree", tree, "-m", "history before"], cwd=short,
                          env=br.CHILD_ENV, capture_output=True, text=True).stdout.strip()
    # replay the last `keep` commits onto the new root
    revs = br.git(short, "rev-list", "--reverse", f"{cut}..{tip}").split()
    parent = root
    for rev in revs:
        message = br.git(short, "log", "-1", "--format=%B", rev)
        date = br.git(short, "log", "-1", "--format=%cI", rev)
        parent = subprocess.run(
            ["git", "commit-tree", f"{rev}^{{tree}}", "-p", parent, "-m", message], cwd=short,
            env={**br.CHILD_ENV, "GIT_COMMITTER_DATE": date, "GIT_AUTHOR_DATE": date},
            capture_output=True, text=True).stdout.strip()
    br.git(short, "update-ref", "refs/heads/main", parent)
    br.git(short, "gc", "--quiet", "--prune=now")


def first_row(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Wall time until the first table row (after the header) reaches us, and in all."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    first = None
    rows = 0
    for line in proc.stdout:
        if line.startswith(b"TIME"):
            continue
        rows += 1
        if first is None:
            first = time.perf_counter() - start
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    return {"first_row_s": first, "wall": wall, "rows": rows,
            "cpu": usage.ru_utime + usage.ru_stime, "code": os.waitstatus_to_exitcode(status),
            "stderr": proc.stderr.read().decode() if proc.stderr else ""}


# The Python half of `history`, timed on its own: git log's output for the whole history
# parsed and laid out as the table (no output written), CPU seconds per row.
PYTHON_STEP = """
import sys, time
from gitscale.commands.history_output import history_lines
from gitscale.record.history import parse_block
text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
start = time.process_time()
rows = sum(1 for _ in history_lines(parse_block(text, details=False))) - 1
print(rows, (time.process_time() - start) / max(rows, 1) * 1e6)
"""


def steps(url: str, work: Path, gitscale: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Each step of `gitscale history --repo URL`, alone: start-up, clone, log, Python."""
    from gitscale.record.history import LOG_ARGS

    clone = work / "step-clone.git"
    shutil.rmtree(clone, ignore_errors=True)
    found: dict[str, Any] = {"step-start": br.timed_child([*gitscale, "--version"], env=env)}
    found["step-clone"] = br.timed_child(
        ["git", "clone", "--quiet", "--no-tags", "--single-branch", "--template=", "--bare",
         "--filter=tree:0", "--", url, str(clone)], env=br.CHILD_ENV)
    log = br.timed_child(["git", *LOG_ARGS], cwd=clone, env=br.CHILD_ENV)
    found["step-log"] = {**log, "stdout": ""}
    (work / "step-log.txt").write_text(log["stdout"])
    python = br.timed_child([sys.executable, "-c", PYTHON_STEP, str(work / "step-log.txt")],
                            env=env)
    rows, per_row = python["stdout"].split()
    found["step-python"] = {**python, "rows": int(rows), "us_per_row": float(per_row)}
    shutil.rmtree(clone, ignore_errors=True)
    return found


# An older gitscale from its source folder: the editable install's finder (ahead of sys.path
# on sys.meta_path) is taken out first, or it would import this checkout's gitscale.
BEFORE = """import runpy, sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")]
sys.path.insert(0, {source!r})
runpy.run_module("gitscale", run_name="__main__")
"""


def checkout_mode(args: argparse.Namespace, work: Path, gitscale: list[str],
                  env: dict[str, str]) -> dict[str, Any]:
    """`gitscale history` in a checkout of a history with commits by a bot and by people,
    each run checked against the rows it must show; with ``args.before``, the older gitscale
    at that source folder too, run by run."""
    fx = br.Fixture(args.sets, 10, 2, 20261122)
    long = work / "long.git"
    t0 = time.perf_counter()
    build_history(long, fx, args.commits, int(time.time()) - 60, args.hand_labels,
                  args.hand_replicas)
    build = time.perf_counter() - t0
    checkout = work / "checkout"
    br.git(work, "clone", "--quiet", str(long), str(checkout))
    print(f"built {args.commits} scaling commits, {args.hand_labels} label-only and "
          f"{args.hand_replicas} replica edits by hand in {build:.1f}s", flush=True)
    rows = args.commits + args.hand_replicas
    runs = {"after": (gitscale, env, {rows})}
    if args.before:  # a gitscale that shows the label bumps as rows (before 0.1.0's), or not
        old = [sys.executable, "-c", BEFORE.format(source=str(Path(args.before).resolve()))]
        runs["before"] = (old, env, {rows, rows + args.hand_labels})
    samples: dict[str, list[dict[str, Any]]] = {label: [] for label in runs}
    for n in range(args.passes + 1):
        for label, (command, child_env, expected) in runs.items():
            streamed = first_row([*command, "history", "--repo", str(checkout)], child_env)
            if streamed["code"] != 0 or streamed["rows"] not in expected:
                raise RuntimeError(f"{label}: {streamed['rows']} rows, expected {expected}, "
                                   f"exit {streamed['code']}\n{streamed['stderr']}")
            print(f"  {'warm-up' if n == 0 else f'pass {n}/{args.passes}'} {label}: "
                  f"{streamed['wall']:.2f}s (first row {streamed['first_row_s']:.2f}s, CPU "
                  f"{streamed['cpu']:.2f}s, {streamed['rows']} rows)", flush=True)
            if n:
                samples[label].append(streamed)
    modes = {}
    for label, found in samples.items():
        walls = [s["wall"] for s in found]
        modes[f"checkout-{label}"] = {
            "walls_s": walls, "median_s": statistics.median(walls), "min_s": min(walls),
            "max_s": max(walls), "cpu_median_s": statistics.median(s["cpu"] for s in found),
            "first_row_median_s": statistics.median(s["first_row_s"] for s in found),
            "rows": found[0]["rows"]}
    return {"build_s": build, "modes": modes, "loadavg": os.getloadavg()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=100_000)
    parser.add_argument("--sets", type=int, default=1000)
    parser.add_argument("--short", type=int, default=100, help="commits of the short copy")
    parser.add_argument("--window-hours", type=float, default=2.0)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--workdir")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--checkout", action="store_true",
                        help="time `history` in a checkout (with the commits by hand) only")
    parser.add_argument("--hand-labels", type=int, default=0,
                        help="commits by a bot that change only a manifest's label")
    parser.add_argument("--hand-replicas", type=int, default=0,
                        help="commits by a person that change a set's replicas")
    parser.add_argument("--before", help="an older gitscale's source folder, timed alongside "
                        "(`history` in the checkout with --checkout, full `history --repo URL` "
                        "without)")
    args = parser.parse_args(argv)
    python = sys.executable
    script = Path(python).parent / "gitscale"
    gitscale = [str(script)] if script.exists() else [python, "-m", "gitscale"]
    work = Path(args.workdir or tempfile.mkdtemp(prefix="gitscale-history-"))
    work.mkdir(parents=True, exist_ok=True)
    br.CHILD_ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    br.CHILD_ENV["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    env = {**br.CHILD_ENV, "GITSCALE_CACHE_DIR": str(work / "cache")}
    if args.checkout:
        try:
            results = {"params": vars(args), **checkout_mode(args, work, gitscale, env)}
        finally:
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
        print(f"\n{args.commits} scaling commits, {args.hand_labels} label-only, "
              f"{args.hand_replicas} replica edits; medians of {args.passes} runs; load "
              f"average at the end {results['loadavg'][0]:.2f}")
        for key, m in results["modes"].items():
            print(f"  {key:<16} {m['median_s']:>7.3f}s  (min {m['min_s']:.3f}, max "
                  f"{m['max_s']:.3f})  CPU {m['cpu_median_s']:.3f}s  first row "
                  f"{m['first_row_median_s']:.2f}s  {m['rows']} rows")
        print(f"results: {br.write_results('history', results)}")
        return 0
    fx = br.Fixture(args.sets, 10, args.passes + 2, 20261122)
    results: dict[str, Any] = {"params": vars(args), "modes": {}}
    try:
        end = int(time.time()) - 60
        t0 = time.perf_counter()
        long = work / "long.git"
        times = build_history(long, fx, args.commits, end)
        results["build_s"] = time.perf_counter() - t0
        print(f"built {args.commits} commits in {results['build_s']:.1f}s", flush=True)
        short = work / "short.git"
        short_copy(long, short, args.short)
        since = dt.datetime.fromtimestamp(end - args.window_hours * 3600, dt.timezone.utc)
        since_text = since.strftime("%Y-%m-%dT%H:%M:%SZ")
        in_window = sum(1 for k in range(args.commits)
                        if times["start"] + STEP * k >= end - args.window_hours * 3600)
        url = long.as_uri()
        demand_dir = work / "demand"
        demand_dir.mkdir()
        demands = []
        for index in range(len(fx.demand)):
            path = demand_dir / f"demand-{index:03d}.json"
            path.write_text(bs.demand_text(fx, fx.demand[index], "json"))
            demands.append(path)
        for remote in (long, short):  # the first write of every set, untimed
            run = br.timed_child([*gitscale, "reconcile", "--repo", remote.as_uri(),
                                  "--demand", str(demands[0])], env=env)
            if run["code"] != 0:
                raise RuntimeError(run["stderr"])
        samples: dict[str, list[float]] = {k: [] for k in (
            "history-since", "history-all", "first-row", "pass-long", "pass-short",
            "step-start", "step-clone", "step-log")}
        cpu: dict[str, list[float]] = {k: [] for k in (
            "history-since", "history-all", "step-start", "step-clone", "step-log")}
        older_cli = None
        if args.before:  # an older gitscale's full history, interleaved with this one's
            older_cli = [sys.executable, "-c",
                      BEFORE.format(source=str(Path(args.before).resolve()))]
            samples.update({"history-all-before": [], "first-row-before": []})
            cpu["history-all-before"] = []
        per_row: list[float] = []
        for n in range(args.passes + 1):
            index = n + 1
            checks = {}
            since_run = br.timed_child([*gitscale, "history", "--repo", url, "--since",
                                        since_text], env=env)
            # rows: the fixture's, the first write's (one per set), then 10 per pass so far
            landed = args.sets + 10 * n
            rows = sum(1 for line in since_run["stdout"].splitlines()[1:] if line.strip())
            checks["history-since"] = since_run["code"] == 0 and rows == in_window + landed
            older = None
            if older_cli and n % 2:  # the older gitscale first every other pass
                older = first_row([*older_cli, "history", "--repo", url], env)
            streamed = first_row([*gitscale, "history", "--repo", url], env)
            if older_cli and older is None:
                older = first_row([*older_cli, "history", "--repo", url], env)
            checks["history-all"] = streamed["code"] == 0 \
                and streamed["rows"] == args.commits + landed
            if older is not None:
                checks["history-all-before"] = older["code"] == 0 \
                    and older["rows"] == streamed["rows"]
            step = steps(url, work, gitscale, env)  # the same history, step by step
            checks["steps"] = step["step-python"]["rows"] == streamed["rows"]
            passes = {}
            for label, remote in (("pass-long", long), ("pass-short", short)):
                before = br.remote_head(remote)
                passes[label] = br.timed_child([*gitscale, "reconcile", "--repo", remote.as_uri(),
                                                "--demand", str(demands[index])], env=env)
                check = br.verify_pass(remote, before, fx.expected_paths(index))
                checks[label] = passes[label]["code"] == 0 and check["ok"]
            if not all(checks.values()):
                raise RuntimeError(f"pass {index} failed its checks: {checks}; "
                                   f"since rows {rows} (expected {in_window}), all rows "
                                   f"{streamed['rows']}\n{since_run['stderr']}"
                                   f"{streamed['stderr']}")
            tag = "warm-up" if n == 0 else f"pass {n}/{args.passes}"
            print(f"  {tag}: since {since_run['wall']:.2f}s ({rows} rows), all "
                  f"{streamed['wall']:.2f}s (first row {streamed['first_row_s']:.2f}s), "
                  f"pass long {passes['pass-long']['wall']:.2f}s, short "
                  f"{passes['pass-short']['wall']:.2f}s", flush=True)
            if older is not None:
                print(f"    before: all {older['wall']:.2f}s (first row "
                      f"{older['first_row_s']:.2f}s, CPU {older['cpu']:.2f}s); after: CPU "
                      f"{streamed['cpu']:.2f}s", flush=True)
            print(f"    steps: start {step['step-start']['wall']:.2f}s, clone "
                  f"{step['step-clone']['wall']:.2f}s (CPU {step['step-clone']['cpu']:.2f}s), "
                  f"log {step['step-log']['wall']:.2f}s (CPU {step['step-log']['cpu']:.2f}s), "
                  f"Python {step['step-python']['us_per_row']:.1f} µs/row; history-all CPU "
                  f"{streamed['cpu']:.2f}s", flush=True)
            if n == 0:
                continue
            samples["history-since"].append(since_run["wall"])
            samples["history-all"].append(streamed["wall"])
            samples["first-row"].append(streamed["first_row_s"])
            if older is not None:
                samples["history-all-before"].append(older["wall"])
                samples["first-row-before"].append(older["first_row_s"])
                cpu["history-all-before"].append(older["cpu"])
            samples["pass-long"].append(passes["pass-long"]["wall"])
            samples["pass-short"].append(passes["pass-short"]["wall"])
            for key in ("step-start", "step-clone", "step-log"):
                samples[key].append(step[key]["wall"])
                cpu[key].append(step[key]["cpu"])
            cpu["history-since"].append(since_run["cpu"])
            cpu["history-all"].append(streamed["cpu"])
            per_row.append(step["step-python"]["us_per_row"])
        for key, values in samples.items():
            if not values:
                continue
            results["modes"][key] = {"walls_s": values, "median_s": statistics.median(values),
                                     "min_s": min(values), "max_s": max(values)}
            if key in cpu:
                results["modes"][key]["cpu_median_s"] = statistics.median(cpu[key])
        results["python_us_per_row"] = {"samples": per_row, "median": statistics.median(per_row)}
        results["rows_in_window"] = in_window
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    modes = results["modes"]
    ratio = modes["pass-long"]["median_s"] / modes["pass-short"]["median_s"]
    results["pass_long_over_short"] = ratio
    print(f"\n{args.commits} commits, {args.sets} sets; medians of {args.passes} passes")
    for key, m in modes.items():
        used = f"  CPU {m['cpu_median_s']:.3f}s" if "cpu_median_s" in m else ""
        print(f"  {key:<14} {m['median_s']:>7.3f}s  (min {m['min_s']:.3f}, max "
              f"{m['max_s']:.3f}){used}")
    print(f"  step-python    {results['python_us_per_row']['median']:.1f} µs per row")
    print(f"  pass on {args.commits} commits / pass on {args.short}: {ratio:.2f}×")
    out = br.write_results("history", results)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
