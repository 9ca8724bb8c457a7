"""The fake API server, driven by the real ``kubernetes`` client over HTTP."""
from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config
import kubernetes.dynamic
import kubernetes.informer
import kubernetes.watch
import pytest
import urllib3
from kubernetes.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from tests.kubeapi.errors import webhook_denied
from tests.kubeapi.server import KubeAPIServer, api_client, start_api_server

GROUP, VERSION, PLURAL = "gitscale.dev", "v1alpha1", "runnersets"
NS = "default"


def pod(name: str, labels: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}, **meta},
            "spec": {"containers": [{"name": "runner", "image": "runner:1"}]}}


def runnerset(name: str, replicas: int = 1, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RunnerSet",
            "metadata": {"name": name, **meta}, "spec": {"replicas": replicas, "patchID": 0}}


# The typed client declares most model fields Optional and bodies as models; these tests
# pass plain dicts and read fields they just wrote, so the API objects are typed Any here.
@pytest.fixture
def core(kube_client: ApiClient) -> Any:
    return CoreV1Api(kube_client)


@pytest.fixture
def custom(kube_client: ApiClient) -> Any:
    return CustomObjectsApi(kube_client)


def status_of(exc: ApiException) -> dict[str, Any]:
    return json.loads(exc.body or "null")  # type: ignore[no-any-return]


def collect(stream: Any, count: int) -> list[tuple[str, str]]:
    """The first ``count`` (type, name) pairs of a watch stream."""
    seen = []
    for event in stream:
        obj = event["raw_object"]
        seen.append((event["type"], obj["metadata"].get("name", "")))
        if len(seen) == count:
            break
    return seen


# -- CRUD ------------------------------------------------------------------------------------
def test_create_get_list_delete_pods(core: Any, kube_api: KubeAPIServer) -> None:
    first = kube_api.resource_version
    created = core.create_namespaced_pod(NS, pod("a"))
    assert created.metadata.uid and created.metadata.creation_timestamp
    assert created.metadata.resource_version == str(first + 1)
    assert created.status.phase == "Pending"
    core.create_namespaced_pod("other", pod("b"))

    assert core.read_namespaced_pod("a", NS).metadata.uid == created.metadata.uid
    listed = core.list_namespaced_pod(NS)
    assert [p.metadata.name for p in listed.items] == ["a"]
    assert listed.metadata.resource_version == str(first + 2)
    everywhere = core.list_pod_for_all_namespaces()
    assert [(p.metadata.namespace, p.metadata.name) for p in everywhere.items] == [
        ("default", "a"), ("other", "b")]

    deleted = core.delete_namespaced_pod("a", NS)
    assert deleted.metadata.name == "a"
    with pytest.raises(ApiException) as info:
        core.read_namespaced_pod("a", NS)
    assert info.value.status == 404
    assert status_of(info.value) | {"message": ""} == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "", "reason": "NotFound", "code": 404,
        "details": {"name": "a", "kind": "pods"}}
    assert kube_api.objects("pods") == [kube_api.get_object("pods", "b", "other")]


def test_create_existing_name_is_409_already_exists(core: Any) -> None:
    core.create_namespaced_pod(NS, pod("a"))
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod(NS, pod("a"))
    assert (info.value.status, status_of(info.value)["reason"]) == (409, "AlreadyExists")


@pytest.mark.parametrize("body, code", [
    pytest.param({"metadata": {}}, 422, id="no-name"),
    pytest.param({"metadata": {"name": "Upper_Case"}}, 422, id="not-a-dns-name"),
    pytest.param({"metadata": {"name": "a", "labels": {"x": "has space"}}}, 422, id="bad-label"),
    pytest.param({"metadata": {"name": "a", "labels": {"x": 5}}}, 400, id="label-not-string"),
    pytest.param({"metadata": {"name": "a", "namespace": "elsewhere"}}, 400, id="wrong-ns"),
    pytest.param({"kind": "Secret", "metadata": {"name": "a"}}, 400, id="wrong-kind"),
    pytest.param({"metadata": {"name": "a", "resourceVersion": "3"}}, 500, id="has-version"),
])
def test_create_validation(custom: Any, body: dict[str, Any], code: int) -> None:
    with pytest.raises(ApiException) as info:
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
    assert info.value.status == code


def test_generate_name(core: Any) -> None:
    names = {core.create_namespaced_pod(NS, {"metadata": {"generateName": "runner-"}}).metadata.name
             for _ in range(5)}
    assert len(names) == 5
    assert all(n.startswith("runner-") and len(n) == len("runner-") + 5 for n in names)


