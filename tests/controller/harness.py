"""The controller against the local Kubernetes-shaped API server and the GitHub fake.

The test plays Argo CD (spec writes), the kubelet (pod phases) and GitHub (idle or busy). The
controller's informers run for real (list + watch over HTTP); passes are run by the test, after
the controller's caches have caught up with the server, so each step is deterministic.
"""
from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator

from gitscale.controller.cache import Store
from gitscale.controller.context import Report
from gitscale.controller.kube import Kube
from gitscale.controller.kube_config import client_for
from gitscale.controller.loop import Controller
from gitscale.controller.observe import LABEL_SET
from gitscale.controller.platforms import Platforms
from gitscale.timeutil import format_time
from tests.controller.github_fake import FakeGitHub, FakeRunner
from tests.kubeapi.server import KubeAPIServer, start_api_server

T0 = datetime(2026, 11, 23, 9, 0, tzinfo=timezone.utc)
TOKEN = "ghp-harness-token"
NS = "default"


@dataclass
class Clock:
    now: datetime = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


def github_spec(github_url: str, **extra: Any) -> dict[str, Any]:
    """A GitHub set whose runner container gives no command, as `init` writes it: the
    controller must start the image's run.sh itself (the image has no ENTRYPOINT)."""
    return {"platform": "github",
            "github": {"configURL": f"{github_url}/acme", "labels": ["linux"],
                       "credentialsSecret": "gh-creds", **extra},
            "template": {"spec": {"containers": [
                {"name": "runner", "image": "ghcr.io/actions/actions-runner:2.336.0"}]}}}


def buildkite_spec() -> dict[str, Any]:
    return {"platform": "buildkite",
            "buildkite": {"queue": "linux", "tags": ["arch=x64"], "agentTokenSecret": "bk-token"},
            "template": {"spec": {"containers": [
                {"name": "agent", "image": "buildkite/agent:3.137.0"}]}}}


@dataclass(frozen=True)
class Elapsed:
    """A monotonic clock that keeps the harness clock's time: seconds since ``T0``."""

    clock: Clock

    def __call__(self) -> float:
        return (self.clock.now - T0).total_seconds()


