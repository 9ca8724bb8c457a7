"""The scenarios against a real cluster: opt-in, only with ``-m cluster`` and $KUBECONFIG set.

The controller runs in this process (informers, workers) against the cluster's API server. The
RunnerSets are Buildkite-shaped and their "agent" is busybox, so no CI credentials are needed:
the kubelet plays the runner (``sleep`` = a runner waiting or working, ``exit 0`` = a runner that
did its job, ``exit 1`` = one that failed). How to run it on kind: deploy/controller/README.md.
"""
from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import Any, Callable, Iterator, cast

import pytest
import yaml

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(not os.environ.get("KUBECONFIG"), reason="needs KUBECONFIG (a cluster)"),
]

CRD = Path(__file__).resolve().parents[2] / "deploy" / "crds" / "runnersets.gitscale.dev.yaml"
TIMEOUT = 120.0


class Cluster:
    def __init__(self) -> None:
        import kubernetes.client
        from kubernetes.client.exceptions import ApiException

        from gitscale.controller.kube import Kube
        from gitscale.controller.kube_config import load
        from gitscale.controller.loop import Controller

        self.ApiException = ApiException
        self.api = load(os.environ["KUBECONFIG"])
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.custom = kubernetes.client.CustomObjectsApi(self.api)
        self.ns = f"gitscale-test-{secrets.token_hex(3)}"
        self._install_crd(kubernetes.client.ApiextensionsV1Api(self.api))
        self.core.create_namespace(cast(Any, {"metadata": {"name": self.ns}}))
        self.kube = Kube(load(os.environ["KUBECONFIG"]))
        self.controller = Controller(self.kube, namespace=self.ns, concurrency=8, resync=5.0)

    def _install_crd(self, ext: Any) -> None:
        body = yaml.safe_load(CRD.read_text())
        try:
            ext.create_custom_resource_definition(body)
        except self.ApiException as exc:
            if exc.status != 409:
                raise
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # wait until the API serves it
            try:
                self.custom.list_namespaced_custom_object("gitscale.dev", "v1alpha1", "default",
                                                          "runnersets")
                return
            except self.ApiException:
                time.sleep(0.5)

    def close(self) -> None:
        self.controller.stop()
        self.kube.close()
        self.core.delete_namespace(self.ns)
        self.api.close()

    def write(self, name: str, replicas: int, patch: int, command: str = "sleep 3600") -> None:
        from gitscale.timeutil import format_time, utcnow

        owned = {"replicas": replicas, "patchID": patch, "effectiveTime": format_time(utcnow())}
        try:
            self.custom.patch_namespaced_custom_object("gitscale.dev", "v1alpha1", self.ns,
                                                       "runnersets", name, {"spec": owned})
        except self.ApiException as exc:
            if exc.status != 404:
                raise
            self.custom.create_namespaced_custom_object(
                "gitscale.dev", "v1alpha1", self.ns, "runnersets",
                {"apiVersion": "gitscale.dev/v1alpha1", "kind": "RunnerSet",
                 "metadata": {"name": name}, "spec": {
                     **owned, "platform": "buildkite", "buildkite": {"queue": "test"},
                     "template": {"spec": {"terminationGracePeriodSeconds": 1, "containers": [
                         {"name": "agent", "image": "busybox:1.36",
                          "command": ["sh", "-c", command]}]}}}})

    def create(self, name: str, replicas: int, pod_spec: dict[str, Any]) -> None:
        from gitscale.timeutil import format_time, utcnow

        self.custom.create_namespaced_custom_object(
            "gitscale.dev", "v1alpha1", self.ns, "runnersets",
            {"apiVersion": "gitscale.dev/v1alpha1", "kind": "RunnerSet",
             "metadata": {"name": name}, "spec": {
                 "replicas": replicas, "patchID": 0, "effectiveTime": format_time(utcnow()),
                 "platform": "buildkite", "buildkite": {"queue": "test"},
                 "template": {"spec": pod_spec}}})

    def pods(self, name: str, phase: str | None = None) -> list[dict[str, Any]]:
        raw = self.core.list_namespaced_pod(self.ns, label_selector=f"gitscale.dev/runnerset={name}")
        pods = [self.api.sanitize_for_serialization(p) for p in raw.items]
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")
                and (phase is None or p.get("status", {}).get("phase") == phase)]

    def status(self, name: str) -> dict[str, Any]:
        obj: Any = self.custom.get_namespaced_custom_object("gitscale.dev", "v1alpha1", self.ns,
                                                            "runnersets", name)
        return dict(obj.get("status") or {})