def test_stale_update_is_409_conflict(core: Any) -> None:
    first = core.create_namespaced_pod(NS, pod("a"))
    first.metadata.labels = {"step": "one"}
    updated = core.replace_namespaced_pod("a", NS, first)
    assert int(updated.metadata.resource_version) > int(first.metadata.resource_version)

    first.metadata.labels = {"step": "stale"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as info:
        core.replace_namespaced_pod("a", NS, first)
    assert (info.value.status, status_of(info.value)["reason"]) == (409, "Conflict")
    with pytest.raises(ApiException) as info:
        core.patch_namespaced_pod("a", NS, {"metadata": {
            "resourceVersion": first.metadata.resource_version, "labels": {"x": "y"}}})
    assert info.value.status == 409
    assert core.read_namespaced_pod("a", NS).metadata.labels == {"step": "one"}


def test_noop_update_keeps_resource_version(core: Any, kube_api: KubeAPIServer) -> None:
    created = core.create_namespaced_pod(NS, pod("a", {"x": "1"}))
    again = core.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"x": "1"}}})
    assert again.metadata.resource_version == created.metadata.resource_version
    assert str(kube_api.resource_version) == created.metadata.resource_version


def test_custom_resource_update_needs_resource_version(custom: Any) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, runnerset("rs"))
    with pytest.raises(ApiException) as info:
        custom.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "rs", runnerset("rs"))
    assert info.value.status == 422


def test_pod_spec_is_immutable_except_images(core: Any) -> None:
    core.create_namespaced_pod(NS, pod("a"))
    with pytest.raises(ApiException) as info:
        core.patch_namespaced_pod("a", NS, {"spec": {"nodeName": "n1"}})
    assert info.value.status == 422
    core.patch_namespaced_pod("a", NS, [{"op": "replace", "path": "/spec/containers/0/image",
                                         "value": "runner:2"}])
    assert core.read_namespaced_pod("a", NS).spec.containers[0].image == "runner:2"


# -- patches ---------------------------------------------------------------------------------
def test_patch_types(core: Any, custom: Any) -> None:
    core.create_namespaced_pod(NS, pod("a", {"keep": "1", "drop": "1"}))
    merged = core.patch_namespaced_pod("a", NS,
                                       {"metadata": {"labels": {"drop": None, "new": "1"}}})
    assert merged.metadata.labels == {"keep": "1", "new": "1"}
    patched = core.patch_namespaced_pod("a", NS, {"metadata": {"annotations": {"a": "b"}}},
                                        _content_type="application/merge-patch+json")
    assert patched.metadata.annotations == {"a": "b"}

    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, runnerset("rs", 1))
    obj = custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "rs",
                                                {"spec": {"replicas": 3}})
    assert obj["spec"] == {"replicas": 3, "patchID": 0}
    obj = custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "rs", [{"op": "replace", "path": "/spec/patchID", "value": 7}],
        _content_type="application/json-patch+json")
    assert obj["spec"]["patchID"] == 7

    with pytest.raises(ApiException) as info:  # as a real server: no SMP for custom resources
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, "rs", {"spec": {"replicas": 1}},
            _content_type="application/strategic-merge-patch+json")
    assert info.value.status == 415
    with pytest.raises(ApiException) as info:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, "rs",
            [{"op": "test", "path": "/spec/replicas", "value": 9}],
            _content_type="application/json-patch+json")
    assert info.value.status == 422


def test_secret_string_data_is_stored_as_data(core: Any) -> None:
    core.create_namespaced_secret(NS, {"metadata": {"name": "s"}, "stringData": {"token": "abc"}})
    secret = core.read_namespaced_secret("s", NS)
    assert secret.data == {"token": "YWJj"} and secret.string_data is None


# -- selectors -------------------------------------------------------------------------------
LABELLED = {"p1": {"app": "runner", "tier": "gpu"}, "p2": {"app": "runner", "tier": "cpu"},
            "p3": {"app": "web"}, "p4": {}}


