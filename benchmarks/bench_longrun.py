#!/usr/bin/env python3
"""Months of `run`, `serve` and a cron `reconcile`, compressed: what grows, and what it costs.

    .venv/bin/python benchmarks/bench_longrun.py [--modes run,quiet,serve,reconcile,kill]
        [--passes 2000] [--deliveries 3000] [--histories 10000,100000] [--kills 5]

Everything is built under a temporary directory (TMPDIR, or --workdir) and deleted at the
end (--keep keeps it). The config repo is tests/integration/seed.py's (two sets,
scaleDownDelay 0s), served as a bare remote by file:// URL (git's transport, as over https).

  run        `gitscale run --repo URL --demand FILE` for --passes passes, without waiting
             between them (LoopState.delay patched to 0 in the process; nothing else is
             changed), the demand alternating so that every pass commits and pushes: a busy
             repo's months in minutes. Every --sample passes: the process's RSS, threads and
             open files, the state cache's rows, and the kept clone's loose objects, packs,
             size, reflog lines and .git/shallow lines; seconds per pass over the last sample.
  quiet      the same loop with a demand that never changes, its clock advancing 30 s a pass
             (time.monotonic patched in that process): log lines per hour of a quiet day.
  serve      `gitscale serve --repo URL --window 1s --resync 0 --hold 5m --reservation 1m` (the
             tombstones of completed jobs stay that long) as its own process, sent
             --deliveries signed workflow_job deliveries (queued then completed, a new job id
             each, 25 a second on one connection each); every 250: its RSS, threads, open files
             and the clone's objects; at the end every commit checked to have landed.
  etags      GitHub polling as `run` polls (one Sources kept), 300 passes against a fake org
             of 20 repos (tests/demand/fake_github.py) where each pass 10 runs finish and 10
             new ones of 5 queued jobs start: the ETag cache's entries, its file and the RSS
             every 100 passes.
  reconcile  one-shot `gitscale reconcile --repo URL --demand FILE` (a CI cron job, the cache
             directory kept between runs) on histories of 100 and --histories commits (built
             with one fast-import, packed as a host packs them), 5 passes each, interleaved.
  kill       --kills times: `gitscale run --repo URL` killed with SIGKILL after its first pass;
             what is left in TMPDIR and the cache directory, then after one more `plan`.

JSON results go to benchmarks/results/longrun-<UTC time>.json.
"""
from __future__ import annotations

import argparse
import hashlib
import hmac
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(HERE))
import bench_reconcile as br  # noqa: E402
from tests.integration import seed  # noqa: E402

ENV = {**br.CHILD_ENV}
SECRET = "bench-secret"

