#!/usr/bin/env python3
"""Benchmark `gitscale serve` under hostile and bursty clients: is a signed delivery still taken?

    .venv/bin/python benchmarks/bench_serve.py [--idle 168] [--half 32] [--drip 40]
                                               [--burst 1000] [--threads 16]

Starts `gitscale serve` as its own process (`python -m gitscale serve`) on 127.0.0.1 against a
temporary config repo with a bare remote, then runs two phases:

  held   --idle sockets that connect and send nothing, --half that send a POST's headers and
         never the body, and --drip that send a request one byte every --drip-every seconds,
         all held open; meanwhile --probes signed deliveries, one after the other, each on a
         new connection, timed from connect to the 202. Also: how long the server keeps a
         slow-drip client (the whole-request deadline) and whether it drops the silent ones.
  burst  --burst signed deliveries from --threads threads, each on a new connection, as
         GitHub sends them: latency percentiles, connection resets and other failures.

Then it waits for the server to commit and checks that every accepted delivery is in the pushed
reservations file: nothing accepted is lost. Targets: held max ≤ 2 s; burst 0 resets, p99 ≤
250 ms. Figures: a table on stdout; nothing is written outside a temporary directory.
"""
from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT = HERE.parent
SECRET = "bench-webhook-secret"
QUEUED = PROJECT / "fixtures/reference/payloads/queued.payload.json"
PAYLOAD = json.loads(QUEUED.read_text()) if QUEUED.exists() else None
RUNNERSET = """\
apiVersion: gitscale.dev/v1alpha1
kind: RunnerSet
metadata:
  name: linux
spec:
  replicas: 0
  platform: github
  github: {configURL: "https://github.com/example", credentialsSecret: github-app}
  template:
    spec:
      containers:
        - name: runner
          image: runner:1
"""
CONFIG = """\
runnerSets:
  - name: linux
    manifest: sets/linux.yaml
    source: {github: {org: octo-org, labels: [self-hosted, linux], token: {env: GH_TOKEN}}}
    policy: {minReplicas: 0, maxReplicas: 5000}
"""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def make_repo(root: Path) -> Path:
    checkout = root / "config"
    (checkout / "sets").mkdir(parents=True)
    (checkout / "gitscale.yaml").write_text(CONFIG)
    (checkout / "sets/linux.yaml").write_text(RUNNERSET)
    git(checkout, "init", "-q", "--initial-branch=main")
    git(checkout, "add", "-A")
    git(checkout, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "initial")
    git(root, "init", "-q", "--bare", "--initial-branch=main", str(root / "remote.git"))
    git(checkout, "remote", "add", "origin", str(root / "remote.git"))
    git(checkout, "push", "-q", "--set-upstream", "origin", "main")
    return checkout


def body(job_id: int) -> bytes:
    payload = {"action": "queued",
               "workflow_job": {"id": job_id, "status": "queued", "labels": ["self-hosted",
                                                                           "linux"]},
               "repository": {"full_name": "octo-org/octo-repo",
                              "owner": {"login": "octo-org"}}}
    if PAYLOAD is not None:  # pad like a real delivery (~8 KB)
        payload["sender"] = PAYLOAD.get("sender")
        payload["padding"] = PAYLOAD.get("repository")
    return json.dumps(payload).encode()


def request(job_id: int) -> bytes:
    data = body(job_id)
    signature = hmac.new(SECRET.encode(), data, hashlib.sha256).hexdigest()
    head = (f"POST /webhook HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            f"X-GitHub-Event: workflow_job\r\nX-GitHub-Delivery: {uuid.uuid4()}\r\n"
            f"X-Hub-Signature-256: sha256={signature}\r\nContent-Length: {len(data)}\r\n"
            f"Connection: close\r\n\r\n")
    return head.encode() + data


def deliver(port: int, job_id: int, timeout: float = 30) -> tuple[float, str]:
    """(seconds to the answer, outcome): "202", another status, or the error's name."""
    started = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(request(job_id))
            answer = b""
            while b"\r\n" not in answer:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                answer += chunk
        status = answer.split(b" ", 2)[1].decode() if answer.count(b" ") >= 2 else "closed"
    except OSError as exc:
        status = type(exc).__name__
    return time.perf_counter() - started, status


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def held_phase(port: int, args: argparse.Namespace, next_id: list[int]) -> dict[str, object]:
    socks: list[socket.socket] = []
    for _ in range(args.idle):
        socks.append(socket.create_connection(("127.0.0.1", port), timeout=60))
    for _ in range(args.half):
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        s.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n{")
        socks.append(s)
    stop = threading.Event()
    cut_after: list[float] = []

    def drip() -> None:
        data = request(0)
        started = time.monotonic()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
                for byte in data:
                    if stop.is_set():
                        return
                    s.sendall(bytes([byte]))
                    time.sleep(args.drip_every)
                cut_after.append(float("inf"))  # sent it all: never cut
        except OSError:
            cut_after.append(time.monotonic() - started)

    drippers = [threading.Thread(target=drip, daemon=True) for _ in range(args.drip)]
    for t in drippers:
        t.start()
    time.sleep(1.0)  # let the hostile clients settle in
    probes = []
    for _ in range(args.probes):
        next_id[0] += 1
        probes.append(deliver(port, next_id[0]))
        time.sleep(args.probe_every)
    deadline = time.monotonic() + args.drip_wait
    while len(cut_after) < len(drippers) and time.monotonic() < deadline:
        time.sleep(0.2)
    # Silent sockets the server has dropped (the deadline): a read sees EOF or a reset.
    dropped = 0
    for s in socks:
        s.setblocking(False)
        try:
            dropped += s.recv(1) == b""
        except BlockingIOError:
            pass
        except OSError:
            dropped += 1
        s.close()
    stop.set()
    times = [t for t, _ in probes]
    return {"probes": len(probes), "accepted": sum(s == "202" for _, s in probes),
            "outcomes": sorted({s for _, s in probes}),
            "median": statistics.median(times), "max": max(times),
            "silent_dropped": dropped, "silent": len(socks),
            "drip_cut": len([c for c in cut_after if c != float("inf")]),
            "drip_cut_after": max([c for c in cut_after if c != float("inf")], default=None)}


def burst_phase(port: int, args: argparse.Namespace, next_id: list[int]) -> dict[str, object]:
    ids = list(range(next_id[0] + 1, next_id[0] + 1 + args.burst))
    next_id[0] += args.burst
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.threads) as pool:
        results = list(pool.map(lambda i: deliver(port, i), ids))
    wall = time.perf_counter() - started
    times = [t for t, _ in results]
    outcomes: dict[str, int] = {}
    for _, status in results:
        outcomes[status] = outcomes.get(status, 0) + 1
    return {"deliveries": len(results), "wall": wall, "outcomes": outcomes,
            "resets": outcomes.get("ConnectionResetError", 0),
            "p50": percentile(times, 50), "p95": percentile(times, 95),
            "p99": percentile(times, 99), "max": max(times),
            "accepted_ids": [i for i, (_, s) in zip(ids, results) if s == "202"]}


