"""Benchmark the controller against the local Kubernetes-shaped API server (not a test).

    .venv/bin/python benchmarks/bench_controller.py                # 500 runners, Buildkite
    .venv/bin/python benchmarks/bench_controller.py --latency 0.005 --platform github

Phases, each with the controller running as it does in a cluster (informers, workers, watch):
1. 0 → N replicas (the set asks for N and has none when the controller starts): how many
   passes issued creates (must be 1), API calls in total from the controller's start (budget
   N + 8: two lists, two watches, the finalizer, N creates, two status writes — "Creating"
   before the creations and the result after —, and the pass's one Event; GitHub adds per runner a JIT Secret created
   before its pod and handed to it after, one read of the credentials, one Secret and one
   pod created as dry runs before any runner is registered, and one list of the set's JIT Secrets, by
   label, for those an earlier run left behind), and the time until N pods exist.
2. N idle → 0: passes that deleted (budget 2), API calls (budget N + 3: N pod deletions, one
   read of the set confirming the version the scale-down was decided on, the status and the
   pass's Event) and the time until none is left.
3. Bad RunnerSets (no template, negative replicas, unknown platform) next to a good one: each
   gets a Ready=False condition and the good one is served.
Exits 1 if a budget is exceeded.
"""
from __future__ import annotations

import argparse
import base64
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gitscale.controller.kube import Kube  # noqa: E402
from gitscale.controller.kube_config import client_for  # noqa: E402
from gitscale.controller.loop import Controller  # noqa: E402
from gitscale.controller.observe import LABEL_SET  # noqa: E402
from gitscale.controller.platforms import Platforms  # noqa: E402
from gitscale.timeutil import format_time, utcnow  # noqa: E402
from tests.controller.github_fake import FakeGitHub  # noqa: E402
from tests.controller.harness import buildkite_spec, github_spec  # noqa: E402
from tests.kubeapi.server import KubeAPIServer, start_api_server  # noqa: E402

NS = "default"


def wait_for(check: Callable[[], bool], timeout: float) -> float:
    start = time.perf_counter()
    while not check():
        if time.perf_counter() - start > timeout:
            raise SystemExit(f"timed out after {timeout}s")
        time.sleep(0.005)
    return time.perf_counter() - start


def live_pods(api: KubeAPIServer, name: str) -> list[dict[str, Any]]:
    return [p for p in api.objects("pods", NS, label_selector=f"{LABEL_SET}={name}")
            if not p["metadata"].get("deletionTimestamp")]


