"""A controller deployed subtly wrong, as a platform team meets it: a Role missing one verb, a
``--namespace`` with no RunnerSets, credentials the API server rejects (401), a certificate it
does not trust. Through the real ``kubernetes`` client against the local API server, which
refuses as the real one does (RBAC's 403 message, word for word).

Each time the controller says once what is wrong and what to add (the Role's rule), with no
traceback; it is not ready while it cannot list what it must, or cannot take part in the
election, yet stays live (a restart would fix nothing); and it recovers by itself once the Role
is fixed.
"""
from __future__ import annotations

import base64
import logging
import shutil
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gitscale.controller import status as st
from gitscale.controller.errors import KubeError
from gitscale.controller.kube import Kube
from gitscale.controller.kube_config import client_for
from gitscale.controller.leader import LeaseConfig
from gitscale.controller.loop import Controller, serve_health
from gitscale.controller.platforms import Platforms
from gitscale.controller.observe import LABEL_SET
from tests.controller.harness import NS, Harness, buildkite_spec
from tests.helpers import wait_for
from tests.kubeapi.server import KubeAPIServer

SA = "system:serviceaccount:gitscale-system:gitscale-controller"
GROUPS = {"runnersets": "gitscale.dev", "leases": "coordination.k8s.io"}


def forbid(api: KubeAPIServer, verb: str, resource: str, namespace: str = NS) -> None:
    """RBAC refuses ``verb`` on ``resource`` from now on, in the API server's words."""
    group = GROUPS.get(resource.split("/")[0], "")
    api.inject_error(verb, resource, code=403, reason="Forbidden", times=10**6, message=(
        f'{resource.split("/")[0]} is forbidden: User "{SA}" cannot {verb} resource '
        f'"{resource}" in API group "{group}" in the namespace "{namespace}"'))


def rule(verb: str, resource: str, namespace: str = NS) -> str:
    group = GROUPS.get(resource.split("/")[0], "")
    return (f'RBAC: add the rule {{apiGroups: ["{group}"], resources: ["{resource}"], verbs: '
            f'["{verb}"]}} to the controller\'s Role in namespace "{namespace}"')


POD = {"metadata": {"name": "p", "namespace": NS, "labels": {LABEL_SET: "rs"}},
       "spec": {"containers": [{"name": "runner", "image": "r:1"}]}}
LEASE = {"metadata": {"name": "l", "namespace": "gitscale-system"},
         "spec": {"holderIdentity": "me"}}
# every call the Role must allow (deploy/controller/rbac.yaml), as the controller makes it
CALLS: list[Any] = [
    pytest.param("list", "pods", lambda k: k.list_pods(NS), id="list-pods"),
    pytest.param("watch", "pods", lambda k: list(k.watch_pods(NS, "0", 1)), id="watch-pods"),
    pytest.param("create", "pods", lambda k: k.create_pod(POD), id="create-pods"),
    pytest.param("delete", "pods", lambda k: k.delete_pod(NS, "p"), id="delete-pods"),
    pytest.param("list", "runnersets", lambda k: k.read_runnerset(NS, "rs"),
                 id="list-runnersets"),
    pytest.param("patch", "runnersets", lambda k: k.patch_runnerset_finalizers(
        NS, "rs", [], "1"), id="patch-runnersets"),
    pytest.param("patch", "runnersets/status", lambda k: k.patch_runnerset_status(
        NS, "rs", {}), id="patch-runnersets-status"),
    pytest.param("get", "secrets", lambda k: k.read_secret(NS, "s"), id="get-secrets"),
    pytest.param("create", "secrets", lambda k: k.create_secret(
        {"metadata": {"name": "s", "namespace": NS}, "stringData": {"jit": "x"}}),
        id="create-secrets"),
    pytest.param("list", "secrets", lambda k: k.list_runner_secrets(NS, "rs"),
                 id="list-secrets"),
    pytest.param("patch", "secrets", lambda k: k.own_secret(NS, "s", []), id="patch-secrets"),
    pytest.param("delete", "secrets", lambda k: k.delete_secret(NS, "s"), id="delete-secrets"),
    pytest.param("create", "events", lambda k: k.create_event(
        {"metadata": {"name": "e", "namespace": NS}, "involvedObject": {"name": "rs"}}),
        id="create-events"),
    pytest.param("patch", "events", lambda k: k.patch_event(NS, "e", {}), id="patch-events"),
    pytest.param("get", "leases", lambda k: k.read_lease("gitscale-system", "l", timeout=5),
                 id="get-leases"),
    pytest.param("create", "leases", lambda k: k.create_lease(LEASE, timeout=5),
                 id="create-leases"),
    pytest.param("update", "leases", lambda k: k.replace_lease(
        {**LEASE, "metadata": {**LEASE["metadata"], "resourceVersion": "1"}}, timeout=5),
        id="update-leases"),
]