# The `run` worker: the real CLI in a process whose loop does not wait between passes, which
# writes the pass's demand first and prints what the process and its clone hold every --sample.
WORKER = r"""
import json, os, subprocess, sys, time
if os.environ.get("BENCH_BEFORE"):  # an older gitscale's source, ahead of the editable install
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")]
    sys.path.insert(0, os.environ["BENCH_BEFORE"])
import gitscale.commands.run as run
demand_path, sample, change, step = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", float(sys.argv[4])
run.LoopState.delay = lambda self: 0.0
if step:  # a simulated clock for the log's ten-minute rule: `step` seconds a pass
    fake = [time.monotonic()]
    real = time.monotonic
    time.monotonic = lambda: fake[0]
one_pass = run._one_pass
started = [time.perf_counter()]

def lines(path):
    try:
        with open(path, "rb") as handle:
            return sum(1 for _ in handle)
    except OSError:
        return 0

def stats(root, cache):
    counts = dict(l.split(": ") for l in subprocess.run(
        ["git", "count-objects", "-v"], cwd=root, capture_output=True, text=True).stdout.splitlines())
    status = {l.split(":")[0]: l.split()[1] for l in open("/proc/self/status")
              if l.startswith(("VmRSS", "Threads"))}
    size = sum(f.stat().st_size for f in (root / ".git").rglob("*") if f.is_file())
    zombies = 0  # children that died and were never reaped (process 1 reaps no orphan)
    for entry in os.listdir("/proc"):
        try:
            stat = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        zombies += stat[0] == "Z" and int(stat[1]) == os.getpid()
    return {"zombies": zombies, "rss_kib": int(status["VmRSS"]), "threads": int(status["Threads"]),
            "fds": len(os.listdir("/proc/self/fd")), "cache_rows": len(cache.rows),
            "loose": int(counts["count"]), "packs": int(counts["packs"]),
            "in_pack": int(counts["in-pack"]), "git_kib": size // 1024, "reflog": lines(root / ".git" / "logs" / "HEAD"),
            "shallow": lines(root / ".git" / "shallow")}

def one(ws, opts, demand, cache, sources, state, clock, number, metrics):
    if step:
        fake[0] += step
    queued = 1 + number % 2 if change else 1
    with open(demand_path + ".tmp", "w") as handle:
        handle.write(f"linux-x64: {{queued: {queued}, running: 0}}\ngpu: {{queued: 0, running: 0}}\n")
    os.replace(demand_path + ".tmp", demand_path)
    code = one_pass(ws, opts, demand, cache, sources, state, clock, number, metrics)
    if (number + 1) % sample == 0:
        now = time.perf_counter()
        print(json.dumps({"pass": number + 1, "s_per_pass": (now - started[0]) / sample,
                          **stats(ws.root, cache)}), flush=True)
        started[0] = time.perf_counter()
    return code

run._one_pass = one
from gitscale.cli import main
sys.exit(main(sys.argv[5:]))
"""


# The GitHub polling worker: a fake GitHub org on loopback (tests/demand/fake_github.py) where,
# each pass, the 10 oldest live runs finish and 10 new ones of 5 queued jobs start; one
# `Sources` kept across passes, as `run` keeps it. Prints the ETag cache's size every --sample.
ETAG_WORKER = r"""
import json, os, sys
if os.environ.get("BENCH_BEFORE"):
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")]
    sys.path.insert(0, os.environ["BENCH_BEFORE"])
project, root, passes, sample = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sys.path.append(project)  # (for tests.demand.fake_github: gitscale itself comes first)
from pathlib import Path
from tests.demand.fake_github import FakeGitHub
from gitscale.config.load import load_config
from gitscale.demand.resolve import Sources, read_demand
from gitscale.files import default_cache_dir
fake = FakeGitHub(token=os.environ["BENCH_GH_TOKEN"], max_per_page=100).start()
repos = [fake.add_repo("acme", f"service-{i:02d}") for i in range(20)]
live = []
root = Path(root)
root.mkdir(parents=True, exist_ok=True)
(root / "gitscale.yaml").write_text(
    "runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
    f"    source: {{github: {{org: acme, labels: [linux], apiUrl: '{fake.url}', "
    "token: {env: BENCH_GH_TOKEN}}}\n    policy: {minReplicas: 0, maxReplicas: 1000}\n")
config = load_config(root)
sources = Sources(default_cache_dir(), timeout=10)
for number in range(passes):
    with fake.lock:  # finished: no longer listed (and gone from the fake, whose memory is ours)
        for run in live[:10]:
            fake.runs[run.repo].remove(run)
    live = live[10:]
    for k in range(10):
        live.append(fake.add_run(repos[(number * 10 + k) % 20], "queued",
                                 [("queued", ["self-hosted", "linux"])] * 5))
    reading = read_demand(root, config, None, sources)
    assert not reading.errors, reading.errors
    fake.clear_log()  # (the fake's request log is the fake's memory, not gitscale's)
    if (number + 1) % sample == 0:
        sources.save()
        (path,) = default_cache_dir().glob("etags-*.json")
        entries = json.loads(path.read_text())
        status = {l.split(":")[0]: l.split()[1] for l in open("/proc/self/status")
                  if l.startswith("VmRSS")}
        print(json.dumps({"pass": number + 1, "runs_seen": 10 * (number + 1),
                          "live_runs": len(live), "entries": len(entries),
                          "jobs_pages": sum("/jobs" in u for u in entries),
                          "file_kib": path.stat().st_size // 1024,
                          "rss_kib": int(status["VmRSS"])}), flush=True)
sources.close()
fake.stop()
"""