def write(api: KubeAPIServer, name: str, replicas: int, patch: int,
          spec: dict[str, Any] | None = None) -> None:
    owned = {"replicas": replicas, "patchID": patch, "effectiveTime": format_time(utcnow())}
    if api.get_object("runnersets", name, NS) is None:
        api.create_object("runnersets", {"apiVersion": "gitscale.dev/v1alpha1",
                                         "kind": "RunnerSet", "metadata": {"name": name},
                                         "spec": {**(spec or {}), **owned}}, NS)
    else:
        api.mutate_object("runnersets", name, lambda o: o["spec"].update(owned), NS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--latency", type=float, default=0.0,
                        help="seconds the API server sleeps per call (a real one: ~0.005)")
    parser.add_argument("--platform", choices=["buildkite", "github"], default="buildkite")
    args = parser.parse_args()
    n, ok = args.replicas, True

    api = start_api_server(latency=args.latency)
    github = FakeGitHub("bench-token").start()
    api.create_object("secrets", {"metadata": {"name": "gh-creds"}, "data": {
        "github_token": base64.b64encode(b"bench-token").decode()}}, NS)
    spec = buildkite_spec() if args.platform == "buildkite" else github_spec(github.url)
    kube = Kube(client_for(api.url, pool_size=args.concurrency + 8))
    controller = Controller(kube, namespace=NS, concurrency=args.concurrency,
                            platforms=Platforms(kube.read_secret, list_max_age=0))
    try:
        # 1. scale up: the set asks for N runners and has none; the controller starts.
        write(api, "bench", n, 0, spec)
        api.reset_calls()
        started = time.perf_counter()
        controller.start()
        wait_for(lambda: len(live_pods(api, "bench")) == n, 120)
        up = time.perf_counter() - started
        wait_for(lambda: (api.get_object("runnersets", "bench", NS) or {}).get(
            "status", {}).get("pending") == n, 30)
        time.sleep(1.0)  # let the watch echoes arrive: they must cause no further calls
        calls = api.calls_snapshot()
        total = sum(calls.values())
        creating = [r for r in controller.reports if r.created]
        print(f"scale-up 0→{n} ({args.platform}, concurrency {args.concurrency}, latency "
              f"{args.latency * 1000:.1f} ms): {up:.2f}s from the controller's start until "
              f"{n} pods exist")
        print(f"  passes that created: {len(creating)} "
              f"({', '.join(f'{len(r.created)} runners in {r.seconds:.2f}s' for r in creating)})")
        print("  API calls: " + ", ".join(f"{c} {v} {r}" for (v, r), c in sorted(calls.items())))
        # GitHub: + per runner a JIT Secret and its handover to the pod; the credentials; the
        # dry run before the registrations; the sweep of Secrets left behind (a list).
        budget = n + 8 + (2 * n + 4 if args.platform == "github" else 0)
        print(f"  API calls in total from the controller's start: {total} (budget {budget})")
        if args.platform == "github":
            print(f"  GitHub calls: {len(github.calls)} ({github.count('POST')} jitconfig)")
        ok &= len(creating) == 1 and len(creating[0].created) == n and total <= budget

        # 2. scale down, all idle
        for pod in live_pods(api, "bench"):
            api.set_pod_phase(NS, pod["metadata"]["name"], "Running")
            if github.by_name(pod["metadata"]["name"]):
                github.set_state(pod["metadata"]["name"], online=True, busy=False)
        time.sleep(0.5)
        wait_for(lambda: (api.get_object("runnersets", "bench", NS) or {}).get(
            "status", {}).get("idle") == n, 30)
        time.sleep(1.0)  # (the passes of the pods' phases are done)
        controller.reports.clear()
        api.reset_calls()
        github_before, unregistered = len(github.calls), github.count("DELETE")
        write(api, "bench", 0, 0)
        down = wait_for(lambda: not live_pods(api, "bench"), 120)
        wait_for(lambda: any(r.deleted for r in controller.reports), 30)
        wait_for(lambda: (api.get_object("runnersets", "bench", NS) or {}).get(
            "status", {}).get("replicas") == 0, 30)
        time.sleep(1.0)  # let the watch echoes arrive: they must cause no further calls
        calls = api.calls_snapshot()
        deleting = [r for r in controller.reports if r.deleted]
        print(f"scale-down {n} idle→0: {down:.2f}s until none is left; passes that deleted: "
              f"{len(deleting)} ({', '.join(f'{len(r.deleted)} runners in {r.seconds:.2f}s' for r in deleting)})")
        print("  API calls: " + ", ".join(f"{c} {v} {r}" for (v, r), c in sorted(calls.items())))
        # N pod deletions, the read that confirms the version before removing, the status
        # and the pass's Event
        down_budget = n + 3
        print(f"  API calls in total: {sum(calls.values())} (budget {down_budget})")
        if args.platform == "github":
            print(f"  GitHub calls: {len(github.calls) - github_before} "
                  f"({github.count('DELETE') - unregistered} unregistered)")
        ok &= len(deleting) <= 2 and sum(calls.values()) <= down_budget

        # 3. bad sets next to a good one
        spoilers: dict[str, Callable[[dict[str, Any]], Any]] = {
            "no-template": lambda s: s.pop("template"),
            "negative": lambda s: s.update(replicas=-1),
            "unknown-platform": lambda s: s.update(platform="jenkins"),
        }
        for name, spoil in spoilers.items():
            write(api, name, 1, 0, spec)
            api.mutate_object("runnersets", name, lambda o, f=spoil: f(o["spec"]), NS)  # type: ignore[misc]
        write(api, "good", 3, 0, spec)
        wait_for(lambda: len(live_pods(api, "good")) == 3, 30)

        def reason(name: str) -> str | None:
            conds = ((api.get_object("runnersets", name, NS) or {}).get("status") or {}).get(
                "conditions") or []
            bad = [c for c in conds if c["type"] == "Ready" and c["status"] == "False"]
            return f"{bad[0]['reason']}: {bad[0]['message']}" if bad else None

        wait_for(lambda: all(reason(name) for name in spoilers), 30)
        for name in spoilers:
            print(f"bad set {name!r}: {reason(name)}")
        print("good set next to them: 3 runners created")
    finally:
        controller.stop()
        kube.close()
        github.stop()
        api.stop()
    print("OK" if ok else "BUDGET EXCEEDED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