@pytest.mark.parametrize("selector, expected", [
    pytest.param("app=runner", ["p1", "p2"], id="equals"),
    pytest.param("app==runner", ["p1", "p2"], id="double-equals"),
    pytest.param("app!=runner", ["p3", "p4"], id="not-equals-includes-missing"),
    pytest.param("tier in (gpu, tpu)", ["p1"], id="in"),
    pytest.param("tier notin (gpu)", ["p2", "p3", "p4"], id="notin-includes-missing"),
    pytest.param("tier", ["p1", "p2"], id="exists"),
    pytest.param("!tier", ["p3", "p4"], id="not-exists"),
    pytest.param("app=runner,tier in (cpu,gpu),!gone", ["p1", "p2"], id="combined"),
    pytest.param("app in (runner,web),tier!=gpu", ["p2", "p3"], id="set-then-equality"),
    pytest.param("", ["p1", "p2", "p3", "p4"], id="empty"),
])
def test_label_selectors(core: Any, selector: str, expected: list[str]) -> None:
    for name, labels in LABELLED.items():
        core.create_namespaced_pod(NS, pod(name, labels))
    listed = core.list_namespaced_pod(NS, label_selector=selector)
    assert [p.metadata.name for p in listed.items] == expected


def test_field_selectors(core: Any, kube_api: KubeAPIServer) -> None:
    for name in ("a", "b", "c"):
        core.create_namespaced_pod(NS, pod(name))
    kube_api.set_pod_phase(NS, "b", "Running")
    def names(selector: str) -> list[str]:
        return [p.metadata.name for p in
                core.list_namespaced_pod(NS, field_selector=selector).items]
    assert names("status.phase=Running") == ["b"]
    assert names("status.phase!=Running,metadata.name!=a") == ["c"]
    assert names("metadata.namespace=default,metadata.name=a") == ["a"]
    with pytest.raises(ApiException) as info:
        names("spec.bogus=1")
    assert info.value.status == 400
    with pytest.raises(ApiException) as info:
        core.list_namespaced_pod(NS, label_selector="a in (b")
    assert info.value.status == 400


def test_limit_and_continue_page_through_a_list(core: Any) -> None:
    for i in range(5):
        core.create_namespaced_pod(NS, pod(f"p{i}"))
    first = core.list_namespaced_pod(NS, limit=2)
    assert [p.metadata.name for p in first.items] == ["p0", "p1"]
    assert first.metadata.remaining_item_count == 3
    rest = core.list_namespaced_pod(NS, limit=10, _continue=first.metadata._continue)
    assert [p.metadata.name for p in rest.items] == ["p2", "p3", "p4"]


def test_pages_carry_the_first_pages_version_and_expire_with_compaction(
        core: Any, kube_api: KubeAPIServer) -> None:
    for i in range(6):
        core.create_namespaced_pod(NS, pod(f"p{i}"))
    first = core.list_namespaced_pod(NS, limit=2)
    core.create_namespaced_pod(NS, pod("later"))
    second = core.list_namespaced_pod(NS, limit=2, _continue=first.metadata._continue)
    assert second.metadata.resource_version == first.metadata.resource_version
    kube_api.compact()
    with pytest.raises(ApiException) as info:
        core.list_namespaced_pod(NS, limit=2, _continue=second.metadata._continue)
    assert info.value.status == 410 and json.loads(info.value.body)["reason"] == "Expired"


# -- watch -----------------------------------------------------------------------------------
def test_watch_replays_in_order_and_resumes(core: Any, kube_api: KubeAPIServer) -> None:
    start = core.list_namespaced_pod(NS).metadata.resource_version  # never "0" (= "any")
    assert start == str(kube_api.resource_version) != "0"
    core.create_namespaced_pod(NS, pod("a"))
    core.create_namespaced_pod("other", pod("elsewhere"))
    kube_api.set_pod_phase(NS, "a", "Running")
    core.delete_namespaced_pod("a", NS)
    w = kubernetes.watch.Watch()
    events = list(w.stream(core.list_namespaced_pod, NS, resource_version=start,
                           timeout_seconds=1))
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    assert events[1]["object"].status.phase == "Running"
    versions = [int(e["object"].metadata.resource_version) for e in events]
    assert versions == sorted(versions) and len(set(versions)) == 3

    after_added = str(versions[0])
    resumed = list(kubernetes.watch.Watch().stream(
        core.list_namespaced_pod, NS, resource_version=after_added, timeout_seconds=1))
    assert [e["type"] for e in resumed] == ["MODIFIED", "DELETED"]


def test_live_watch_sees_changes_as_they_happen(core: Any) -> None:
    w = kubernetes.watch.Watch()
    rv = core.list_namespaced_pod(NS).metadata.resource_version
    stream = w.stream(core.list_namespaced_pod, NS, resource_version=rv, label_selector="app=r",
                      timeout_seconds=10)  # bounded: a missing event fails, never hangs

    def writes() -> None:
        time.sleep(0.2)
        core.create_namespaced_pod(NS, pod("a", {"app": "r"}))
        core.create_namespaced_pod(NS, pod("ignored", {"app": "other"}))
        core.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"app": "gone"}}})  # leaves
        core.patch_namespaced_pod("ignored", NS, {"metadata": {"labels": {"app": "r"}}})  # joins

    writer = threading.Thread(target=writes)
    writer.start()
    seen = collect(stream, 3)
    w.stop()
    writer.join()
    assert seen == [("ADDED", "a"), ("DELETED", "a"), ("ADDED", "ignored")]


