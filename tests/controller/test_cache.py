"""The informer's store across a relist (after a 410 or an error): it must not forget the
controller's own recent writes, nor the sets whose pods went while no watch was open, and a
pass must never see it half relisted. What the stores keep of an object."""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timezone

from gitscale.controller.cache import (
    Informer,
    Store,
    runner_pod_fields,
    set_of_pod,
    without_managed_fields,
)
from gitscale.controller.observe import LABEL_SET, RawObject, runner_of
from tests.controller.harness import NS, Harness, buildkite_spec


def pod(name: str, version: int, uid: str = "") -> RawObject:
    return {"kind": "Pod", "metadata": {"namespace": "default", "name": name,
                                        "uid": uid or f"uid-{name}",
                                        "resourceVersion": str(version),
                                        "labels": {LABEL_SET: "rs"}}}


def relist(store: Store, listed: list[RawObject], version: str) -> list[RawObject]:
    """Run an informer whose list answers ``listed`` at ``version``; return what it reported."""
    stop = threading.Event()
    changed: list[RawObject] = []

    def watch(_version: str, _timeout: int) -> Iterator[tuple[str, RawObject]]:
        stop.wait()
        return iter(())

    informer = Informer("pods", store, lambda: (listed, version), watch, changed.append, stop)
    informer.start()
    try:
        assert informer.synced.wait(5)
    finally:
        stop.set()
        informer.thread.join(5)
    return changed


def test_relist_keeps_objects_written_after_the_list_snapshot() -> None:
    # A pass created pod "new" (version 12) while the list (snapshot at version 10) was in
    # flight. The watch resumes from 10 and will deliver it; until then a pass that cannot see
    # it would create its slot a second time.
    store = Store(index=set_of_pod)
    store.put(pod("old", 3))
    store.put(pod("new", 12))
    relist(store, [pod("old", 3)], "10")
    assert sorted(p["metadata"]["name"] for p in store.group("default/rs")) == ["new", "old"]


def test_relist_forgets_objects_older_than_the_snapshot() -> None:
    store = Store(index=set_of_pod)
    store.put(pod("gone", 3))
    relist(store, [], "10")
    assert store.group("default/rs") == []


def test_relist_reports_a_pod_that_went_with_its_labels() -> None:
    # The pod was deleted while no watch was open: its set must be queued (by its label).
    store = Store(index=set_of_pod)
    store.put(pod("gone", 3))
    changed = relist(store, [], "10")
    assert [set_of_pod(obj) for obj in changed] == ["default/rs"]


