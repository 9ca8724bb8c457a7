"""The controller converges: a write applied in part (creations refused, the process killed or
stopped midway) is completed by a later pass, never beyond ``replicas``, and what a crash
leaves behind (registrations with no pod, their Secrets) is removed."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import kubernetes.client
import pytest

from gitscale.controller.kube import Kube
from gitscale.controller.kube_config import client_for
from gitscale.controller.loop import Controller
from gitscale.controller.platforms import Platforms
from gitscale.controller.podspec import instance
from tests.helpers import wait_for
from tests.controller.github_fake import FakeRunner
from tests.controller.harness import NS, Harness, buildkite_spec, github_spec


def eventually(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    return wait_for(check, timeout)


def condition(harness: Harness, name: str, kind: str = "Ready") -> dict[str, Any]:
    return next(c for c in harness.status(name)["conditions"] if c["type"] == kind)


def controller_process(harness: Harness, tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    kubeconfig = harness.api.write_kubeconfig(tmp_path / "kubeconfig")
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    return subprocess.Popen(
        [sys.executable, "-m", "gitscale", "controller", "--kubeconfig", str(kubeconfig),
         "--namespace", NS, "--health-port", "0", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)


def test_creates_answered_500_are_completed_by_the_next_pass(harness: Harness) -> None:
    harness.write("rs", 20, 3)
    harness.api.inject_error("create", "pods", times=5, skip=1)  # (the first is a dry run)
    first = harness.sync("rs")
    assert len(first.created) == 15 and len(harness.pods("rs")) == 15
    ready = condition(harness, "rs")
    assert (ready["status"], ready["reason"]) == ("False", "CreateFailed")
    assert ready["message"].startswith("5 of 20 runner(s) missing: ")
    assert condition(harness, "rs", "Reconciling")["status"] == "True"
    assert harness.status("rs").get("appliedPatchID") != 3
    assert first.requeue_after == 10  # refused creations back off
    assert harness.sync("rs").created == []  # not before then
    harness.clock.advance(10)
    second = harness.sync("rs")  # the same write (patch 3): the gate is still open
    assert len(second.created) == 5 and len(harness.pods("rs")) == 20
    status = harness.status("rs")
    assert status["appliedPatchID"] == 3 and status["replicas"] == 20
    assert condition(harness, "rs")["status"] == "True"
    assert condition(harness, "rs", "Reconciling")["status"] == "False"
    third = harness.sync("rs")  # applied: the gate is shut, nothing beyond replicas
    assert third.actions is not None and not third.actions.acting
    assert third.created == [] and len(harness.pods("rs")) == 20
    assert len(harness.github.runners) == 20  # the refused pods' registrations were removed


def test_a_controller_killed_midway_is_completed_and_its_leftovers_removed(
        harness: Harness, tmp_path: Path) -> None:
    harness.write("rs", 30, 2)
    harness.api.latency = 0.02
    proc = controller_process(harness, tmp_path, "--concurrency", "2")
    try:
        eventually(lambda: len(harness.pods("rs")) >= 6 or proc.poll() is not None)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=20)
    harness.api.latency = 0.0
    cut = len(harness.pods("rs"))
    assert 6 <= cut < 30, "the kill came too late to test anything"
    ready = condition(harness, "rs")  # said before the creations started
    assert (ready["status"], ready["reason"]) == ("False", "Creating")
    assert "missing" in ready["message"]

    report = harness.sync("rs")  # a new controller: the same write, completed
    assert len(report.created) == 30 - cut and len(harness.pods("rs")) == 30
    assert harness.sync("rs").created == []
    assert harness.status("rs")["appliedPatchID"] == 2
    # Registrations the kill left between "register" and "create the pod" go after the grace.
    harness.clock.advance(61)
    harness.sync("rs")
    pods = harness.pods("rs")
    ids = {int(p["metadata"]["annotations"]["gitscale.dev/runner-id"]) for p in pods}
    assert set(harness.github.runners) == ids
    secrets = {s["metadata"]["name"] for s in harness.api.objects(
        "secrets", NS, label_selector="gitscale.dev/runnerset=rs")}
    assert secrets == {p["metadata"]["name"] for p in pods}


def test_sigterm_leaves_the_creations_not_started_to_the_next_start(
        harness: Harness, tmp_path: Path) -> None:
    harness.write("bk", 400, 1, spec=buildkite_spec())
    harness.api.latency = 0.01
    proc = controller_process(harness, tmp_path, "--concurrency", "1",
                              "--shutdown-timeout", "0.5")
    try:
        eventually(lambda: len(harness.pods("bk")) >= 5 or proc.poll() is not None)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    harness.api.latency = 0.0
    assert proc.returncode == 0, err
    assert "crashed" not in err and "Traceback" not in err
    assert "left to the next start" in err
    cut = len(harness.pods("bk"))
    assert cut < 400
    ready = condition(harness, "bk")
    assert (ready["status"], ready["reason"]) == ("False", "Interrupted")
    assert ready["message"].startswith(f"{400 - cut} of 400 runner(s) missing")
    report = harness.sync("bk")
    assert len(report.created) == 400 - cut and len(harness.pods("bk")) == 400
    assert condition(harness, "bk")["status"] == "True"


def test_the_secret_comes_before_the_pod_and_then_belongs_to_it(harness: Harness) -> None:
    harness.write("rs", 1, 0)
    harness.api.reset_calls()
    harness.sync("rs")
    (pod,) = harness.names("rs")
    writes = [line.split(" -> ")[0] for line in harness.api.log
              if not line.startswith("GET") and f"/{pod}" in line or line.startswith("POST")]
    assert [w for w in writes if "runnersets" not in w and "/events" not in w] == [
        f"POST /api/v1/namespaces/{NS}/secrets?dryRun=All",  # would they be taken? (nothing
        f"POST /api/v1/namespaces/{NS}/pods?dryRun=All",  # stored, no runner registered yet)
        f"POST /api/v1/namespaces/{NS}/secrets", f"POST /api/v1/namespaces/{NS}/pods",
        f"PATCH /api/v1/namespaces/{NS}/secrets/{pod}"]
    secret = harness.api.get_object("secrets", pod, NS)
    assert secret is not None
    assert secret["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": harness.pod(pod)["metadata"]["uid"]}]


def test_a_refused_pod_leaves_no_secret_and_no_registration(harness: Harness) -> None:
    """Taken as a dry run, then refused (another pod took the last of the quota between)."""
    harness.write("rs", 1, 0)
    harness.api.inject_error("create", "pods", code=403, reason="Forbidden",
                             message="exceeded quota: pods", skip=1)
    report = harness.sync("rs")
    assert report.created == [] and harness.github.count("POST") == 1
    assert harness.api.objects("secrets", NS, label_selector="gitscale.dev/runnerset") == []
    assert harness.github.runners == {}
    ready = condition(harness, "rs")
    assert (ready["status"], ready["reason"]) == ("False", "QuotaExceeded")
    assert "exceeded quota" in ready["message"]


def test_leftover_registrations_are_removed_only_if_they_are_the_sets_and_have_no_pod(
        harness: Harness) -> None:
    harness.write("rs", 1, 0)
    harness.sync("rs")
    (pod,) = harness.names("rs")
    gh = harness.github

    def register(name: str, labels: list[str], **state: bool) -> int:
        with gh.lock:
            runner_id = next(gh.ids)
            gh.runners[runner_id] = FakeRunner(runner_id, name, "orgs/acme", labels, 1, **state)
        return runner_id

    tag = instance(harness.api.get_object("runnersets", "rs", NS)["metadata"]["uid"])  # type: ignore[index]
    other = "ffff" if tag != "ffff" else "eeee"
    leftover = register(f"rs-{tag}-0a1b2c", ["linux"])
    harness.api.create_object("secrets", {"metadata": {"name": f"rs-{tag}-0a1b2c", "labels": {
        "gitscale.dev/runnerset": "rs"}}, "data": {"jitconfig": "eA=="}}, NS)
    kept = [register(f"rs-x64-{tag}-0a1b2c", ["linux"]),  # another set's name
            register(f"rs-{other}-0a1b2c", ["linux"]),  # a same-named set elsewhere
            register("rs-0a1b2c", ["linux"]),  # no instance at all
            register(f"rs-{tag}-9f9f9f", ["gpu"]),  # not the set's labels
            register(f"rs-{tag}-7e7e7e", ["linux"], online=True),  # a runner that is connected
            register("other-1a2b3c", ["linux"])]
    harness.clock.advance(301)  # the next look for leftovers
    first = harness.sync("rs")
    assert first.leftovers == [] and leftover in gh.runners  # suspected, not removed yet
    assert first.requeue_after == pytest.approx(60)
    harness.clock.advance(61)
    second = harness.sync("rs")
    assert second.leftovers == [f"rs-{tag}-0a1b2c"]
    assert leftover not in gh.runners and all(k in gh.runners for k in kept)
    assert gh.by_name(pod) is not None  # the runner with a pod stays
    assert harness.api.get_object("secrets", f"rs-{tag}-0a1b2c", NS) is None


def test_a_same_named_set_of_another_controller_keeps_its_pending_runner(
        harness: Harness) -> None:
    """Two namespace-scoped controllers (or two clusters), each with a RunnerSet `rs`, register
    in the same org. Neither sees the other's pods, so to the other a pending runner looks like
    a crash leftover (offline, idle, the set's name and labels, no pod): the instance in the
    runner's name keeps each sweep to its own set's registrations."""
    harness.write("rs", 1, 0)
    (pending,) = harness.sync("rs").created  # registered, offline: its pod is starting
    kube = Kube(client_for(harness.api.url))
    other = Controller(kube, namespace="team-b", clock=harness.clock, concurrency=2,
                       platforms=Platforms(kube.read_secret, list_max_age=0))
    harness.api.create_object("secrets", {"metadata": {"name": "gh-creds"}, "type": "Opaque",
                                          "data": harness.api.get_object(
                                              "secrets", "gh-creds", NS)["data"]},  # type: ignore[index]
                              "team-b")
    harness.api.create_object("runnersets", {
        "apiVersion": "gitscale.dev/v1alpha1", "kind": "RunnerSet",
        "metadata": {"name": "rs", "namespace": "team-b"},
        "spec": {**github_spec(harness.github.url), "replicas": 0, "patchID": 0}}, "team-b")
    try:
        other.start(workers=False)
        assert other.synced(5)
        wait_for(lambda: other.runnersets.get("team-b/rs"), 5)
        uid = other.runnersets.get("team-b/rs")["metadata"]["uid"]  # type: ignore[index]
        gh = harness.github
        with gh.lock:  # a crash leftover of team-b/rs itself
            own = next(gh.ids)
            gh.runners[own] = FakeRunner(own, f"rs-{instance(uid)}-abcdef", "orgs/acme",
                                         ["linux"], 1)
        assert other.reconcile("team-b/rs").leftovers == []  # suspected
        harness.clock.advance(61)
        report = other.reconcile("team-b/rs")
        assert report.leftovers == [f"rs-{instance(uid)}-abcdef"] and own not in gh.runners
        assert harness.runner(pending) is not None  # default/rs's runner is not team-b's
        harness.clock.advance(400)
        assert other.reconcile("team-b/rs").leftovers == []
        assert harness.runner(pending) is not None
        assert pending.startswith("rs-") and len(pending) == len("rs-0000-000000")
    finally:
        other.stop()
        kube.close()


TIMEOUT: dict[str, Any] = {"code": 504, "reason": "Timeout", "message": "Timeout: request did not complete "
           "within requested timeout - context deadline exceeded"}


def test_a_pod_stored_though_its_answer_was_lost_keeps_its_registration(
        harness: Harness) -> None:
    """A 504 (or no answer) does not say the pod was not stored: the controller looks for it
    before it unregisters the runner and deletes its Secret."""
    harness.write("rs", 1, 0)
    harness.api.inject_error("create", "pods", skip=1, applied=True, **TIMEOUT)
    report = harness.sync("rs")
    (pod,) = report.created
    assert report.errors == [] and harness.names("rs") == [pod]
    assert harness.runner(pod) is not None  # its registration kept
    secret = harness.api.get_object("secrets", pod, NS)
    assert secret is not None and secret["metadata"]["ownerReferences"][0]["kind"] == "Pod"


def test_a_pod_not_stored_after_a_lost_answer_is_undone(harness: Harness) -> None:
    harness.write("rs", 1, 0)
    harness.api.inject_error("create", "pods", skip=1, **TIMEOUT)
    report = harness.sync("rs")
    assert report.created == [] and harness.names("rs") == []
    assert harness.github.runners == {}
    assert harness.api.objects("secrets", NS, label_selector="gitscale.dev/runnerset") == []


def test_when_nobody_can_say_whether_the_pod_exists_the_sweep_decides(harness: Harness) -> None:
    """The creation timed out and so did the look for the pod: nothing is undone on a guess
    (the pod may run); with no pod the registration and its Secret are swept later."""
    harness.write("rs", 1, 0)
    harness.api.inject_error("create", "pods", skip=1, **TIMEOUT)
    harness.api.inject_error("list", "pods", **TIMEOUT)
    report = harness.sync("rs")
    assert report.created == [] and len(harness.github.runners) == 1
    (left,) = [r.name for r in harness.github.runners.values()]
    assert harness.api.get_object("secrets", left, NS) is not None
    harness.clock.advance(10)
    (made,) = harness.sync("rs").created  # the slot is filled by another runner
    harness.clock.advance(301)
    harness.sync("rs")
    harness.clock.advance(61)
    assert harness.sync("rs").leftovers == [left]
    assert harness.api.get_object("secrets", left, NS) is None
    assert [r.name for r in harness.github.runners.values()] == [made]


@pytest.mark.parametrize("lookup", ["answered", "failed"])
def test_a_pod_stored_though_its_answer_was_lost_is_not_made_again(
        harness: Harness, lookup: str) -> None:
    """A Buildkite pod's creation answered 504 (or not at all: the API server restarting) was
    stored all the same, and the pod watch is down, so the cache cannot say. The pod is looked
    for at once, or, when that fails too, by the next pass before it counts its runners: its
    slot is not filled a second time, beyond replicas (it was: 3 pods for replicas 2)."""
    harness.write("bk", 2, 1, spec=buildkite_spec())
    harness.catch_up()
    watches = harness.api.call_count("watch", "pods")
    held = harness.api.hang("watch", "pods")  # the pod watch, down until the end
    harness.api.drop_watches()
    eventually(lambda: harness.api.call_count("watch", "pods") > watches, 5)
    harness.api.inject_error("create", "pods", applied=True, **TIMEOUT)
    if lookup == "failed":
        harness.api.inject_error("list", "pods", **TIMEOUT)  # the look for it
    first = harness.controller.reconcile(f"{NS}/bk")
    assert len(harness.pods("bk")) == 2
    if lookup == "answered":
        assert len(first.created) == 2 and first.errors == []
    else:
        assert len(first.created) == 1 and "504 Timeout" in first.errors[0]
    harness.clock.advance(10)
    second = harness.controller.reconcile(f"{NS}/bk")
    held.set()
    assert second.created == [] and len(harness.pods("bk")) == 2, second.errors
    assert second.errors == []


def test_a_secret_not_handed_to_its_pod_is_handed_over_or_deleted_later(
        harness: Harness) -> None:
    """The handover of the JIT Secret from the set to the pod failed: still the set's, it
    would outlive its pod. The next pass hands it over, or deletes it once the pod is gone."""
    harness.write("rs", 2, 1)
    harness.api.inject_error("patch", "secrets", times=2)
    first, second = harness.sync("rs").created
    for name in (first, second):
        owner = harness.api.get_object("secrets", name, NS)["metadata"]["ownerReferences"]  # type: ignore[index]
        assert owner[0]["kind"] == "RunnerSet"
    kubernetes.client.CoreV1Api(harness.controller.kube.api).delete_namespaced_pod(
        first, NS, _preload_content=False)  # gone before the next pass (evicted, by hand)
    harness.sync("rs")
    assert harness.api.get_object("secrets", first, NS) is None
    owner = harness.api.get_object("secrets", second, NS)["metadata"]["ownerReferences"]  # type: ignore[index]
    assert owner == [{"apiVersion": "v1", "kind": "Pod", "name": second,
                      "uid": harness.pod(second)["metadata"]["uid"]}]


def test_a_set_being_deleted_takes_its_leftover_registrations_with_it(
        harness: Harness) -> None:
    """A registration a crash left without a pod is swept on every pass of a set being
    deleted, with no grace: none is left behind when the finalizer goes."""
    harness.write("rs", 1, 0)
    (pod,) = harness.sync("rs").created
    uid = harness.api.get_object("runnersets", "rs", NS)["metadata"]["uid"]  # type: ignore[index]
    gh = harness.github
    with gh.lock:
        leftover = next(gh.ids)
        gh.runners[leftover] = FakeRunner(leftover, f"rs-{instance(uid)}-abcdef", "orgs/acme",
                                          ["linux"], 1)
    kubernetes.client.CustomObjectsApi(harness.controller.kube.api).delete_namespaced_custom_object(
        "gitscale.dev", "v1alpha1", NS, "runnersets", "rs")
    report = harness.sync("rs")
    assert report.deleted == [pod] and report.leftovers == [f"rs-{instance(uid)}-abcdef"]
    assert gh.runners == {} and harness.api.get_object("runnersets", "rs", NS) is None