def test_watch_without_version_starts_with_current_state(core: Any) -> None:
    core.create_namespaced_pod(NS, pod("a"))
    w = kubernetes.watch.Watch()
    assert collect(w.stream(core.list_namespaced_pod, NS, timeout_seconds=2), 1) == [
        ("ADDED", "a")]
    w.stop()


def test_too_old_resource_version_is_410(core: Any, kube_api: KubeAPIServer) -> None:
    before = str(kube_api.resource_version)
    core.create_namespaced_pod(NS, pod("a"))
    core.create_namespaced_pod(NS, pod("b"))
    kube_api.compact()  # history now starts after "b": resuming from "a" would miss it
    core.create_namespaced_pod(NS, pod("c"))
    with pytest.raises(ApiException) as info:
        list(kubernetes.watch.Watch().stream(core.list_namespaced_pod, NS, resource_version=before,
                                             timeout_seconds=1))
    assert info.value.status == 410
    # the history window: a server that keeps 2 events has forgotten the first of 3
    small = start_api_server(history_size=2)
    try:
        api: Any = CoreV1Api(api_client(small.url))
        x = api.create_namespaced_pod(NS, pod("x")).metadata.resource_version
        for name in ("y", "z"):
            api.create_namespaced_pod(NS, pod(name))
        ok = list(kubernetes.watch.Watch().stream(api.list_namespaced_pod, NS,
                                                  resource_version=x, timeout_seconds=1))
        assert [e["object"].metadata.name for e in ok] == ["y", "z"]
        with pytest.raises(ApiException) as info:  # errors before the stream are plain 4xx
            list(kubernetes.watch.Watch().stream(api.list_namespaced_pod, NS,
                                                 timeout_seconds=1, field_selector="x=1"))
        assert info.value.status == 400
    finally:
        small.stop()


def test_bookmarks(kube_api: KubeAPIServer, core: Any) -> None:
    kube_api.bookmark_interval = 0.1
    rv = core.create_namespaced_pod(NS, pod("a")).metadata.resource_version
    w = kubernetes.watch.Watch()
    kinds = [e["type"] for e in w.stream(core.list_namespaced_pod, NS, resource_version=rv,
                                         allow_watch_bookmarks=True, timeout_seconds=1)]
    assert "BOOKMARK" in kinds and w.resource_version == rv


def test_cluster_wide_custom_object_watch(custom: Any,
                                         kube_api: KubeAPIServer) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, "ns1", PLURAL, runnerset("one"))
    custom.create_namespaced_custom_object(GROUP, VERSION, "ns2", PLURAL, runnerset("two"))
    listed = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["one", "two"]
    assert listed["kind"] == "RunnerSetList"
    assert listed["metadata"]["resourceVersion"] == str(kube_api.resource_version)
    w = kubernetes.watch.Watch()
    events = list(w.stream(custom.list_cluster_custom_object, GROUP, VERSION, PLURAL,
                           resource_version="0", timeout_seconds=1))
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "one"), ("ADDED", "two")]


def test_dropped_watch_is_resumed_by_the_client(core: Any, kube_api: KubeAPIServer) -> None:
    w = kubernetes.watch.Watch()
    # no timeout_seconds: the client re-watches from its last version when a stream ends;
    # _request_timeout turns a missing event into an error instead of a hang
    stream = w.stream(core.list_namespaced_pod, NS, resource_version=str(kube_api.resource_version),
                      _request_timeout=10)
    seen: list[str] = []

    def consume() -> None:
        for event in stream:
            seen.append(event["object"].metadata.name)
            if len(seen) == 2:
                w.stop()

    consumer = threading.Thread(target=consume)
    consumer.start()
    core.create_namespaced_pod(NS, pod("a"))
    _wait_for(lambda: seen == ["a"])
    kube_api.drop_watches()
    _wait_for(lambda: kube_api.call_count("watch") == 2)
    core.create_namespaced_pod(NS, pod("b"))
    consumer.join(10)
    assert seen == ["a", "b"]  # nothing replayed, nothing lost