class SpyLock:
    """A lock that runs ``between`` each time it is released: another thread's turn, taken at
    every point where the store lets go of its lock."""

    def __init__(self, between: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        self._between = between
        self._inside = False

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()
        if not self._inside:
            self._inside = True
            try:
                self._between()
            finally:
                self._inside = False


def test_a_relist_is_never_seen_half_done() -> None:
    # A pass reading the set's pods between the steps of a relist would see some of its 50
    # runners missing and create them again (on a patch-0 set: one per missing pod).
    store = Store(index=set_of_pod)
    runners = [pod(f"r{i}", 5) for i in range(50)]
    for runner in runners:
        store.put(runner)
    seen: list[int] = []
    store._lock = SpyLock(lambda: seen.append(len(store.group("default/rs"))))  # type: ignore[assignment]
    store.replace([pod(f"r{i}", 5) for i in range(50)], "10")
    assert seen and set(seen) == {50}


def test_the_stores_keep_only_what_the_controller_reads() -> None:
    now = datetime(2026, 11, 23, 9, 0, tzinfo=timezone.utc)
    full: RawObject = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "rs-1a2b3c", "namespace": "default", "uid": "u1", "resourceVersion": "7",
            "creationTimestamp": "2026-11-23T08:00:00Z",
            "labels": {LABEL_SET: "rs", "gitscale.dev/patch-id": "3"},
            "annotations": {"gitscale.dev/runner-id": "42", "gitscale.dev/failures": "1",
                            "kubectl.kubernetes.io/last-applied-configuration": "{...}"},
            "ownerReferences": [{"kind": "RunnerSet", "name": "rs", "uid": "s1"}],
            "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]},
        "spec": {"containers": [{"name": "runner", "image": "r:1", "env": [{"name": "A"}]},
                                {"name": "dind", "image": "docker:dind"}],
                 "volumes": [{"name": "work", "emptyDir": {}}], "nodeName": "n1"},
        "status": {"phase": "Running", "podIP": "10.0.0.1", "qosClass": "BestEffort",
                   "conditions": [{"type": "Ready", "status": "True",
                                   "lastTransitionTime": "2026-11-23T08:01:00Z",
                                   "lastProbeTime": None}],
                   "containerStatuses": [
                       {"name": "runner", "ready": False, "image": "r:1", "imageID": "sha",
                        "state": {"terminated": {"exitCode": 0,
                                                 "finishedAt": "2026-11-23T08:30:00Z"}}},
                       {"name": "dind", "ready": True, "state": {"running": {}}}]}}
    kept = runner_pod_fields(full)
    assert "managedFields" not in kept["metadata"]
    assert kept["metadata"]["annotations"] == {"gitscale.dev/runner-id": "42",
                                               "gitscale.dev/failures": "1"}
    assert kept["spec"] == {"containers": [{"name": "runner"}, {"name": "dind"}]}
    assert set(kept["status"]) == {"phase", "conditions", "containerStatuses"}
    assert runner_of(kept, None, None, now) == runner_of(full, None, None, now)
    assert full["metadata"]["managedFields"]  # the object given is left as it was
    store = Store(index=set_of_pod, keep=runner_pod_fields)
    store.put(full)
    assert store.get("default/rs-1a2b3c") == kept
    runnerset: RawObject = {"metadata": {"name": "rs", "namespace": "default",
                                         "managedFields": [{"manager": "argocd"}]},
                            "spec": {"replicas": 1}}
    assert without_managed_fields(runnerset) == {"metadata": {"name": "rs",
                                                              "namespace": "default"},
                                                 "spec": {"replicas": 1}}


def test_a_pod_the_scheduler_could_not_place_keeps_its_message() -> None:
    """Ready quotes the scheduler's message: kept for PodScheduled=False, and only there."""
    now = datetime(2026, 11, 23, 9, 0, tzinfo=timezone.utc)
    conds = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
              "message": "0/3 nodes are available: 3 Insufficient cpu.",
              "lastProbeTime": None, "lastTransitionTime": "2026-11-23T08:50:00Z"},
             {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady",
              "message": "containers with unready status: [runner]",
              "lastTransitionTime": "2026-11-23T08:50:00Z"}]
    full: RawObject = {"metadata": {"name": "rs-1", "namespace": "default",
                                    "creationTimestamp": "2026-11-23T08:50:00Z"},
                       "spec": {"containers": [{"name": "runner", "image": "r:1"}]},
                       "status": {"phase": "Pending", "conditions": conds}}
    kept = runner_pod_fields(full)
    assert kept["status"]["conditions"] == [
        {k: v for k, v in conds[0].items() if k != "lastProbeTime"},
        {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady",
         "lastTransitionTime": "2026-11-23T08:50:00Z"}]
    runner = runner_of(kept, None, None, now)
    assert runner == runner_of(full, None, None, now) and runner.unschedulable is not None


def test_relists_during_passes_create_no_extra_runner(harness: Harness) -> None:
    harness.write("rs", 50, 0, spec=buildkite_spec())
    assert len(harness.sync("rs").created) == 50
    controller, stop = harness.controller, threading.Event()
    listed, version = controller.kube.list_pods(NS, controller.pods.keep)

    def relist() -> None:  # what an informer does after a 410 or an error, over and over
        while not stop.is_set():
            controller.pods.replace(listed, version)

    relisting = threading.Thread(target=relist)
    relisting.start()
    try:
        created = [name for _ in range(40) for name in controller.reconcile(f"{NS}/rs").created]
    finally:
        stop.set()
        relisting.join(5)
    assert created == [] and len(harness.pods("rs")) == 50
