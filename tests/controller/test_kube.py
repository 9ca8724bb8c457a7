"""kube.py against the Kubernetes-shaped API server: lists by pages (and again when a continue
token expires), and no call that waits for ever."""
from __future__ import annotations


import pytest

from gitscale.controller.cache import runner_pod_fields
from gitscale.controller.errors import KubeError
from gitscale.controller.kube import Kube
from gitscale.controller.kube_config import client_for
from gitscale.controller.observe import LABEL_SET
from tests.kubeapi.server import KubeAPIServer

NS = "default"




def runner(name: str) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": {LABEL_SET: "rs"}},
            "spec": {"containers": [{"name": "runner", "image": "runner:1",
                                     "env": [{"name": "X", "value": "y" * 100}]}]}}


def lists(api: KubeAPIServer) -> list[str]:
    return [line for line in api.log if line.startswith("GET /api/v1/namespaces/default/pods?")]


def test_lists_go_by_pages_and_keep_what_they_are_told(api: KubeAPIServer) -> None:
    for i in range(5):
        api.create_object("pods", runner(f"p{i}"), NS)
    version = str(api.resource_version)
    kube = Kube(client_for(api.url), page_size=2)
    try:
        pods, listed_at = kube.list_pods(NS, runner_pod_fields)
    finally:
        kube.close()
    assert [p["metadata"]["name"] for p in pods] == [f"p{i}" for i in range(5)]
    assert listed_at == version
    assert all(p["spec"] == {"containers": [{"name": "runner"}]} for p in pods)
    pages = lists(api)
    assert len(pages) == 3 and all("limit=2" in line for line in pages)
    assert "continue=" not in pages[0] and all("continue=" in line for line in pages[1:])


def test_a_list_whose_continue_token_expired_starts_again(api: KubeAPIServer) -> None:
    for i in range(5):
        api.create_object("pods", runner(f"p{i}"), NS)
    compacted: list[bool] = []

    def compact_once(verb: str, resource: str, query: dict[str, str]) -> None:
        if verb == "list" and "continue" in query and not compacted:
            compacted.append(True)
            api.create_object("pods", runner("p5"), NS)  # written while the list pages
            api.compact()  # etcd forgets the revision the token points at: 410 Expired

    api.on_call(compact_once)
    kube = Kube(client_for(api.url), page_size=2)
    try:
        pods, version = kube.list_pods(NS)
    finally:
        kube.close()
    assert [p["metadata"]["name"] for p in pods] == [f"p{i}" for i in range(6)]
    assert version == str(api.resource_version)  # the second list's
    statuses = [line.rsplit(" -> ", 1)[1] for line in lists(api)]
    assert statuses == ["200", "410", "200", "200", "200"]


def test_a_call_the_api_server_never_answers_times_out(api: KubeAPIServer) -> None:
    release = api.hang("create", "pods")
    kube = Kube(client_for(api.url), timeout=0.3)
    try:
        # (within what is left of 0.3 s once connected: "0.3s", or "0.29s" under load)
        said = r"answered too slowly \(no answer within 0\.[23]\d?s\)"
        with pytest.raises(KubeError, match=said):
            kube.create_pod({"apiVersion": "v1", "kind": "Pod",
                             "metadata": {"name": "p", "namespace": NS},
                             "spec": {"containers": [{"name": "runner", "image": "r:1"}]}})
    finally:
        release.set()
        kube.close()


def test_a_lease_call_is_tried_once_within_its_timeout(api: KubeAPIServer) -> None:
    """urllib3 would retry a GET that timed out three times: four times the renewal's budget."""
    release = api.hang("get", "leases")
    kube = Kube(client_for(api.url))
    try:
        # (within what is left of 0.3 s once connected: "0.3s", or "0.29s" under load)
        said = r"answered too slowly \(no answer within 0\.[23]\d?s\)"
        with pytest.raises(KubeError, match=said):
            kube.read_lease(NS, "gitscale-controller", timeout=0.3)
        assert api.call_count("get", "leases") == 1
    finally:
        release.set()
        kube.close()


def test_a_watch_opened_after_the_stop_ends_at_once(api: KubeAPIServer) -> None:
    """A watch an informer was opening as the controller stopped is not served: without the
    stop it would hold the informer (and the stop's join) until the API server ends it."""
    version = str(api.resource_version)
    api.create_object("pods", runner("p0"), NS)  # an event the watch would have
    kube = Kube(client_for(api.url))
    try:
        kube.stop_watches()
        assert list(kube.watch_pods(NS, version, 5)) == []
    finally:
        kube.close()
    assert api.call_count("watch", "pods") == 1  # it was opened, then ended unread