@pytest.mark.parametrize(("verb", "resource", "call"), CALLS)
def test_a_verb_the_role_lacks_is_named_with_the_rule_to_add(
        api: KubeAPIServer, verb: str, resource: str, call: Callable[[Kube], Any]) -> None:
    namespace = "gitscale-system" if resource == "leases" else NS
    forbid(api, verb, resource, namespace)
    kube = Kube(client_for(api.url))
    try:
        with pytest.raises(KubeError) as refused:
            call(kube)
    finally:
        kube.close()
    assert refused.value.status == 403
    said = str(refused.value)
    assert f'cannot {verb} resource "{resource}"' in said and "\n" not in said
    assert rule(verb, resource, namespace) in said, said


def test_a_refusal_at_the_cluster_scope_names_the_cluster_role(api: KubeAPIServer) -> None:
    api.inject_error("list", "pods", code=403, reason="Forbidden", message=(
        f'pods is forbidden: User "{SA}" cannot list resource "pods" in API group "" at the '
        "cluster scope"))
    kube = Kube(client_for(api.url))
    with pytest.raises(KubeError) as refused:
        kube.list_pods(None)
    kube.close()
    assert ('add the rule {apiGroups: [""], resources: ["pods"], verbs: ["list"]} to the '
            "controller's ClusterRole") in str(refused.value)


def test_a_quota_403_and_a_rejected_token_are_not_taken_for_the_role(
        api: KubeAPIServer) -> None:
    api.quota(NS, pods=0)
    api.inject_error("list", "pods", code=401, reason="Unauthorized", message="Unauthorized")
    kube = Kube(client_for(api.url))
    with pytest.raises(KubeError) as quota:
        kube.create_pod(POD)
    with pytest.raises(KubeError) as token:
        kube.list_pods(NS)
    kube.close()
    assert "exceeded quota" in str(quota.value) and "RBAC" not in str(quota.value)
    assert str(token.value) == (
        "list runner pods: 401 Unauthorized: Unauthorized (the API server rejected the "
        "controller's credentials: its ServiceAccount token, or the kubeconfig's user; check "
        "the Deployment's serviceAccountName and that the token is mounted, or --kubeconfig)")


