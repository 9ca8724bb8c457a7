#!/usr/bin/env python3
"""Benchmark a restart of `gitscale serve` over a large reservations file: how soon it listens,
lands its first batch, and what memory it takes.

    .venv/bin/python benchmarks/bench_serve_restart.py [--reservations 10000] [--sets 4]
                                                       [--runs 5] [--modes plain,resync]

A real `git daemon` on 127.0.0.1 serves a config repo of --sets RunnerSets (github sources) and
a reservations file (.gitscale/reservations.yaml, written by gitscale's own writer) that holds
--reservations reservations spread over the sets, a quarter of them running. The jobs are also
in the fake GitHub of tests/demand/fake_github.py (real HTTP on 127.0.0.1), so a resync lists
exactly the jobs the file holds. A first, untimed `gitscale serve` start settles the repo (it
commits the scale-up the reservations call for); then --runs restarts per mode, the modes taking
turns run by run (a slow spell on a shared machine lands on both):

  plain   `serve --resync 0`
  resync  `serve` with its default --resync (5m): the first resync is at its start

Each restart is `python -m gitscale serve --repo git://127.0.0.1:PORT/config.git` as its own
process, with an empty cache directory (a new pod; --warm-cache keeps one across starts), and is
timed from its spawn: "listening" (its log line), its first batch landed (/healthz's last_batch,
polled every 20 ms; a batch with nothing to land logs nothing) and whether it committed (it
should not: nothing changed), in resync mode the first resync applied (its log line) and
whether it committed; then one signed `queued` delivery for a new job: delivery → its commit on
the remote (the --window wait included) and the batch's own time (gitscale_pass_duration_seconds
from /metrics). RSS (VmRSS of /proc) after the first batch, and at the peak (VmHWM) at the
stop. Medians over the runs on stdout; --json writes every sample. Everything is built in a
temporary directory that is removed at the end; the daemon, the fake GitHub and every serve
process are stopped, whatever happens.
"""
from __future__ import annotations

import argparse
import hashlib
import hmac
import http.client
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
sys.path.insert(0, str(PROJECT))

from gitscale.core.reservations import Book, Reservation  # noqa: E402
from gitscale.timeutil import utcnow  # noqa: E402
from gitscale.webhooks.reservations_file import render  # noqa: E402
from tests.demand.fake_github import FakeGitHub  # noqa: E402
from tests.integration.conftest import GitDaemon, start_daemon  # noqa: E402

SECRET = "bench-webhook-secret"
TOKEN = "ghp_bench_restart_token"
ORG = "octo-org"
STATE = ".gitscale/reservations.yaml"
JOBS_PER_RUN = 20  # a run's jobs listed on one page (the fake's per_page is set to 100)
RUNS_PER_REPO = 50  # far under GitHub's 1,000 listed runs a status: the listing is complete
MODES = ("plain", "resync")
MAX_REPLICAS = 10_000  # gitscale's own bound on a set's maxReplicas
RUNNERSET = """\
apiVersion: gitscale.dev/v1alpha1
kind: RunnerSet
metadata:
  name: {name}
spec:
  replicas: 0
  platform: github
  github: {{configURL: "https://github.com/{org}", credentialsSecret: github-app}}
  template:
    spec:
      containers:
        - name: runner
          image: runner:1
"""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def set_names(count: int) -> list[str]:
    return [f"pool-{i}" for i in range(count)]


def populate(fake: FakeGitHub, sets: list[str], reservations: int) -> dict[str, list[Reservation]]:
    """The fake's org holds ``reservations`` queued or running jobs, a run's jobs all of one
    set; the same jobs as reservations by set (created 5 minutes ago, expiring in an hour: none
    runs out while the benchmark runs)."""
    now = utcnow()
    fake._next_id = max(fake._next_id, 3_000_000_000)  # job ids of 11 digits, as GitHub's are
    created, expires = now - timedelta(minutes=5), now + timedelta(hours=1)
    books: dict[str, list[Reservation]] = {name: [] for name in sets}
    made, run_no, repo = 0, 0, ""
    while made < reservations:
        if run_no % RUNS_PER_REPO == 0:
            repo = fake.add_repo(ORG, f"repo-{run_no // RUNS_PER_REPO:03d}")
        name = sets[run_no % len(sets)]
        running = run_no % 4 == 3
        status = "in_progress" if running else "queued"
        count = min(JOBS_PER_RUN, reservations - made)
        run = fake.add_run(repo, status, [(status, ["self-hosted", name])] * count)
        books[name] += [Reservation(job["id"], running, created, expires) for job in run.jobs]
        made += count
        run_no += 1
    return books