def wait_for(port: int, remote: Path, accepted: set[int], timeout: float) -> set[int]:
    """The accepted job ids that are in the pushed reservations file once the server is idle."""
    import yaml

    deadline = time.monotonic() + timeout
    found: set[int] = set()
    while time.monotonic() < deadline:
        try:
            text = git(remote, "show", "main:.gitscale/reservations.yaml")
        except subprocess.CalledProcessError:
            text = ""
        data = yaml.safe_load(text) if text else None
        book = ((data or {}).get("sets") or {}).get("linux") or {}
        found = {r["job"] for r in book.get("reservations") or []}
        if accepted <= found:
            return found
        time.sleep(0.5)
    return found


def peak_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--idle", type=int, default=168, help="silent sockets (connect only)")
    parser.add_argument("--half", type=int, default=32, help="POST headers, never the body")
    parser.add_argument("--drip", type=int, default=40, help="slow-drip clients")
    parser.add_argument("--drip-every", type=float, default=0.5, help="seconds per byte")
    parser.add_argument("--drip-wait", type=float, default=40,
                        help="how long to wait for the server to cut the drippers off")
    parser.add_argument("--probes", type=int, default=10)
    parser.add_argument("--probe-every", type=float, default=0.3)
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--window", default="2s")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        root = Path(tmp)
        checkout = make_repo(root)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        env = dict(os.environ, GITHUB_WEBHOOK_SECRET=SECRET, XDG_CACHE_HOME=str(root / "cache"),
                   GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b", GIT_COMMITTER_NAME="b",
                   GIT_COMMITTER_EMAIL="b@b")
        argv = [sys.executable, "-m", "gitscale", "serve", "--repo", str(checkout),
                "--listen", f"127.0.0.1:{port}", "--window", args.window]
        helptext = subprocess.run(argv[:4] + ["--help"], capture_output=True, text=True,
                                  cwd=PROJECT).stdout
        if "--resync" in helptext:
            argv += ["--resync", "0"]  # no GitHub to poll here
        log = open(root / "serve.log", "w")
        server = subprocess.Popen(argv, cwd=PROJECT, env=env, stderr=log, stdout=log)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise SystemExit((root / "serve.log").read_text())
                    time.sleep(0.1)
            next_id = [0]
            held = held_phase(port, args, next_id)
            burst = burst_phase(port, args, next_id)
            accepted = set(burst.pop("accepted_ids"))  # type: ignore[arg-type]
            found = wait_for(port, root / "remote.git", accepted, timeout=120)
            rss = peak_rss_mb(server.pid)
        finally:
            server.terminate()
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
            log.close()
        lost = len(accepted - found)
        print(f"held: {args.idle} idle + {args.half} half-requests + {args.drip} slow-drip "
              f"({args.drip_every}s/byte) open")
        print(f"  signed deliveries: {held['accepted']}/{held['probes']} accepted "
              f"{held['outcomes']}, median {held['median']:.3f}s, max {held['max']:.3f}s "
              f"(target ≤ 2 s)")
        cut = held["drip_cut_after"]
        print(f"  slow-drip clients cut off: {held['drip_cut']}/{args.drip}"
              + (f", the last after {cut:.1f}s" if cut is not None else ""))
        print(f"  silent sockets dropped by the server by then: "
              f"{held['silent_dropped']}/{held['silent']}")
        print(f"burst: {burst['deliveries']} deliveries from {args.threads} threads in "
              f"{burst['wall']:.2f}s: {burst['outcomes']}")
        print(f"  latency p50 {1000 * burst['p50']:.1f} ms, p95 {1000 * burst['p95']:.1f} ms, "
              f"p99 {1000 * burst['p99']:.1f} ms, max {1000 * burst['max']:.1f} ms "
              f"(target p99 ≤ 250 ms); resets {burst['resets']} (target 0)")
        print(f"  accepted {len(accepted)}, in the pushed reservations file "
              f"{len(accepted & found)}, lost {lost} (target 0)")
        if rss is not None:
            print(f"server peak RSS: {rss:.0f} MB")


if __name__ == "__main__":
    main()