def test_an_untrusted_certificate_is_one_line_that_says_where_trust_comes_from(
        api: KubeAPIServer, tmp_path: Path) -> None:
    """The client words a TLS failure as a status-0 ApiException whose reason spans lines."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not on PATH")
    api.serve_tls(tmp_path)
    kube = Kube(client_for(api.url.replace("http://", "https://")))
    with pytest.raises(KubeError) as failed:
        kube.list_pods(NS)
    kube.close()
    said = str(failed.value)
    assert failed.value.status == 0 and "\n" not in said
    assert said.startswith("list runner pods: the API server did not answer (SSLError "
                           "[SSL: CERTIFICATE_VERIFY_FAILED]"), said
    assert "the API server's certificate is not trusted" in said and "ca.crt" in said


# -- the controller, deployed ------------------------------------------------------------------
class Deployed:
    """``gitscale controller`` as deployed: workers, the resync, a health server; with
    leader election when ``election``. Its Buildkite set needs no platform."""

    def __init__(self, api: KubeAPIServer, *, namespace: str = NS,
                 election: LeaseConfig | None = None) -> None:
        self.api = api
        self.kube = Kube(client_for(api.url), timeout=5)
        self.controller = Controller(self.kube, namespace=namespace, concurrency=4,
                                     platforms=Platforms(self.kube.read_secret),
                                     election=election, relist_backoff=0.05)
        self.health = serve_health(self.controller, 0, host="127.0.0.1")

    def probe(self, path: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.health.server_address[1]}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 - local
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as refused:
            return refused.code, refused.read().decode()

    def stop(self) -> None:
        self.health.shutdown()
        self.controller.stop()
        self.kube.close()


@pytest.fixture
def deployed(api: KubeAPIServer) -> Iterator[Callable[..., Deployed]]:
    made: list[Deployed] = []

    def deploy(**options: Any) -> Deployed:
        made.append(Deployed(api, **options))
        return made[-1]
    yield deploy
    for one in made:
        one.stop()


def write_set(api: KubeAPIServer, name: str = "linux", replicas: int = 2,
              namespace: str = NS) -> None:
    api.create_object("secrets", {"metadata": {"name": "bk-token"}, "data": {
        "token": base64.b64encode(b"bk").decode()}}, namespace)
    api.create_object("runnersets", {
        "apiVersion": "gitscale.dev/v1alpha1", "kind": "RunnerSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {**buildkite_spec(), "replicas": replicas, "patchID": 1,
                 "effectiveTime": "2026-11-23T09:00:00Z"}}, namespace)


def warned(caplog: pytest.LogCaptureFixture) -> list[str]:
    assert "Traceback" not in caplog.text and not [r for r in caplog.records if r.exc_info]
    return [r.getMessage() for r in caplog.records
            if r.name == "gitscale.controller" and r.levelno >= logging.WARNING]


def test_a_role_without_list_on_pods_creates_nothing_is_not_ready_and_recovers(
        api: KubeAPIServer, deployed: Callable[..., Deployed],
        caplog: pytest.LogCaptureFixture) -> None:
    """Before, the workers ran passes on an empty pod cache: every runner of every set was
    created again (on a restart, beside those that run), and /readyz said the API server
    "did not answer" when it had refused."""
    caplog.set_level(logging.INFO, "gitscale.controller")
    write_set(api)
    forbid(api, "list", "pods")
    one = deployed()
    one.controller.start()
    wait_for(lambda: api.call_count("list", "pods") >= 4, 10)  # it tries, backing off
    code, body = one.probe("/readyz")
    assert code == 503 and rule("list", "pods") in body and "did not answer" not in body
    assert one.probe("/healthz") == (200, "ok\n")  # a restart would not fix the Role
    assert api.call_count("create", "pods") == 0  # no pass on a cache not listed
    [line] = warned(caplog)
    assert line.startswith("pods: list runner pods: 403 Forbidden: ") and rule(
        "list", "pods") in line
    api.clear_errors()  # the Role is fixed: no restart
    wait_for(lambda: len(api.objects("pods", NS, label_selector=LABEL_SET)) == 2, 40)
    wait_for(lambda: one.probe("/readyz") == (200, "ok\n"), 10)


def test_a_role_without_leases_says_so_once_is_not_ready_but_live_and_leads_once_fixed(
        api: KubeAPIServer, deployed: Callable[..., Deployed],
        caplog: pytest.LogCaptureFixture) -> None:
    """Before, a Lease refused was logged at debug level only: a controller that never led,
    ready and silent."""
    caplog.set_level(logging.INFO, "gitscale.controller")
    write_set(api)
    forbid(api, "get", "leases", "gitscale-system")
    one = deployed(election=LeaseConfig("gitscale-system", "me", duration=3,
                                        renew_deadline=2, retry=0.1))
    one.controller.start()
    wait_for(lambda: api.call_count("get", "leases") >= 10, 10)
    code, body = one.probe("/readyz")
    assert code == 503 and body.startswith("leader election: read Lease "
                                           "gitscale-system/gitscale-controller: 403")
    assert rule("get", "leases", "gitscale-system") in body
    assert one.probe("/healthz") == (200, "ok\n")
    assert api.call_count("create", "pods") == 0
    [line] = warned(caplog)
    assert line.startswith("leader election: read Lease") and rule(
        "get", "leases", "gitscale-system") in line and "cannot lead" in line
    api.clear_errors()
    wait_for(lambda: len(api.objects("pods", NS, label_selector=LABEL_SET)) == 2, 20)
    assert one.probe("/readyz") == (200, "ok\n")
    assert "leader election: the Lease gitscale-system/gitscale-controller can be read and " \
           "written again" in caplog.text


def test_a_namespace_without_runnersets_is_said_once(
        api: KubeAPIServer, deployed: Callable[..., Deployed],
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "gitscale.controller")
    write_set(api)  # in "default"; the controller watches ci-runners
    one = deployed(namespace="ci-runners")
    one.controller.start()
    wait_for(lambda: warned(caplog), 10)
    threading.Event().wait(0.5)  # (the other worker says nothing more)
    assert warned(caplog) == [
        "no RunnerSet in namespace ci-runners: nothing to do until one is applied there (the "
        "controller watches only the namespace its --namespace names; RunnerSets elsewhere "
        "are not seen)"]
    assert one.probe("/readyz") == (200, "ok\n")


def test_a_role_without_list_on_runnersets_stops_removals_and_says_so_in_ready(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """The version check before removals reads the set by list. Before, its refusal was an
    Event only: Ready kept saying all was well, and the log said nothing."""
    caplog.set_level(logging.INFO, "gitscale.controller")
    harness.write("linux", 3, 1)
    harness.sync("linux")
    forbid(harness.api, "list", "runnersets")
    harness.write("linux", 0, 0)
    report = harness.sync("linux")
    assert report.deleted == [] and len(harness.pods("linux")) == 3
    ready = st.ready_of(harness.status("linux"))
    assert (ready["status"], ready["reason"]) == ("False", "ApplyFailed")
    assert rule("list", "runnersets") in ready["message"]
    assert "no runner removed" in ready["message"]
    assert [line for line in warned(caplog) if line.startswith(f"{NS}/linux:")] == [
        f"{NS}/linux: {ready['message']}"]
    harness.api.clear_errors()
    harness.clock.advance(60)
    assert len(harness.sync("linux").deleted) == 3