def eventually(check: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.5)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    try:
        c.controller.start()
        yield c
    finally:
        c.close()


def test_from_nothing_5_0(cluster: Cluster) -> None:
    cluster.write("five", 5, 0)
    eventually(lambda: len(cluster.pods("five")) == 5)
    eventually(lambda: cluster.status("five").get("replicas") == 5)
    assert cluster.status("five")["observedPatchID"] == 0
    assert len([r for r in cluster.controller.reports if r.created][0].created) == 5


def test_1_0_then_2_1(cluster: Cluster) -> None:
    cluster.write("grow", 1, 0)
    eventually(lambda: len(cluster.pods("grow")) == 1)
    cluster.write("grow", 2, 1)
    eventually(lambda: sorted(p["metadata"]["labels"]["gitscale.dev/patch-id"]
                              for p in cluster.pods("grow")) == ["0", "1"])


def test_scale_down_keeps_the_busy_runner(cluster: Cluster) -> None:
    cluster.write("down", 3, 0)
    running = eventually(lambda: len(cluster.pods("down", "Running")) == 3
                         and cluster.pods("down", "Running"))
    busy = running[0]["metadata"]["name"]
    cluster.core.patch_namespaced_pod(busy, cluster.ns, {"metadata": {"annotations": {
        "gitscale.dev/busy": "true"}}})
    time.sleep(2)  # let the watch deliver the annotation
    cluster.write("down", 0, 0)
    eventually(lambda: [p["metadata"]["name"] for p in cluster.pods("down")] == [busy])
    eventually(lambda: cluster.status("down").get("busy") == 1)


def test_finished_runners_are_not_refilled_until_reaffirmed(cluster: Cluster) -> None:
    cluster.write("once", 2, 0, command="sleep 5; exit 0")
    eventually(lambda: len(cluster.pods("once", "Succeeded")) == 2)
    time.sleep(8)  # passes run (resync 5 s): finished after effectiveTime, slots held
    assert len(cluster.pods("once")) == 2 and not cluster.pods("once", "Pending")
    cluster.write("once", 2, 0, command="sleep 5; exit 0")  # re-affirmed
    eventually(lambda: len(cluster.pods("once", "Pending") + cluster.pods("once", "Running"))
               == 2)


def test_failed_runners_are_replaced_with_backoff(cluster: Cluster) -> None:
    cluster.write("flaky", 1, 1, command="exit 1")
    eventually(lambda: any(p["metadata"]["annotations"].get("gitscale.dev/failures") == "2"
                           for p in cluster.pods("flaky")), timeout=180)
    assert len(cluster.pods("flaky")) == 1


def test_the_crd_refuses_a_negative_replica_count(cluster: Cluster) -> None:
    cluster.write("bad", 0, 0)
    with pytest.raises(cluster.ApiException) as err:
        cluster.custom.patch_namespaced_custom_object("gitscale.dev", "v1alpha1", cluster.ns,
                                                      "runnersets", "bad",
                                                      {"spec": {"replicas": -1}})
    assert err.value.status == 422


def test_unschedulable_runners_turn_ready_false_and_are_not_replaced(cluster: Cluster) -> None:
    from gitscale.controller import status as st

    cluster.create("nowhere", 2, {"terminationGracePeriodSeconds": 1,
                                  "nodeSelector": {"gitscale.dev/no-such-node": "true"},
                                  "containers": [{"name": "agent", "image": "busybox:1.36",
                                                  "command": ["sleep", "3600"]}]})
    pods = eventually(lambda: len(cluster.pods("nowhere")) == 2 and sorted(
        p["metadata"]["name"] for p in cluster.pods("nowhere")))

    def unschedulable() -> dict[str, Any] | None:
        ready = st.ready_of(cluster.status("nowhere"))
        return dict(ready) if ready.get("reason") == st.UNSCHEDULABLE else None

    ready = eventually(unschedulable, timeout=TIMEOUT + st.UNSCHEDULABLE_GRACE.total_seconds())
    assert ready["status"] == "False"
    assert ready["message"].startswith("2 of 2 runner(s) cannot be scheduled: 0/")
    assert "node affinity/selector" in ready["message"]
    events = cluster.core.list_namespaced_event(
        cluster.ns, field_selector="involvedObject.name=nowhere").items
    assert any(e.type == "Warning" and e.reason == st.UNSCHEDULABLE for e in events)
    assert sorted(p["metadata"]["name"] for p in cluster.pods("nowhere")) == pods