def _wait_for(condition: Any, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_stop_ends_open_watches(kube_api: KubeAPIServer, core: Any) -> None:
    done = threading.Event()

    def watch_forever() -> None:  # ends only if the stream ends cleanly (no ProtocolError)
        for _ in kubernetes.watch.Watch().stream(core.list_namespaced_pod, NS,
                                                 resource_version="0", timeout_seconds=60):
            pass
        done.set()

    threading.Thread(target=watch_forever, daemon=True).start()
    time.sleep(0.3)
    began = time.monotonic()
    kube_api.stop()
    assert time.monotonic() - began < 2
    assert done.wait(2)


# -- status subresource, finalizers, GC --------------------------------------------------------
def test_status_subresource(custom: Any) -> None:
    created = custom.create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, {**runnerset("rs", 2), "status": {"replicas": 99}})
    assert "status" not in created and created["metadata"]["generation"] == 1

    body = {**created, "spec": {"replicas": 5, "patchID": 1}, "status": {"replicas": 2}}
    after_status = custom.replace_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL,
                                                                  "rs", body)
    assert after_status["spec"] == {"replicas": 2, "patchID": 0}  # spec change ignored
    assert after_status["status"] == {"replicas": 2}
    assert after_status["metadata"]["generation"] == 1

    main = custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "rs", {"spec": {"replicas": 3}, "status": {"replicas": 0}})
    assert main["spec"]["replicas"] == 3 and main["status"] == {"replicas": 2}
    assert main["metadata"]["generation"] == 2

    patched = custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, NS, PLURAL, "rs", {"status": {"pending": 1}})
    assert patched["status"] == {"replicas": 2, "pending": 1}
    assert patched["metadata"]["generation"] == 2


def test_a_resource_version_in_a_status_merge_patch_is_a_precondition(custom: Any) -> None:
    """As the real API server (the registry compares the patched object's resourceVersion with
    the stored one before the status strategy keeps only ``.status``): a merge patch to
    ``/status`` naming ``metadata.resourceVersion`` applies only on that version — 409
    Conflict otherwise, nothing changed, even when the patch would change nothing — and the
    version counts every write to the object, a spec edit's included."""
    created = custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL,
                                                     runnerset("rs", 2))
    read = created["metadata"]["resourceVersion"]
    first = custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, NS, PLURAL, "rs",
        {"metadata": {"resourceVersion": read}, "status": {"refilled": 2}},
        _content_type="application/merge-patch+json")
    assert first["status"] == {"refilled": 2}
    assert int(first["metadata"]["resourceVersion"]) > int(read)

    for body in ({"status": {"refilled": 1}},  # computed from the version read before
                 {"status": {"refilled": 2}}):  # (changing nothing: still a precondition)
        with pytest.raises(ApiException) as info:
            custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, NS, PLURAL, "rs", {"metadata": {"resourceVersion": read}, **body},
                _content_type="application/merge-patch+json")
        assert (info.value.status, status_of(info.value)["reason"]) == (409, "Conflict")
    stored = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "rs")
    assert stored["status"] == {"refilled": 2}
    assert stored["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]

    edited = custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "rs",
                                                   {"spec": {"replicas": 3}})  # Argo CD
    with pytest.raises(ApiException) as info:
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, NS, PLURAL, "rs", {"metadata": {"resourceVersion": first[
                "metadata"]["resourceVersion"]}, "status": {"refilled": 3}},
            _content_type="application/merge-patch+json")
    assert info.value.status == 409
    later = custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, NS, PLURAL, "rs", {"metadata": {
            "resourceVersion": edited["metadata"]["resourceVersion"]}, "status": {"refilled": 3}},
        _content_type="application/merge-patch+json")
    assert later["status"] == {"refilled": 3} and later["spec"]["replicas"] == 3
    unconditional = custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, NS, PLURAL, "rs", {"status": {"refilled": 4}},
        _content_type="application/merge-patch+json")  # (no version: applied on any)
    assert unconditional["status"] == {"refilled": 4}


def test_finalizers_hold_deletion(custom: Any) -> None:
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL,
                                           runnerset("rs", finalizers=["gitscale.dev/cleanup"]))
    pending = custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "rs")
    assert pending["metadata"]["deletionTimestamp"]
    still = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "rs")
    assert still["metadata"]["deletionTimestamp"] == pending["metadata"]["deletionTimestamp"]
    custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "rs",
                                          {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as info:
        custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "rs")
    assert info.value.status == 404