def config_files(sets: list[str], books: dict[str, list[Reservation]], api: str) -> dict[str, str]:
    lines = ["runnerSets:"]
    for name in sets:
        lines += [f"  - name: {name}", f"    manifest: sets/{name}.yaml",
                  f"    source: {{github: {{org: {ORG}, labels: [self-hosted, {name}], "
                  f"apiUrl: '{api}', token: {{env: GH_TOKEN}}}}}}",
                  f"    policy: {{minReplicas: 0, maxReplicas: {MAX_REPLICAS}}}"]
    files = {"gitscale.yaml": "\n".join(lines) + "\n"}
    for name in sets:
        files[f"sets/{name}.yaml"] = RUNNERSET.format(name=name, org=ORG)
    files[STATE] = render({name: Book(tuple(rs)) for name, rs in books.items()}, sets)
    return files


def delivery(job_id: int, name: str, repo: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"action": "queued",
                       "workflow_job": {"id": job_id, "status": "queued",
                                        "labels": ["self-hosted", name]},
                       "repository": {"full_name": repo,
                                      "owner": {"login": repo.split("/")[0]}}}).encode()
    signature = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return body, {"Content-Type": "application/json", "X-GitHub-Event": "workflow_job",
                  "X-GitHub-Delivery": str(uuid.uuid4()),
                  "X-Hub-Signature-256": f"sha256={signature}"}


