"""GitHub requests an hour of a steady controller (not a test): the runner list's cost.

    .venv/bin/python benchmarks/bench_github_requests.py                 # 20 sets x 20 runners
    .venv/bin/python benchmarks/bench_github_requests.py --sets 5 --runners 10 --minutes 5

Every set of one org (one Secret, one configURL) has ``--runners`` runner pods, all running,
half of them busy; the controller's informers run against ``tests/kubeapi`` and GitHub is
``tests/controller/github_fake.py`` (ETags and 304s as GitHub answers them). Simulated time
advances ``--step`` seconds at a time; each step some runners take or finish a job
(``--churn``, a share of all of them, so the runner list changes) and every set gets a pass, as
its pod events and the resync would give it. A patch-ID above 0 means no pass may scale down,
so the list only serves status counts: the steady state of a busy org. Prints GitHub requests
per simulated hour: all of them, the runner list's pages, and the 304s among them (which GitHub
does not count against the rate limit).
"""
from __future__ import annotations

import argparse
import base64
import inspect
import random
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gitscale.controller import github as controller_github  # noqa: E402
from gitscale.controller.kube import Kube  # noqa: E402
from gitscale.controller.kube_config import client_for  # noqa: E402
from gitscale.controller.loop import Controller  # noqa: E402
from gitscale.controller.platforms import Platforms  # noqa: E402
from tests.controller.github_fake import FakeGitHub, FakeRunner  # noqa: E402
from tests.controller.harness import Clock, github_spec  # noqa: E402
from tests.kubeapi.server import start_api_server  # noqa: E402

NS = "default"
TOKEN = "bench-token"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", type=int, default=20)
    parser.add_argument("--runners", type=int, default=20, help="runner pods per set")
    parser.add_argument("--minutes", type=float, default=20.0, help="simulated minutes")
    parser.add_argument("--step", type=float, default=10.0, help="seconds between passes")
    parser.add_argument("--churn", type=float, default=0.05,
                        help="share of the runners that take or finish a job each step")
    parser.add_argument("--org-runners", type=int, default=0,
                        help="other runners registered in the org (not the controller's)")
    args = parser.parse_args()

    clock = Clock(datetime(2026, 11, 23, 9, 0, tzinfo=timezone.utc))
    start = clock.now

    def seconds() -> float:
        return (clock.now - start).total_seconds()

    if "monotonic" not in inspect.signature(controller_github.GitHub.__init__).parameters:
        # The code before the list was shared by age: its list age is wall-clock time; give it
        # the simulated clock (a token, not an App: nothing else reads that clock).
        defaults = controller_github.GitHub.__init__.__kwdefaults__ or {}
        defaults["clock"] = seconds
    api = start_api_server(clock=clock)
    github = FakeGitHub(TOKEN).start()
    kube = Kube(client_for(api.url))
    controller = Controller(kube, clock=clock, concurrency=8,
                            platforms=Platforms(kube.read_secret, clock=seconds))
    api.create_object("secrets", {"metadata": {"name": "gh-creds"}, "data": {
        "github_token": base64.b64encode(TOKEN.encode()).decode()}}, NS)
    rng = random.Random(7)
    with github.lock:
        for n in range(args.org_runners):
            runner_id = next(github.ids)
            github.runners[runner_id] = FakeRunner(runner_id, f"vm-{n:05d}", "orgs/acme",
                                                   ["windows"], 1, online=True)
    try:
        controller.start(workers=False)
        assert controller.synced(5)
        keys = []
        for n in range(args.sets):
            name = f"set-{n:02d}"
            api.create_object("runnersets", {
                "apiVersion": "gitscale.dev/v1alpha1", "kind": "RunnerSet",
                "metadata": {"name": name, "namespace": NS},
                "spec": {**github_spec(github.url), "replicas": args.runners, "patchID": 1,
                         "effectiveTime": clock.now.strftime("%Y-%m-%dT%H:%M:%SZ")}}, NS)
            keys.append(f"{NS}/{name}")
        _settle(controller, api)
        for key in keys:
            controller.reconcile(key)
        pods = [p["metadata"]["name"] for p in api.objects("pods", NS)]
        for pod in pods:
            api.set_pod_phase(NS, pod, "Running", [
                {"name": "runner", "ready": True, "state": {"running": {}}}])
            github.set_state(pod, online=True, busy=rng.random() < 0.5)
        _settle(controller, api)
        for key in keys:
            controller.reconcile(key)
        before = _counts(github)
        steps = int(args.minutes * 60 / args.step)
        wall = time.perf_counter()
        for _ in range(steps):
            clock.advance(args.step)
            for pod in rng.sample(pods, max(int(len(pods) * args.churn), 0)):
                runner = github.by_name(pod)
                if runner is not None:
                    github.set_state(pod, online=True, busy=not runner.busy)
            _settle(controller, api)
            for key in keys:
                controller.reconcile(key)
        wall = time.perf_counter() - wall
        after = _counts(github)
        hours = steps * args.step / 3600
        per_hour = [round((a - b) / hours) for a, b in zip(after, before)]
        print(f"{args.sets} sets x {args.runners} runners ({args.sets * args.runners} in one "
              f"org of {args.sets * args.runners + args.org_runners} runners), a pass per set "
              f"every {args.step:g} s, {args.churn:.0%} of the runners changing state per "
              f"step, {args.minutes:g} simulated minutes ({wall:.1f} s):")
        print(f"  GitHub requests/hour: {per_hour[0]}  (runner list pages: {per_hour[1]}, "
              f"of which 304: {per_hour[2]}; counted against the rate limit: "
              f"{per_hour[0] - per_hour[2]})")
    finally:
        controller.stop()
        kube.close()
        github.stop()
        api.stop()
    return 0


def _counts(github: FakeGitHub) -> tuple[int, int, int]:
    with github.lock:
        calls = list(github.calls)
        not_modified = github.not_modified
    pages = sum(m == "GET" and p.endswith("/actions/runners") for m, p in calls)
    return len(calls), pages, not_modified


def _settle(controller: Controller, api: object, timeout: float = 10.0) -> None:
    """Wait until the controller's caches hold what the API server holds."""
    from tests.controller.harness import _cached, _versions

    deadline = time.monotonic() + timeout
    while True:
        want = {**_versions(api.objects("pods", NS), "p"),  # type: ignore[attr-defined]
                **_versions(api.objects("runnersets", NS), "r")}  # type: ignore[attr-defined]
        have = {**_cached(controller.pods, "p"), **_cached(controller.runnersets, "r")}
        if want == have:
            return
        if time.monotonic() > deadline:
            raise SystemExit("the controller's caches did not catch up")
        time.sleep(0.005)


if __name__ == "__main__":
    raise SystemExit(main())