@dataclass
class Harness:
    api: KubeAPIServer
    github: FakeGitHub
    controller: Controller
    clock: Clock
    sets: dict[str, dict[str, Any]] = field(default_factory=dict)

    # -- Argo CD ------------------------------------------------------------------------------
    def write(self, name: str, replicas: int, patch: int, *, spec: dict[str, Any] | None = None,
              effective: datetime | None = None, backlog: int | None = None) -> None:
        """A spec write (r, p): replicas, patch ID and effectiveTime = now, as gitscale writes
        (and ``spec.backlog`` when given)."""
        owned: dict[str, Any] = {"replicas": replicas, "patchID": patch,
                                 "effectiveTime": format_time(effective or self.clock.now)}
        if backlog is not None:
            owned["backlog"] = backlog
        if self.api.get_object("runnersets", name, NS) is None:
            body = spec or github_spec(self.github.url)
            self.api.create_object("runnersets", {
                "apiVersion": "gitscale.dev/v1alpha1", "kind": "RunnerSet",
                "metadata": {"name": name, "namespace": NS}, "spec": {**body, **owned}}, NS)
        else:
            self.api.mutate_object("runnersets", name, lambda o: o["spec"].update(owned), NS)

    # -- the controller -----------------------------------------------------------------------
    def sync(self, name: str) -> Report:
        """One pass over the set, once the caches caught up; its Events posted when it returns."""
        self.catch_up()
        report = self.controller.reconcile(f"{NS}/{name}")
        assert self.controller.events.flush(5), "the pass's Events were not posted"
        return report

    def events(self, name: str) -> list[dict[str, Any]]:
        """The Events about the set (as ``kubectl describe`` finds them: by involvedObject)."""
        return self.api.objects("events", NS, field_selector=f"involvedObject.name={name}")

    def catch_up(self, timeout: float = 5.0) -> None:
        """Wait until the controller's caches hold what the server holds."""
        deadline = time.monotonic() + timeout
        while True:
            want = {**_versions(self.api.objects("pods", NS, label_selector=LABEL_SET), "p"),
                    **_versions(self.api.objects("runnersets", NS), "r")}
            have = {**_cached(self.controller.pods, "p"),
                    **_cached(self.controller.runnersets, "r")}
            if want == have:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the controller's caches did not catch up: {want} {have}")
            time.sleep(0.01)

    # -- the kubelet and GitHub ---------------------------------------------------------------
    def pods(self, name: str) -> list[dict[str, Any]]:
        return [p for p in self.api.objects("pods", NS, label_selector=f"{LABEL_SET}={name}")
                if not p["metadata"].get("deletionTimestamp")]

    def status(self, name: str) -> dict[str, Any]:
        obj = self.api.get_object("runnersets", name, NS)
        assert obj is not None, f"no RunnerSet {name}"
        return dict(obj.get("status") or {})

    def pod(self, name: str) -> dict[str, Any]:
        obj = self.api.get_object("pods", name, NS)
        assert obj is not None, f"no pod {name}"
        return obj

    def names(self, name: str) -> list[str]:
        return sorted(p["metadata"]["name"] for p in self.pods(name))

    def runner(self, pod: str) -> FakeRunner | None:
        return self.github.by_name(pod)

    def running(self, pod: str, *, busy: bool = False) -> None:
        self.api.set_pod_phase(NS, pod, "Running", [
            {"name": "runner", "ready": True, "state": {"running": {}}}])
        if self.github.by_name(pod) is not None:
            self.github.set_state(pod, online=True, busy=busy)

    def unschedulable(self, pod: str, message: str = "0/3 nodes are available: 3 Insufficient "
                      "cpu. preemption: 0/3 nodes are available: 3 No preemption victims found "
                      "for incoming pod.", since: datetime | None = None) -> None:
        """The scheduler cannot place the pod (as kube-scheduler writes it), since ``since``
        (default: now)."""
        self.api.set_pod_phase(NS, pod, "Pending", conditions=[
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": message, "lastProbeTime": None,
             "lastTransitionTime": format_time(since or self.clock.now)}])

    def scheduled(self, pod: str) -> None:
        """The scheduler placed the pod (a node was added): the kubelet is pulling its image."""
        self.api.set_pod_phase(NS, pod, "Pending", [
            {"name": "runner", "ready": False, "state": {"waiting": {
                "reason": "ContainerCreating"}}}], conditions=[
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
             "lastTransitionTime": format_time(self.clock.now)}])

    def stop(self, pod: str, exit_code: int = 0) -> None:
        """The runner exits (0: did its job; else failed), now."""
        runner = self.github.by_name(pod)
        if runner is not None and exit_code == 0:
            with self.github.lock:  # an ephemeral runner unregisters itself after its job
                del self.github.runners[runner.id]
        self.api.set_pod_phase(NS, pod, "Succeeded" if exit_code == 0 else "Failed", [
            {"name": "runner", "ready": False, "state": {"terminated": {
                "exitCode": exit_code, "finishedAt": format_time(self.clock.now)}}}])

    def pod_deletes(self) -> list[str]:
        return [line.split("/pods/")[1].split(" ")[0].split("?")[0] for line in self.api.log
                if line.startswith("DELETE") and "/pods/" in line]


def _versions(objects: list[dict[str, Any]], prefix: str) -> dict[str, str]:
    return {f"{prefix}:{o['metadata']['name']}": o["metadata"]["resourceVersion"] for o in objects}


def _cached(store: Store, prefix: str) -> dict[str, str]:
    objects = [store.get(key) for key in store.keys()]
    return _versions([dict(o) for o in objects if o is not None], prefix)


def start(clock: Clock | None = None, *, workers: bool = False, kube_timeout: float = 30.0,
          platform_clock: Callable[[], float] | None = None, concurrency: int = 8,
          **controller_options: Any) -> Iterator[Harness]:
    """``platform_clock``: the monotonic seconds the platforms' clients keep time by (how old a
    runner list is, how long GitHub is given after failing, when credentials are read again);
    the harness clock's, in seconds from ``T0``, unless given."""
    clock = clock or Clock()
    if platform_clock is None:
        platform_clock = Elapsed(clock)
    api = start_api_server(clock=clock)
    github = FakeGitHub(TOKEN).start()
    kube = Kube(client_for(api.url), timeout=kube_timeout)
    controller = Controller(kube, clock=clock, concurrency=concurrency,
                            platforms=Platforms(kube.read_secret, list_max_age=0,
                                                clock=platform_clock),
                            **controller_options)
    api.create_object("secrets", {"metadata": {"name": "gh-creds"}, "type": "Opaque", "data": {
        "github_token": base64.b64encode(TOKEN.encode()).decode()}}, NS)
    try:
        controller.start(workers=workers)
        assert controller.synced(5), "informers did not list"
        yield Harness(api, github, controller, clock)
    finally:
        # A watch a test left held (black-holed to its end) is answered now and ends at once:
        # answered as usual, it would open a stream after controller.stop() ended the open
        # ones, and the stop would wait 5 s for its informer.
        api.cut_watches_after = 0
        api.release_held()
        controller.stop()
        kube.close()
        github.stop()
        api.stop()