def call(port: int, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def health(port: int) -> dict[str, Any]:
    """/healthz; a failed batch stops the benchmark (serve would retry it for ever)."""
    answer: dict[str, Any] = json.loads(call(port, "GET", "/healthz")[1])
    if answer.get("last_error"):
        raise RuntimeError(f"a batch failed: {answer['last_error']}")
    return answer


def batch_seconds(port: int) -> float:
    """The sum of gitscale_pass_duration_seconds: every batch's own time so far."""
    text = call(port, "GET", "/metrics")[1].decode()
    found = re.search(r"^gitscale_pass_duration_seconds_sum (\S+)$", text, re.M)
    return float(found.group(1)) if found else float("nan")


def proc_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def until(check: Any, what: str, timeout: float, proc: subprocess.Popen[bytes], log: Path,
          every: float = 0.02) -> Any:
    """Polls ``check`` until it returns something true; the serve log on a timeout or exit."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not seen (serve "
                               + ("exited" if proc.poll() is not None else "still running")
                               + f"); its log:\n{log.read_text()[-4000:]}")
        time.sleep(every)


class Bench:
    def __init__(self, work: Path, daemon: GitDaemon, fake: FakeGitHub, bare: Path,
                 sets: list[str], args: argparse.Namespace) -> None:
        self.work, self.daemon, self.fake, self.bare = work, daemon, fake, bare
        self.sets, self.args = sets, args
        self.starts = 0
        self.env = dict(os.environ, GITHUB_WEBHOOK_SECRET=SECRET, GH_TOKEN=TOKEN,
                        GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1",
                        PYTHONUNBUFFERED="1")
        self.env.pop("GITSCALE_CACHE_DIR", None)

    def commits(self) -> int:
        return int(git(self.bare, "rev-list", "--count", "main"))

    def start(self, mode: str) -> tuple[subprocess.Popen[bytes], int, Path, float]:
        self.starts += 1
        log = self.work / f"serve-{self.starts}-{mode}.log"
        cache = self.work / ("cache" if self.args.warm_cache else f"cache-{self.starts}")
        port = free_port()
        argv = [sys.executable, "-m", "gitscale", "serve", "--repo",
                self.daemon.url(), "--listen", f"127.0.0.1:{port}",
                "--window", self.args.window]
        if mode == "plain":
            argv += ["--resync", "0"]
        env = dict(self.env, GITSCALE_CACHE_DIR=str(cache))
        with log.open("wb") as sink:
            spawned = time.monotonic()
            proc = subprocess.Popen(argv, cwd=PROJECT, env=env, stdin=subprocess.DEVNULL,
                                    stdout=sink, stderr=sink)
        return proc, port, log, spawned

    @staticmethod
    def stop(proc: subprocess.Popen[bytes]) -> int:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                return proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        return proc.wait()

    def settle(self) -> dict[str, Any]:
        """The first start: it commits what the reservations call for (the sets' scale-up)."""
        before = self.commits()
        proc, port, log, spawned = self.start("plain")
        try:
            until(lambda: "listening on" in log.read_text(), "listening", self.args.timeout, proc, log)
            until(lambda: health(port)["last_batch"], "the first batch", self.args.timeout, proc, log)
            landed = time.monotonic() - spawned
        finally:
            code = self.stop(proc)
        if code != 0:
            raise RuntimeError(f"the settling serve exited {code}:\n{log.read_text()[-4000:]}")
        return {"first_batch_s": landed, "commits": self.commits() - before}

    def restart(self, mode: str, run: int) -> dict[str, Any]:
        before = self.commits()
        name = self.sets[run % len(self.sets)]
        repo = f"{ORG}/repo-000"
        proc, port, log, spawned = self.start(mode)
        sample: dict[str, Any] = {"mode": mode}
        try:
            until(lambda: "listening on" in log.read_text(), "listening", self.args.timeout, proc, log,
                  every=0.01)
            sample["listening_s"] = time.monotonic() - spawned
            until(lambda: health(port)["last_batch"], "the first batch", self.args.timeout, proc, log)
            sample["first_batch_s"] = time.monotonic() - spawned
            sample["rss_first_batch_mb"] = proc_mb(proc.pid, "VmRSS")
            sample["first_batch_own_s"] = batch_seconds(port)
            sample["first_batch_commits"] = self.commits() - before
            if mode == "resync":
                said = until(lambda: re.search(r"resync(?: \S+)?: [^\n]*", log.read_text()),
                             "the first resync", self.args.timeout, proc, log)
                sample["resync_s"] = time.monotonic() - spawned
                sample["resync_said"] = said.group(0)
                sample["resync_commits"] = self.commits() - before
            # a new job, one GitHub lists too (the next start's resync finds what it reserved)
            job = self.fake.add_run(repo, "queued",
                                    [("queued", ["self-hosted", name])]).jobs[0]["id"]
            own = batch_seconds(port)
            landed_before = health(port)["commits"]
            body, headers = delivery(job, name, repo)
            posted = time.monotonic()
            status = call(port, "POST", "/webhook", body, headers)[0]
            if status != 202:
                raise RuntimeError(f"the delivery was answered {status}")
            until(lambda: (lambda h: h["commits"] > landed_before and not h["pending_events"])(
                health(port)), "the event's commit", self.args.timeout, proc, log)
            sample["event_commit_s"] = time.monotonic() - posted
            sample["event_batch_own_s"] = batch_seconds(port) - own
            sample["rss_peak_mb"] = proc_mb(proc.pid, "VmHWM")
        finally:
            code = self.stop(proc)
        if code != 0:
            raise RuntimeError(f"serve exited {code}:\n{log.read_text()[-4000:]}")
        sample["commits"] = self.commits() - before  # the event's, nothing else
        sample["log"] = [line.split(" ", 1)[1] for line in log.read_text().splitlines()
                         if line[:1].isdigit()]
        return sample


FIGURES = [("listening_s", "listening", "s"), ("first_batch_s", "first batch landed", "s"),
           ("first_batch_own_s", "  the batch's own time", "s"),
           ("resync_s", "first resync applied", "s"),
           ("event_commit_s", "one event: delivery → commit", "s"),
           ("event_batch_own_s", "  the batch's own time", "s"),
           ("rss_first_batch_mb", "RSS after the first batch", "MB"),
           ("rss_peak_mb", "RSS at the peak", "MB")]


def report(samples: list[dict[str, Any]], modes: list[str]) -> None:
    print(f"{'':34}" + "".join(f"{m:>26}" for m in modes))
    for key, label, unit in FIGURES:
        cells = []
        for mode in modes:
            values = [s[key] for s in samples if s["mode"] == mode and key in s]
            cells.append(f"{statistics.median(values):.2f} {unit} ({min(values):.2f}–"
                         f"{max(values):.2f})" if values else "–")
        print(f"{label:34}" + "".join(f"{c:>26}" for c in cells))
    for mode in modes:
        mine = [s for s in samples if s["mode"] == mode]
        first = sorted({s["first_batch_commits"] for s in mine})
        extra = sorted({s["commits"] - 1 for s in mine})
        print(f"{mode}: commits of the first batch {first} (0: a restart with nothing changed "
              f"commits nothing); commits besides the event's {extra}")
        said = sorted({s["resync_said"] for s in mine if "resync_said" in s})
        if said:
            print(f"{mode}: the first resync said {said}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reservations", type=int, default=10_000,
                        help="reservations in the file (default 10000)")
    parser.add_argument("--sets", type=int, default=4, help="runner sets they spread over")
    parser.add_argument("--runs", type=int, default=5, help="restarts per mode (default 5)")
    parser.add_argument("--modes", default="plain,resync",
                        help="plain (--resync 0), resync (its default 5m), or both")
    parser.add_argument("--window", default="1s", help="serve's --window (default 1s)")
    parser.add_argument("--warm-cache", action="store_true",
                        help="keep serve's cache directory across starts (a container "
                        "restarted in its pod) instead of an empty one each start (a new pod)")
    parser.add_argument("--timeout", type=float, default=300,
                        help="seconds to wait for each thing serve is timed to (default 300)")
    parser.add_argument("--json", type=Path, help="write every sample here")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if not modes or set(modes) - set(MODES):
        parser.error(f"--modes: a comma-separated list of {', '.join(MODES)}")
    if args.reservations < 1 or args.sets < 1 or args.runs < 1:
        parser.error("--reservations, --sets and --runs must be at least 1")
    if -(-args.reservations // args.sets) + args.runs > MAX_REPLICAS:
        parser.error(f"--reservations: at most {MAX_REPLICAS:,} a set (a set's maxReplicas; "
                     "reservations beyond it wait for capacity, and every batch would commit "
                     "their expiry pushed back): give more --sets")

    work = Path(tempfile.mkdtemp(prefix="gitscale-bench-restart-"))
    daemon: GitDaemon | None = None
    fake = FakeGitHub(token=TOKEN, max_per_page=100).start()
    try:
        sets = set_names(args.sets)
        books = populate(fake, sets, args.reservations)
        (work / "srv").mkdir()
        daemon = start_daemon(work / "srv")
        files = config_files(sets, books, fake.url)
        bare = daemon.create(files)
        size = len(files[STATE].encode())
        print(f"{args.reservations:,} reservations over {args.sets} sets in {STATE} "
              f"({size / 1e6:.2f} MB), served by git daemon at {daemon.url()}; load average "
              f"{Path('/proc/loadavg').read_text().split()[0]}", flush=True)
        bench = Bench(work, daemon, fake, bare, sets, args)
        settled = bench.settle()
        print(f"settling start: first batch at {settled['first_batch_s']:.2f} s, "
              f"{settled['commits']} commit (the scale-up the reservations call for)",
              flush=True)
        samples = []
        for run in range(args.runs):
            for mode in (modes if run % 2 == 0 else modes[::-1]):
                samples.append(bench.restart(mode, run))
                print(f"  run {run + 1} {mode}: listening {samples[-1]['listening_s']:.2f} s, "
                      f"first batch {samples[-1]['first_batch_s']:.2f} s", flush=True)
        load = Path("/proc/loadavg").read_text().split()[:3]
        print(f"medians of {args.runs} restarts (min–max); load average at the end "
              f"{' '.join(load)}")
        report(samples, modes)
        if args.json:
            args.json.write_text(json.dumps({"reservations": args.reservations,
                                             "sets": args.sets, "file_bytes": size,
                                             "settle": settled, "samples": samples,
                                             "loadavg_end": load}, indent=1))
    finally:
        if daemon is not None:
            daemon.stop()
        fake.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