def test_owner_reference_gc(core: Any, kube_api: KubeAPIServer) -> None:
    owner = core.create_namespaced_pod(NS, pod("owner"))
    other = core.create_namespaced_pod(NS, pod("other"))

    def ref(p: Any) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "name": p.metadata.name,
                "uid": p.metadata.uid}

    core.create_namespaced_secret(NS, {"metadata": {"name": "owned",
                                                    "ownerReferences": [ref(owner)]}})
    core.create_namespaced_secret(NS, {"metadata": {"name": "shared", "ownerReferences": [
        ref(owner), ref(other)]}})
    core.create_namespaced_secret(NS, {"metadata": {"name": "unrelated"}})

    core.delete_namespaced_pod("owner", NS)
    assert [s["metadata"]["name"] for s in kube_api.objects("secrets")] == ["shared", "unrelated"]
    shared = core.read_namespaced_secret("shared", NS)
    assert [r.name for r in shared.metadata.owner_references] == ["other"]

    core.delete_namespaced_pod("other", NS, propagation_policy="Orphan")
    assert core.read_namespaced_secret("shared", NS).metadata.owner_references is None


def test_foreground_deletion_takes_the_dependents_at_once(custom: Any, core: Any,
                                                          kube_api: KubeAPIServer) -> None:
    # The owner's own finalizer does not protect its dependents: the garbage collector deletes
    # them as soon as the owner is marked, then the owner waits only for that finalizer.
    owner = custom.create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, runnerset("rs", finalizers=["gitscale.dev/runners"]))
    ref = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RunnerSet", "name": "rs",
           "uid": owner["metadata"]["uid"], "controller": True}
    core.create_namespaced_pod(NS, pod("busy", ownerReferences=[ref]))
    core.create_namespaced_pod(NS, pod("idle", ownerReferences=[ref]))
    core.create_namespaced_pod(NS, pod("bystander"))

    marked = custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "rs",
                                                    propagation_policy="Foreground")
    assert marked["metadata"]["deletionTimestamp"]
    assert [p["metadata"]["name"] for p in kube_api.objects("pods")] == ["bystander"]
    held = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "rs")
    assert held["metadata"]["finalizers"] == ["gitscale.dev/runners"]  # no blocking dependent
    custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "rs",
                                          {"metadata": {"finalizers": None}})
    assert kube_api.objects("runnersets") == []


def test_background_deletion_waits_for_the_owner_to_go(custom: Any, core: Any,
                                                       kube_api: KubeAPIServer) -> None:
    owner = custom.create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, runnerset("rs", finalizers=["gitscale.dev/runners"]))
    ref = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RunnerSet", "name": "rs",
           "uid": owner["metadata"]["uid"]}
    core.create_namespaced_pod(NS, pod("runner", ownerReferences=[ref]))
    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "rs",
                                           propagation_policy="Background")
    assert [p["metadata"]["name"] for p in kube_api.objects("pods")] == ["runner"]
    custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "rs",
                                          {"metadata": {"finalizers": None}})
    assert kube_api.objects("pods") == []


def test_foreground_owner_waits_for_blocking_dependents(core: Any,
                                                        kube_api: KubeAPIServer) -> None:
    kube_api.graceful_pod_deletion = True
    owner = core.create_namespaced_pod(NS, pod("owner"))
    ref = {"apiVersion": "v1", "kind": "Pod", "name": "owner", "uid": owner.metadata.uid,
           "blockOwnerDeletion": True}
    core.create_namespaced_pod(NS, pod("child", ownerReferences=[ref]))
    core.delete_namespaced_pod("owner", NS, propagation_policy="Foreground")
    owner_now = kube_api.get_object("pods", "owner")
    child = kube_api.get_object("pods", "child")
    assert owner_now is not None and owner_now["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert child is not None and child["metadata"]["deletionTimestamp"]  # terminating
    kube_api.finish_pod_deletions()  # the child goes, then the owner
    assert kube_api.objects("pods") == []


def test_delete_preconditions(core: Any) -> None:
    created = core.create_namespaced_pod(NS, pod("a"))
    with pytest.raises(ApiException) as info:
        core.delete_namespaced_pod("a", NS, body={"preconditions": {"resourceVersion": "999"}})
    assert info.value.status == 409
    core.delete_namespaced_pod("a", NS, body={"preconditions": {
        "uid": created.metadata.uid, "resourceVersion": created.metadata.resource_version}})


# -- seams -----------------------------------------------------------------------------------
def test_call_counter(core: Any, custom: Any, kube_api: KubeAPIServer) -> None:
    core.create_namespaced_pod(NS, pod("a"))
    core.create_namespaced_pod(NS, pod("b"))
    core.list_namespaced_pod(NS)
    with pytest.raises(ApiException):
        core.read_namespaced_pod("missing", NS)
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, runnerset("rs"))
    custom.patch_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, "rs",
                                                 {"status": {"replicas": 1}})
    kube_api.set_pod_phase(NS, "a", "Running")  # a hook, not an API call
    assert kube_api.calls_snapshot() == {
        ("create", "pods"): 2, ("list", "pods"): 1, ("get", "pods"): 1,
        ("create", "runnersets.gitscale.dev"): 1, ("patch", "runnersets.gitscale.dev/status"): 1}
    assert kube_api.call_count() == 6
    assert kube_api.call_count("create") == 3
    assert kube_api.call_count(resource="runnersets") == 1
    assert kube_api.call_count("patch", "runnersets/status") == 1
    kube_api.reset_calls()
    assert kube_api.call_count() == 0