def git(cwd: Path, *args: str, input: str | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True,
                          text=True, input=input).stdout.strip()


def seed_remote(work: Path, name: str, history: int = 0) -> Path:
    """A bare remote holding seed.FILES, then ``history`` scaling commits of linux-x64 (one
    every 30 s up to now, each a gitscale-shaped commit), packed as a server packs."""
    remote = work / f"{name}.git"
    git(work, "init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    proc = subprocess.Popen(["git", "fast-import", "--quiet"], cwd=remote, env=ENV,
                            stdin=subprocess.PIPE)
    assert proc.stdin is not None
    write = proc.stdin.write

    def data(text: str) -> None:
        raw = text.encode()
        write(b"data %d\n%s\n" % (len(raw), raw))

    end = int(time.time()) - 60
    start = end - 30 * history
    write(f"commit refs/heads/main\ncommitter bench <b@example.invalid> {start - 30} +0000\n"
          .encode())
    data("Add runner sets")
    for path, text in seed.FILES.items():
        write(f"M 100644 inline {path}\n".encode())
        data(text)
    old = 2
    for number in range(history):
        new = old % 9 + 1
        write(f"commit refs/heads/main\ncommitter gitscale <g@example.invalid> "
              f"{start + 30 * number} +0000\n".encode())
        data(f"gitscale: linux-x64 {old}→{new}\n\nGitscale-Set: linux-x64 replicas={new} "
             f"previous={old} patch={number + 8} queued={new} running=0 reason=scale-up\n")
        write(f"M 100644 inline {seed.RUNNERS}\n".encode())
        data(seed.RUNNERS_YAML.replace("replicas: 2 ", f"replicas: {new} ", 1))
        old = new
    proc.stdin.close()
    if proc.wait() != 0:
        raise RuntimeError("git fast-import failed")
    git(remote, "config", "uploadpack.allowFilter", "true")
    # no gc after a push: over file:// receive-pack is a child of gitscale's push, and its gc
    # would run detached in gitscale's process tree (a hosting service keeps its own repos)
    git(remote, "config", "receive.autogc", "false")
    git(remote, "gc", "--quiet")
    return remote


def gitscale_argv() -> list[str]:
    script = Path(sys.executable).parent / "gitscale"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gitscale"]


