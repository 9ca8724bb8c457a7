"""Two controllers, one Lease: only the holder acts, the other takes over when it dies, and a
leader that cannot renew stops acting. Real controllers (informers, workers, the elector)
against the Kubernetes-shaped API server, with short lease timings (2 s / 1.4 s / 0.2 s)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import kubernetes.client
import pytest

from gitscale.controller.context import Report
from gitscale.controller.kube import Kube
from gitscale.controller.kube_config import client_for
from gitscale.controller.leader import LeaseConfig
from gitscale.controller.loop import Controller
from gitscale.controller.observe import FINALIZER
from gitscale.controller.podspec import instance
from tests.helpers import wait_for
from tests.controller.github_fake import FakeRunner
from tests.controller.harness import NS, Harness, buildkite_spec, start
from tests.kubeapi.proxy import BlackHoleProxy
from tests.kubeapi.server import KubeAPIServer, start_api_server

FAST = {"duration": 2, "renew_deadline": 1.4, "retry": 0.2}


def eventually(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    return wait_for(check, timeout)


class Cluster:
    def __init__(self) -> None:
        self.api = start_api_server()
        self.controllers: dict[str, Controller] = {}
        self._kubes: list[Kube] = []

    def start(self, name: str, url: str | None = None, **timing: Any) -> Controller:
        kube = Kube(client_for(url or self.api.url))
        self._kubes.append(kube)
        controller = Controller(kube, namespace=NS, resync=0.5, concurrency=4,
                                election=LeaseConfig(NS, name, **{**FAST, **timing}))
        self.controllers[name] = controller.start()
        return controller

    def write(self, name: str, replicas: int, patch: int) -> None:
        owned = {"replicas": replicas, "patchID": patch}
        if self.api.get_object("runnersets", name, NS) is None:
            self.api.create_object("runnersets", {
                "apiVersion": "gitscale.dev/v1alpha1", "kind": "RunnerSet",
                "metadata": {"name": name, "namespace": NS},
                "spec": {**buildkite_spec(), **owned}}, NS)
        else:
            self.api.mutate_object("runnersets", name, lambda o: o["spec"].update(owned), NS)

    def pods(self, name: str) -> int:
        return len(self.api.objects("pods", NS, label_selector=f"gitscale.dev/runnerset={name}"))

    def holder(self) -> str:
        lease = self.api.get_object("leases", "gitscale-controller", NS) or {}
        return str((lease.get("spec") or {}).get("holderIdentity", ""))

    def leaders(self) -> list[str]:
        return [n for n, c in self.controllers.items() if c.acting.is_set()]

    def passes(self, name: str) -> list[Report]:
        return [r for r in self.controllers[name].reports if r.actions is not None]

    def stop(self) -> None:
        for controller in self.controllers.values():
            if not controller.stop_event.is_set():
                controller.stop()
        for kube in self._kubes:
            kube.close()
        self._kubes.clear()
        self.api.stop()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    try:
        yield c
    finally:
        c.stop()


def overlap(a: list[Report], b: list[Report]) -> bool:
    return any(x.started < y.started + y.seconds and y.started < x.started + x.seconds
               for x in a for y in b)


def test_one_acts_and_the_other_takes_over_when_it_dies(cluster: Cluster) -> None:
    a, b = cluster.start("a"), cluster.start("b")
    leader = eventually(lambda: cluster.holder())
    eventually(lambda: cluster.leaders() == [leader])
    follower = "b" if leader == "a" else "a"
    cluster.write("bk", 3, 0)
    eventually(lambda: any(r.created for r in cluster.passes(leader)))
    time.sleep(0.3)  # a few more resyncs: the follower still does nothing
    assert cluster.passes(leader) and not cluster.passes(follower)

    died = time.monotonic()
    cluster.controllers[leader].stop(release=False)  # killed: no release, no more renewals
    cluster.write("bk", 5, 0)
    eventually(lambda: any(r.created for r in cluster.passes(follower)))
    assert cluster.pods("bk") == 5
    assert cluster.holder() == follower and cluster.leaders() == [follower]
    took_over = min(r.started for r in cluster.passes(follower))
    assert took_over > died  # it waited for the lease to expire...
    assert not overlap(cluster.passes(leader), cluster.passes(follower))  # ...never both
    lease = cluster.api.get_object("leases", "gitscale-controller", NS)
    assert lease is not None and lease["spec"]["leaseTransitions"] == 1
    assert a is not b


def test_a_clean_stop_hands_the_lease_over_at_once(cluster: Cluster) -> None:
    slow = {"duration": 60, "renew_deadline": 40}  # a takeover after expiry would time out
    cluster.start("a", **slow)
    eventually(lambda: cluster.holder() == "a")
    cluster.controllers["a"].stop()
    assert cluster.holder() == ""  # released
    cluster.start("b", **slow)
    eventually(lambda: cluster.holder() == "b")  # at once, not after 60 s


def test_a_leader_that_cannot_renew_stops_acting(cluster: Cluster) -> None:
    cluster.start("a")
    eventually(lambda: cluster.leaders() == ["a"])
    cluster.write("bk", 1, 0)
    eventually(lambda: cluster.pods("bk") == 1)
    cluster.api.inject_error("get", "leases", times=10_000)  # the API fails for the Lease
    eventually(lambda: cluster.leaders() == [])
    passes = len(cluster.passes("a"))
    cluster.write("bk", 4, 0)
    time.sleep(0.5)  # resyncs come and go: nobody acts
    assert cluster.pods("bk") == 1 and len(cluster.passes("a")) == passes
    cluster.api.clear_errors()
    eventually(lambda: cluster.pods("bk") == 4)
    assert cluster.leaders() == ["a"]


def test_a_leader_cut_off_from_the_api_stops_acting_before_another_takes_over(
        cluster: Cluster) -> None:
    """A network partition: the leader's renewal is sent and never answered. Its deadline is
    kept by a timer, so it stops acting by then, and the other replica (which sees no renewal
    for the lease duration) only starts after."""
    proxy = BlackHoleProxy(cluster.api.server_address).start()
    try:
        a = cluster.start("a", url=proxy.url)
        eventually(lambda: cluster.leaders() == ["a"])
        b = cluster.start("b")
        samples: list[tuple[float, bool, bool]] = []
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.002):
                samples.append((time.monotonic(), a.acting.is_set(), b.acting.is_set()))

        sampler = threading.Thread(target=sample)
        sampler.start()
        time.sleep(0.3)  # a renews, b waits
        proxy.blackhole.set()
        cut = time.monotonic()
        eventually(lambda: cluster.leaders() == ["b"])
        # the sampler (a thread of its own, late under load) has seen b acting too
        eventually(lambda: any(theirs for _, _, theirs in samples[-50:]))
        done.set()
        sampler.join()
        assert not any(ours and theirs for _, ours, theirs in samples)
        a_stopped = next(t for t, ours, _ in samples if t > cut and not ours)
        b_started = next(t for t, _, theirs in samples if theirs)
        assert a_stopped - cut <= FAST["renew_deadline"] + 0.1  # its call still hangs
        assert b_started - a_stopped >= FAST["duration"] - FAST["renew_deadline"] - 0.2
    finally:
        proxy.blackhole.clear()  # let a shut down cleanly
        cluster.stop()
        proxy.stop()


def test_a_leader_that_loses_the_lease_mid_creation_makes_no_pod_and_writes_no_status(
        harness: Harness) -> None:
    """The Lease is lost (the elector's ``on_stop``) while a pass registers its runners: the
    creations in flight create no pod and undo their registrations and Secrets, and the pass
    writes no status — the next leader may already act on the set. Leading again, the same
    write is completed."""
    harness.write("rs", 2, 1)
    written: list[int] = []

    def lose_the_lease(verb: str, resource: str, query: dict[str, str]) -> None:
        if (verb, resource) == ("create", "secrets") and not written:
            harness.controller._follow()  # what the elector calls: renewal deadline passed
            written.append(harness.api.call_count("patch", "runnersets/status"))

    harness.api.on_call(lose_the_lease)
    report = harness.sync("rs")
    assert written and report.created == [] and harness.names("rs") == []
    assert harness.github.runners == {}  # registrations undone
    assert harness.api.objects("secrets", NS, label_selector="gitscale.dev/runnerset=rs") == []
    assert harness.api.call_count("patch", "runnersets/status") == written[0]
    harness.controller._lead()
    assert len(harness.sync("rs").created) == 2 and len(harness.names("rs")) == 2
    assert harness.status("rs")["appliedPatchID"] == 1


def test_a_pass_in_flight_when_the_lease_went_creates_no_more_once_it_is_back(
        harness: Harness) -> None:
    """A pass creating 20 runners, 8 at a time, loses the Lease with 8 pod creations in
    flight (the API server slow to answer them) and 12 not started; this replica takes the
    Lease back before they are answered. The pass creates no more: it was decided in the
    term that ended, and the replica that led meanwhile may have made the same runners. Its
    write is left to the next pass, which makes what is missing."""
    harness.write("bk", 20, 0, spec=buildkite_spec())  # (the harness: 8 creations at a time)
    harness.catch_up()
    answer = harness.api.hang("create", "pods")
    reports: list[Report] = []
    thread = threading.Thread(target=lambda: reports.append(
        harness.controller.reconcile(f"{NS}/bk")))
    thread.start()
    try:
        wait_for(lambda: harness.api.call_count("create", "pods") == 8, 5)
        harness.controller._follow()  # the renewal deadline passed
        harness.controller._lead()  # ... and the Lease was taken back
    finally:
        answer.set()
        thread.join(10)
    (report,) = reports
    assert len(report.created) == 8 and harness.api.call_count("create", "pods") == 8
    ready = next(c for c in harness.status("bk")["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "Creating"  # as the pass said before creating: no status since
    assert len(harness.sync("bk").created) == 12 and len(harness.names("bk")) == 20


@pytest.fixture
def elected() -> Iterator[Harness]:
    """The harness (passes run by the test) with leader election: once another holder takes
    the Lease, this controller waits 60 s before it takes an unrenewed Lease back."""
    yield from start(election=LeaseConfig(NS, "a", duration=60, renew_deadline=40, retry=0.1))


def _take_lease(api: KubeAPIServer, holder: str) -> None:
    api.mutate_object("leases", "gitscale-controller",
                      lambda o: o["spec"].update(holderIdentity=holder), NS)


def test_a_deposed_leader_sweeps_no_registration_and_patches_no_finalizer(
        elected: Harness) -> None:
    """Another replica took the Lease: a pass still run by this one (in flight when the
    Lease went) writes nothing the new leader writes — no leftover registration swept, no
    finalizer added or lifted — as it creates, removes and writes no status. Leading again,
    it does all of it."""
    h, controller = elected, elected.controller
    eventually(controller.acting.is_set)
    h.write("old", 0, 0)
    h.sync("old")  # no runner; the finalizer holds it
    uid = h.api.get_object("runnersets", "old", NS)["metadata"]["uid"]  # type: ignore[index]
    leftover = f"old-{instance(uid)}-abcdef"  # a crash left its registration, no pod
    with h.github.lock:
        runner_id = next(h.github.ids)
        h.github.runners[runner_id] = FakeRunner(runner_id, leftover, "orgs/acme", ["linux"], 1)
    _take_lease(h.api, "b")
    eventually(controller.ctx.deposed.is_set)
    kubernetes.client.CustomObjectsApi(controller.kube.api).delete_namespaced_custom_object(
        "gitscale.dev", "v1alpha1", NS, "runnersets", "old")  # Argo CD prunes it
    h.write("new", 1, 0)
    patches, deletes = h.api.call_count("patch", "runnersets"), h.github.count("DELETE")

    assert h.sync("old").leftovers == [] and h.sync("new").created == []
    assert h.github.count("DELETE") == deletes and runner_id in h.github.runners
    assert h.api.call_count("patch", "runnersets") == patches
    old = h.api.get_object("runnersets", "old", NS)
    assert old is not None and old["metadata"]["finalizers"] == [FINALIZER]
    new = h.api.get_object("runnersets", "new", NS)
    assert new is not None and not new["metadata"].get("finalizers")

    _take_lease(h.api, "")  # b released it: a takes it at once
    eventually(lambda: controller.acting.is_set() and not controller.ctx.deposed.is_set())
    assert h.sync("old").leftovers == [leftover] and runner_id not in h.github.runners
    assert h.api.get_object("runnersets", "old", NS) is None
    assert len(h.sync("new").created) == 1
    new = h.api.get_object("runnersets", "new", NS)
    assert new is not None and new["metadata"]["finalizers"] == [FINALIZER]


def test_a_sweep_stops_removing_when_the_lease_is_lost(harness: Harness) -> None:
    """The Lease is lost (the elector's ``on_stop``) while a pass removes two leftover
    registrations: the one in hand is finished, the other left to the next leader."""
    harness.write("rs", 0, 0)
    harness.sync("rs")
    uid = harness.api.get_object("runnersets", "rs", NS)["metadata"]["uid"]  # type: ignore[index]
    gh = harness.github
    with gh.lock:
        for suffix in ("aaaaaa", "bbbbbb"):
            runner_id = next(gh.ids)
            gh.runners[runner_id] = FakeRunner(runner_id, f"rs-{instance(uid)}-{suffix}",
                                               "orgs/acme", ["linux"], 1)
    harness.clock.advance(301)  # the next look for leftovers: suspected...
    assert harness.sync("rs").leftovers == [] and len(gh.runners) == 2
    harness.clock.advance(60)  # ...and removed once their grace is over

    def lose_the_lease(verb: str, resource: str, query: dict[str, str]) -> None:
        if (verb, resource) == ("delete", "secrets"):  # the first one's Secret
            harness.controller._follow()

    harness.api.on_call(lose_the_lease)
    assert len(harness.sync("rs").leftovers) == 1 and len(gh.runners) == 1


def test_cli_replicas_elect_one_and_fail_over_on_sigkill(tmp_path: Path) -> None:
    api: KubeAPIServer = start_api_server()
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST",
                                                             "POD_NAMESPACE")}
    procs: dict[str, tuple[subprocess.Popen[str], Path]] = {}
    try:
        for name in ("one", "two"):
            log = tmp_path / f"{name}.log"
            procs[name] = (subprocess.Popen(
                [sys.executable, "-m", "gitscale", "controller", "--kubeconfig",
                 str(kubeconfig), "--namespace", NS, "--health-port", "0", "--leader-elect",
                 "--lease-duration", "2", "--renew-deadline", "1.4", "--retry-period", "0.2"],
                stdout=subprocess.DEVNULL, stderr=log.open("w"), env=env, text=True), log)

        def holder() -> str:
            lease = api.get_object("leases", "gitscale-controller", NS) or {}
            return str((lease.get("spec") or {}).get("holderIdentity", ""))

        first = eventually(holder)
        leader = eventually(lambda: next((n for n, (_, log) in procs.items()
                                          if f"{first} leads" in log.read_text()), None))
        api.create_object("runnersets", {
            "apiVersion": "gitscale.dev/v1alpha1", "kind": "RunnerSet",
            "metadata": {"name": "bk", "namespace": NS},
            "spec": {**buildkite_spec(), "replicas": 2, "patchID": 0}}, NS)
        eventually(lambda: len(api.objects("pods", NS)) == 2)
        procs[leader][0].send_signal(signal.SIGKILL)
        procs[leader][0].wait(10)
        second = eventually(lambda: holder() not in ("", first) and holder())
        api.mutate_object("runnersets", "bk", lambda o: o["spec"].update(replicas=3), NS)
        eventually(lambda: len(api.objects("pods", NS)) == 3)
        survivor = next(n for n in procs if n != leader)
        assert f"{second} leads" in procs[survivor][1].read_text()
    finally:
        for proc, _ in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
        api.stop()


def test_cli_leader_election_id_names_the_lease(tmp_path: Path) -> None:
    """Two controllers in one namespace (say one per org) each hold their own Lease."""
    api: KubeAPIServer = start_api_server()
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST",
                                                             "POD_NAMESPACE")}
    procs = []
    try:
        for lease in ("runners-acme", "runners-globex"):
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "gitscale", "controller", "--kubeconfig",
                 str(kubeconfig), "--namespace", NS, "--health-port", "0", "--leader-elect",
                 "--leader-election-id", lease, "--lease-duration", "2", "--renew-deadline",
                 "1.4", "--retry-period", "0.2"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, text=True))

        def holders() -> dict[str, str]:
            return {name: str(((api.get_object("leases", name, NS) or {}).get("spec") or {})
                              .get("holderIdentity", ""))
                    for name in ("runners-acme", "runners-globex", "gitscale-controller")}

        found = eventually(lambda: all(list(holders().values())[:2]) and holders())
        assert found["gitscale-controller"] == ""  # the default Lease is not taken
        assert found["runners-acme"] != found["runners-globex"]  # both lead, each its own
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
        api.stop()


def test_cli_refuses_a_lease_name_kubernetes_would(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.helpers import run

    code, _, err = run(capsys, "controller", "--leader-elect", "--leader-election-id",
                       "Runners_ACME")
    assert code == 1 and "--leader-election-id" in err and "'Runners_ACME'" in err, err
    assert "Traceback" not in err