def test_injected_errors(core: Any, kube_api: KubeAPIServer) -> None:
    kube_api.inject_error("create", "pods", code=500, times=1)
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod(NS, pod("a"))
    assert info.value.status == 500
    core.create_namespaced_pod(NS, pod("a"))
    assert kube_api.call_count("create", "pods") == 2


def test_a_hung_call_gets_no_answer_until_released(core: Any, kube_api: KubeAPIServer) -> None:
    release = kube_api.hang("create", "pods")
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        core.create_namespaced_pod(NS, pod("a"), _request_timeout=(1, 0.3))
    assert core.list_namespaced_pod(NS).items == []  # other calls are served meanwhile
    release.set()
    core.create_namespaced_pod(NS, pod("b"))
    assert [p["metadata"]["name"] for p in kube_api.objects("pods")] in (["b"], ["a", "b"])


def test_slow_answers_trickle_or_stall_until_released(core: Any, kube_api: KubeAPIServer) -> None:
    core.create_namespaced_pod(NS, pod("a"))
    release = kube_api.slow("list", "pods", every=0.001)  # each byte 1 ms after the last
    began = time.monotonic()
    assert [p.metadata.name for p in core.list_namespaced_pod(NS).items] == ["a"]  # intact
    assert time.monotonic() - began >= 0.3  # (the body alone is more than 300 bytes)
    release.set()
    stalled = kube_api.slow("get", "pods", after=5)  # the headers and 5 bytes, then nothing
    answer = core.read_namespaced_pod("a", NS, _preload_content=False,
                                      _request_timeout=(1, 0.3))
    assert answer.status == 200
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        answer.read()
    assert core.list_namespaced_pod(NS).items  # other calls are served meanwhile
    stalled.set()
    assert core.read_namespaced_pod("a", NS).metadata.name == "a"


def test_on_call_hooks_see_every_call(core: Any, kube_api: KubeAPIServer) -> None:
    seen: list[tuple[str, str, dict[str, str]]] = []
    kube_api.on_call(lambda verb, resource, query: seen.append((verb, resource, query)))
    core.list_namespaced_pod(NS, limit=5)
    assert seen == [("list", "pods", {"limit": "5"})]


def test_latency_is_per_request_and_concurrent() -> None:
    server = start_api_server(latency=0.3)
    try:
        api = CoreV1Api(api_client(server.url))
        began = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: api.list_namespaced_pod(NS), range(8)))
        elapsed = time.monotonic() - began
    finally:
        server.stop()
    assert 0.3 <= elapsed < 8 * 0.3 / 2  # slept per call, but not one call after another


def test_graceful_pod_deletion_knob(core: Any, kube_api: KubeAPIServer) -> None:
    kube_api.graceful_pod_deletion = True
    core.create_namespaced_pod(NS, pod("a"))
    terminating = core.delete_namespaced_pod("a", NS)
    assert terminating.metadata.deletion_timestamp is not None
    assert kube_api.finish_pod_deletions() == 1
    assert kube_api.objects("pods") == []


def test_register_custom_resource(kube_api: KubeAPIServer, custom: Any) -> None:
    kube_api.register_resource("actions.summerwind.dev", "v1alpha1", "runnerdeployments",
                               kind="RunnerDeployment")
    custom.create_namespaced_custom_object("actions.summerwind.dev", "v1alpha1", NS,
                                           "runnerdeployments", {"metadata": {"name": "rd"}})
    assert [o["kind"] for o in kube_api.objects("runnerdeployments")] == ["RunnerDeployment"]