def run_mode(work: Path, passes: int, sample: int, change: bool, step: float,
             before: str | None = None, pid1: bool = False,
             history: int = 0) -> dict[str, Any]:
    name = ("run" if change else "quiet") + ("-before" if before else "")
    remote = seed_remote(work, f"{name}-remote", history)
    demand = work / "demand.yaml"
    log = work / f"{name}.log"
    env = {**ENV, "GITSCALE_CACHE_DIR": str(work / f"cache-{name}")}
    if before:  # an older gitscale's source folder, imported first
        env["BENCH_BEFORE"] = str(Path(before).resolve())
    t0 = time.perf_counter()
    with log.open("w") as err:
        # --pid1: the process is process 1 of a PID namespace of its own, as in a container
        prefix = ["unshare", "--fork", "--pid", "--mount-proc"] if pid1 else []
        out = subprocess.run([*prefix, sys.executable, "-c", WORKER, str(demand), str(sample),
                              "1" if change else "0", str(step), "run", "--repo",
                              remote.as_uri(), "--demand", str(demand), "--interval", "30s",
                              "--max-passes", str(passes)],
                             env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    wall = time.perf_counter() - t0
    samples = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    text = log.read_text()
    commits = int(git(remote, "rev-list", "--count", "main")) - 1 - history
    result: dict[str, Any] = {"passes": passes, "wall_s": wall, "exit": out.returncode,
                              "commits": commits, "log_lines": len(text.splitlines()),
                              "samples": samples}
    if step:
        result["log_lines_per_hour"] = len(text.splitlines()) / (passes * step / 3600)
    return result


def etags_mode(work: Path, passes: int, sample: int, before: str | None) -> dict[str, Any]:
    name = "etags" + ("-before" if before else "")
    env = {**ENV, "GITSCALE_CACHE_DIR": str(work / f"cache-{name}"),
           "BENCH_GH_TOKEN": "ghp_benchmark_token_0000000000000000000000"}
    if before:
        env["BENCH_BEFORE"] = str(Path(before).resolve())
    out = subprocess.run([sys.executable, "-c", ETAG_WORKER, str(PROJECT), str(work / name),
                          str(passes), str(sample)], env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return {"samples": [json.loads(line) for line in out.stdout.splitlines()
                        if line.startswith("{")]}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def proc_stats(pid: int) -> dict[str, int]:
    status = {line.split(":")[0]: line.split()[1] for line in open(f"/proc/{pid}/status")
              if line.startswith(("VmRSS", "Threads"))}
    return {"rss_kib": int(status["VmRSS"]), "threads": int(status["Threads"]),
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def clone_stats(temp: Path) -> dict[str, int]:
    clones = list(temp.glob("gitscale-clone.*/repo"))
    if not clones:
        return {}
    root = clones[0]
    counts = dict(line.split(": ") for line in git(root, "count-objects", "-v").splitlines())
    shallow = root / ".git" / "shallow"
    return {"loose": int(counts["count"]), "packs": int(counts["packs"]),
            "in_pack": int(counts["in-pack"]), "shallow": len(shallow.read_text().split()) if shallow.exists() else 0,
            "reflog": len((root / ".git/logs/HEAD").read_text().splitlines())
            if (root / ".git/logs/HEAD").exists() else 0}


def serve_mode(work: Path, deliveries: int, reservation: str) -> dict[str, Any]:
    init = work / "scaffold"
    subprocess.run([*gitscale_argv(), "init", str(init), "--gitops", "flux", "--github-org",
                    "acme", "--run-in", "cluster"], env=ENV, check=True, capture_output=True)
    remote = work / "serve-remote.git"
    git(work, "clone", "--quiet", "--bare", str(init), str(remote))
    temp = work / "serve-tmp"
    temp.mkdir()
    port = free_port()
    env = {**ENV, "GITHUB_WEBHOOK_SECRET": SECRET, "TMPDIR": str(temp),
           "GITSCALE_CACHE_DIR": str(work / "cache-serve")}
    log = (work / "serve.log").open("w")
    proc = subprocess.Popen([*gitscale_argv(), "serve", "--repo", remote.as_uri(), "--listen",
                             f"127.0.0.1:{port}", "--window", "1s", "--resync", "0",
                             "--hold", "5m", "--reservation", reservation],
                            env=env, stdout=subprocess.DEVNULL, stderr=log)
    samples: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                http.client.HTTPConnection("127.0.0.1", port, timeout=2).request("GET", "/healthz")
                break
            except OSError:
                time.sleep(0.2)
        samples.append({"deliveries": 0, **proc_stats(proc.pid), **clone_stats(temp)})
        t0 = time.perf_counter()
        for number in range(deliveries):
            job = number // 2 + 1
            action = "queued" if number % 2 == 0 else "completed"
            body = json.dumps({"action": action, "workflow_job": {
                "id": job, "status": action, "labels": ["self-hosted", "linux"]},
                "repository": {"full_name": "acme/app"}}).encode()
            sig = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("POST", "/webhook", body, {
                "X-GitHub-Event": "workflow_job", "X-GitHub-Delivery": f"bench-{number}",
                "X-Hub-Signature-256": f"sha256={sig}", "Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            conn.close()
            if response.status != 202:
                raise RuntimeError(f"delivery {number}: {response.status}")
            time.sleep(max(0.0, t0 + (number + 1) / 25 - time.perf_counter()))
            if (number + 1) % 250 == 0:
                samples.append({"deliveries": number + 1, **proc_stats(proc.pid),
                                **clone_stats(temp)})
        time.sleep(3)  # the last window lands
        samples.append({"deliveries": deliveries, "settled": True, **proc_stats(proc.pid),
                        **clone_stats(temp)})
        wall = time.perf_counter() - t0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        log.close()
    commits = int(git(remote, "rev-list", "--count", "main")) - 1
    import yaml

    left = yaml.safe_load(git(remote, "show", "main:.gitscale/reservations.yaml"))
    return {"deliveries": deliveries, "wall_s": wall, "commits": commits,
            "reservations_left": sum(len(s["reservations"]) for s in left["sets"].values()),
            "samples": samples,
            "log_lines": len((work / "serve.log").read_text().splitlines())}


def reconcile_mode(work: Path, histories: list[int], passes: int) -> dict[str, Any]:
    remotes = {}
    for commits in [100, *histories]:
        t0 = time.perf_counter()
        remotes[commits] = seed_remote(work, f"history-{commits}", commits)
        print(f"  built {commits} commits in {time.perf_counter() - t0:.1f}s", flush=True)
    env = {**ENV, "GITSCALE_CACHE_DIR": str(work / "cache-cron")}
    demand = work / "cron-demand.yaml"
    times: dict[int, list[float]] = {c: [] for c in remotes}
    for number in range(passes + 1):  # the first pass of each warms its cache: not counted
        for commits, remote in remotes.items():
            demand.write_text(seed.demand_text((1 + number % 2, 0)))
            before = git(remote, "rev-parse", "main")
            t0 = time.perf_counter()
            subprocess.run([*gitscale_argv(), "reconcile", "--repo", remote.as_uri(),
                            "--demand", str(demand)], env=env, check=True, capture_output=True)
            if number:
                times[commits].append(time.perf_counter() - t0)
            if git(remote, "rev-parse", "main^") != before:
                raise RuntimeError(f"{commits}: the pass did not land one commit")
    result: dict[str, Any] = {
        str(c): {"median_s": statistics.median(t), "min_s": min(t), "max_s": max(t)}
        for c, t in times.items()}
    # what the runs left: nothing in TMPDIR, a bounded set of files in the cache directory
    result["tmp_left"] = sorted(p.name for p in Path(ENV["TMPDIR"]).glob("gitscale-*"))
    result["cache_files"] = sorted(p.name.split("-")[0].split(".")[0]
                                   for p in (work / "cache-cron").iterdir())
    return result


def kill_mode(work: Path, kills: int) -> dict[str, Any]:
    remote = seed_remote(work, "kill-remote")
    temp, cache = work / "kill-tmp", work / "cache-kill"
    temp.mkdir()
    env = {**ENV, "TMPDIR": str(temp), "GITSCALE_CACHE_DIR": str(cache)}
    for number in range(kills):
        demand = work / "kill-demand.yaml"
        demand.write_text(seed.demand_text((number + 1, 0)))
        proc = subprocess.Popen([*gitscale_argv(), "run", "--repo", remote.as_uri(),
                                 "--demand", str(demand), "--interval", "1h"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        for line in proc.stderr:
            if "next pass in" in line:
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    left = sorted(p.name.split(".")[0] for p in temp.iterdir())
    cache_files = sorted(p.name for p in cache.iterdir()) if cache.exists() else []
    subprocess.run([*gitscale_argv(), "plan", "--repo", remote.as_uri()], env=env,
                   capture_output=True)
    after = sorted(p.name for p in temp.iterdir())
    return {"kills": kills, "tmp_left_by_kills": left, "cache_files": cache_files,
            "tmp_after_next_run": after}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="run,quiet,etags,serve,reconcile,kill")
    parser.add_argument("--passes", type=int, default=2000)
    parser.add_argument("--sample", type=int, default=250)
    parser.add_argument("--deliveries", type=int, default=3000)
    parser.add_argument("--reservation", default="1m", help="serve's --reservation: how long "
                        "a completed job's tombstone stays in the reservations file (its "
                        "default, 10m, would need a run of more than 10 minutes to level off)")
    parser.add_argument("--histories", default="10000,100000")
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--history", type=int, default=0, help="run mode: scaling commits "
                        "the remote holds before the loop starts")
    parser.add_argument("--before", help="an older gitscale's source folder (`git archive "
                        "COMMIT gitscale | tar -x -C DIR`, then `git archive COMMIT deploy | "
                        "tar -x -C DIR/gitscale`): the run and etags modes again with it")
    parser.add_argument("--workdir")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--pid1", action="store_true", help="run mode: gitscale as process 1 "
                        "of its own PID namespace, as in a container (`unshare`, as root)")
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    work = Path(args.workdir or tempfile.mkdtemp(prefix="gitscale-longrun-"))
    work.mkdir(parents=True, exist_ok=True)
    ENV["TMPDIR"] = str(work / "tmp")
    (work / "tmp").mkdir(exist_ok=True)
    results: dict[str, Any] = {"params": vars(args), "git": git(work, "--version")}
    try:
        for key, before in (("run", None), ("run-before", args.before)):
            if "run" not in modes or (key == "run-before" and not before):
                continue
            results[key] = r = run_mode(work, args.passes, args.sample, True, 0.0, before,
                                        args.pid1, args.history)
            print(f"{key}: {r['passes']} passes, {r['commits']} commits in {r['wall_s']:.0f}s "
                  f"(exit {r['exit']})")
            for s in r["samples"]:
                print("  " + "  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                       for k, v in s.items()))
        for key, before in (("etags", None), ("etags-before", args.before)):
            if "etags" not in modes or (key == "etags-before" and not before):
                continue
            results[key] = e = etags_mode(work, 300, 100, before)
            print(f"{key}: GitHub polling, 10 runs finishing and 10 starting per pass")
            for sample in e["samples"]:
                print("  " + "  ".join(f"{k} {v}" for k, v in sample.items()))
        if "quiet" in modes:
            results["quiet"] = q = run_mode(work, min(args.passes, 400), 400, False, 30.0)
            print(f"quiet: {q['passes']} passes of a 30 s loop: {q['log_lines']} log lines, "
                  f"{q['log_lines_per_hour']:.1f} per hour")
        if "serve" in modes:
            results["serve"] = s = serve_mode(work, args.deliveries, args.reservation)
            print(f"serve: {s['deliveries']} deliveries in {s['wall_s']:.0f}s, {s['commits']} "
                  f"commits, {s['reservations_left']} reservations left, {s['log_lines']} "
                  "log lines")
            for sample in s["samples"]:
                print("  " + "  ".join(f"{k} {v}" for k, v in sample.items()))
        if "reconcile" in modes:
            histories = [int(h) for h in args.histories.split(",") if h]
            results["reconcile"] = c = reconcile_mode(work, histories, 5)
            for commits, m in c.items():
                if commits.isdigit():
                    print(f"reconcile --repo URL, {commits} commits: median "
                          f"{m['median_s']:.3f}s (min {m['min_s']:.3f}, max {m['max_s']:.3f})")
            print(f"  left in TMPDIR: {c['tmp_left']}; cache files: {c['cache_files']}")
        if "kill" in modes:
            results["kill"] = k = kill_mode(work, args.kills)
            print(f"kill: after {k['kills']} SIGKILLs, TMPDIR holds {k['tmp_left_by_kills']}; "
                  f"after the next run {k['tmp_after_next_run']}; cache {k['cache_files']}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    results["loadavg"] = os.getloadavg()
    print(f"load average {results['loadavg'][0]:.2f}; results: "
          f"{br.write_results('longrun', results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