def test_dynamic_client_kubeconfig_and_informer(kube_api: KubeAPIServer, tmp_path: Path) -> None:
    config = kube_api.write_kubeconfig(tmp_path / "kubeconfig")
    client = kubernetes.config.new_client_from_config(config_file=str(config))
    dynamic = kubernetes.dynamic.DynamicClient(client)
    sets = dynamic.resources.get(api_version=f"{GROUP}/{VERSION}", kind="RunnerSet")
    sets.create(body=runnerset("rs"), namespace=NS)
    assert [i.metadata.name for i in sets.get(namespace=NS).items] == ["rs"]

    # resync_period bounds each watch (timeoutSeconds): SharedInformer.stop() can otherwise hang
    # when it races the start of a watch (a client-side race; a real server would hang too)
    core: Any = CoreV1Api(client)
    informer = kubernetes.informer.SharedInformer(core.list_namespaced_pod, namespace=NS,
                                                  resync_period=1)
    added = threading.Event()
    informer.add_event_handler(kubernetes.informer.ADDED, lambda obj: added.set())
    informer.start()
    try:
        core.create_namespaced_pod(NS, pod("seen"))
        assert added.wait(5)
    finally:
        informer.stop()


def test_leases_for_leader_election(kube_client: ApiClient) -> None:
    """Two candidates race for one Lease: the create and every update are conditional, so only
    one wins each round (409 for the loser), as client-go's leader election relies on."""
    api: Any = kubernetes.client.CoordinationV1Api(kube_client)
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "gitscale-controller"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15,
                     "renewTime": "2026-11-23T09:00:00.000000Z", "leaseTransitions": 0}}
    lease = api.create_namespaced_lease(NS, body)
    with pytest.raises(ApiException) as exists:
        api.create_namespaced_lease(NS, {**body, "spec": {**body["spec"], "holderIdentity": "b"}})
    assert exists.value.status == 409
    seen = lease.metadata.resource_version
    renewed = {**body, "metadata": {"name": "gitscale-controller", "resourceVersion": seen}}
    renewed["spec"] = {**body["spec"], "renewTime": "2026-11-23T09:00:02.000000Z"}
    assert api.replace_namespaced_lease("gitscale-controller", NS, renewed).spec.holder_identity == "a"
    taken = {**renewed, "spec": {**renewed["spec"], "holderIdentity": "b", "leaseTransitions": 1}}
    with pytest.raises(ApiException) as stale:  # b read the lease before a renewed it
        api.replace_namespaced_lease("gitscale-controller", NS, taken)
    assert stale.value.status == 409
    assert api.read_namespaced_lease("gitscale-controller", NS).spec.holder_identity == "a"


def test_a_quota_refuses_past_its_pods_dry_runs_too(kube_api: KubeAPIServer, core: Any) -> None:
    kube_api.quota(NS, pods=1)
    core.create_namespaced_pod(NS, pod("a"))
    for dry_run in ("All", None):
        with pytest.raises(ApiException) as info:
            core.create_namespaced_pod(NS, pod("b"), dry_run=dry_run)
        assert info.value.status == 403 and status_of(info.value)["reason"] == "Forbidden"
        assert status_of(info.value)["message"] == (
            'pods "b" is forbidden: exceeded quota: compute-resources, requested: pods=1, '
            "used: pods=1, limited: pods=1")
    kube_api.set_pod_phase(NS, "a", "Succeeded")  # a stopped pod does not count
    core.create_namespaced_pod(NS, pod("b"))
    kube_api.clear_errors()
    core.create_namespaced_pod(NS, pod("c"))


def test_an_admission_webhook_denies_as_the_api_server_says_it(
        kube_api: KubeAPIServer, core: Any) -> None:
    def check(namespace: str, obj: dict[str, Any], existing: list[dict[str, Any]]) -> None:
        if "team" not in obj["metadata"].get("labels", {}):
            raise webhook_denied("policy.example.com", "label team is required")
    kube_api.admit("pods", check)
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod(NS, pod("a"))
    body = status_of(info.value)
    assert (info.value.status, body["reason"]) == (400, "")
    assert body["message"] == ('admission webhook "policy.example.com" denied the request: '
                               "label team is required")
    core.create_namespaced_pod(NS, pod("b", {"team": "ci"}))


def test_a_container_name_used_twice_is_invalid(core: Any) -> None:
    body = pod("a")
    body["spec"]["initContainers"] = [{"name": "runner", "image": "setup:1"}]
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod(NS, body)
    assert info.value.status == 422
    assert 'spec.containers[0].name: Duplicate value: "runner"' in status_of(
        info.value)["message"]
