"""Each Kubernetes call ends by its deadline, however slowly its answer comes (kube_deadline.py):
the real client against the local API server answering a byte at a time, or stalling half-way,
with a read timeout of 0.3 s (30 s in production: ``kube.TIMEOUT``)."""
from __future__ import annotations

import json
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gitscale.controller.cache import Informer, Store, runner_pod_fields
from gitscale.controller.errors import KubeError
from gitscale.controller.kube import Kube
from gitscale.controller.kube_config import client_for, load
from gitscale.controller.observe import LABEL_SET
from tests.controller.harness import NS, Harness, buildkite_spec, start
from tests.helpers import wait_for
from tests.kubeapi.server import KubeAPIServer, start_api_server

DEADLINE = 0.3  # the read timeout the tests give: each answer whole within it
TRICKLE = 0.05  # seconds between two bytes of a trickled answer: a whole one takes > 20 s
SLOW = f"answered too slowly (the answer was not whole within {DEADLINE}s)"


def runner(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS, "labels": {LABEL_SET: "rs"}},
            "spec": {"containers": [{"name": "runner", "image": "r:1"}]}}


@pytest.fixture
def api() -> Iterator[KubeAPIServer]:
    server = start_api_server(bookmark_interval=60)  # (no bookmark: a quiet watch is silent)
    server.create_object("pods", runner("p"), NS)
    server.create_object("runnersets", {"metadata": {"name": "rs"}, "spec": {}}, NS)
    server.create_object("secrets", {"metadata": {"name": "s"}, "data": {"k": "dg=="}}, NS)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kube(api: KubeAPIServer) -> Iterator[Kube]:
    client = Kube(client_for(api.url), timeout=DEADLINE)
    try:
        yield client
    finally:
        client.close()


CALLS: dict[str, tuple[str, str, Callable[[Kube], object]]] = {
    "list pods": ("list", "pods", lambda k: k.list_pods(NS)),
    "create pod": ("create", "pods", lambda k: k.create_pod(runner("new"))),
    "patch status": ("patch", "runnersets/status",
                     lambda k: k.patch_runnerset_status(NS, "rs", {"replicas": 1})),
    "read secret": ("get", "secrets", lambda k: k.read_secret(NS, "s")),
    "delete pod": ("delete", "pods", lambda k: k.delete_pod(NS, "p")),
}
WHAT = {"list pods": "list runner pods", "create pod": "create pod default/new",
        "patch status": "update status of RunnerSet default/rs",
        "read secret": "read Secret default/s", "delete pod": "delete pod default/p"}


@pytest.mark.parametrize("how", ["trickled", "stalled"])
@pytest.mark.parametrize("name", list(CALLS))
def test_an_answer_too_slow_ends_by_the_deadline_as_the_controllers_error(
        api: KubeAPIServer, kube: Kube, name: str, how: str) -> None:
    """A byte every 0.05 s (each within the read timeout: urllib3's per-read timeout never
    trips, and the call waited for the whole 20 s and more), or the headers and a few bytes
    of the body, then nothing: the call ends at its deadline, once, as a ``KubeError``."""
    verb, resource, call = CALLS[name]
    release = api.slow(verb, resource, every=TRICKLE) if how == "trickled" \
        else api.slow(verb, resource, after=10)  # (the body stalls after 10 bytes)
    began = time.monotonic()
    try:
        with pytest.raises(KubeError) as caught:
            call(kube)
        took = time.monotonic() - began
    finally:
        release.set()
    assert str(caught.value) == f"{WHAT[name]}: the API server {SLOW}"
    assert caught.value.status == 0  # no answer read: as an API server that did not answer
    assert took < 5  # (the trickled answer would have taken more than 20 s)
    assert api.call_count(verb, resource) == 1  # not sent again
    assert kube.read_secret(NS, "s") == {"k": "v"}  # the next call is answered


def test_each_call_on_a_kept_alive_connection_has_a_deadline_of_its_own(
        api: KubeAPIServer) -> None:
    """Answers that come in 0.4 s each, one after the other on one connection, with 1 s each:
    the deadline is each answer's (from its request), not the connection's, nor what the
    last one left of it."""
    kube = Kube(client_for(api.url), timeout=1.0)
    try:
        kube.list_pods(NS)
        api.latency = 0.4
        for _ in range(3):
            assert [p["metadata"]["name"] for p in kube.list_pods(NS)[0]] == ["p"]
    finally:
        kube.close()


def test_a_lease_call_ends_within_the_electors_timeout(api: KubeAPIServer, kube: Kube) -> None:
    """The elector gives each Lease call the time left before its renew deadline."""
    api.create_object("leases", {"metadata": {"name": "l"}, "spec": {}}, NS)
    release = api.slow("get", "leases", every=TRICKLE)
    try:
        with pytest.raises(KubeError) as caught:
            kube.read_lease(NS, "l", timeout=0.2)
    finally:
        release.set()
    assert str(caught.value) == ("read Lease default/l: the API server answered too slowly "
                                 "(the answer was not whole within 0.2s)")


def test_a_trickled_answer_over_tls_ends_by_the_deadline(
        api: KubeAPIServer, tmp_path: Path) -> None:
    """The same through a TLS socket (the API server as the controller meets it), with the
    client made from a kubeconfig, as ``gitscale controller`` makes it."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not on PATH")
    cert = api.serve_tls(tmp_path)
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "k",
        "clusters": [{"name": "k", "cluster": {"server": api.url.replace("http:", "https:"),
                                               "certificate-authority": str(cert)}}],
        "users": [{"name": "k", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "k", "context": {"cluster": "k", "user": "k"}}]}))
    kube = Kube(load(str(config)), timeout=DEADLINE)
    try:
        assert kube.list_pods(NS)[0]  # TLS works
        release = api.slow("list", "pods", every=TRICKLE)
        try:
            with pytest.raises(KubeError) as caught:
                kube.list_pods(NS)
        finally:
            release.set()
        assert str(caught.value) == f"list runner pods: the API server {SLOW}"
        assert kube.list_pods(NS)[0]
    finally:
        kube.close()


# -- a pass -----------------------------------------------------------------------------------
@pytest.fixture
def harness() -> Iterator[Harness]:
    yield from start(kube_timeout=DEADLINE)


def test_a_pass_whose_creations_trickle_fails_says_so_and_backs_off(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    harness.write("bk", 1, 0, spec=buildkite_spec())
    release = harness.api.slow("create", "pods", every=TRICKLE)
    # (and so does the look for the pod after it: whether it was made cannot be known)
    looked = harness.api.slow("list", "pods", every=TRICKLE)
    try:
        report = harness.sync("bk")
    finally:
        release.set()
        looked.set()
    (error,) = report.errors  # as for an API server that does not answer: backed off
    assert error.startswith("create pod default/bk-") and error.endswith(
        f"{SLOW}; creations failed 1 pass(es) in a row, tried again from 2026-11-23T09:00:10Z")
    assert report.requeue_after == 10
    ready = harness.status("bk")["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "CreateFailed")
    said = [r for r in caplog.records if SLOW in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING]  # one line, the set's Ready
    assert not [r for r in caplog.records if r.exc_info]  # no traceback: not a crash
    assert "t0ken" not in caplog.text
    assert harness.controller.healthy()
    harness.clock.advance(10)
    report = harness.sync("bk")  # the API server answers again (it had made the pod)
    assert report.errors == [] and report.created == [] and len(harness.pods("bk")) == 1


# -- watches ----------------------------------------------------------------------------------
class Informing:
    """A pod informer of the real client against ``api``, its watches asked to end after
    ``watch_timeout`` seconds."""

    def __init__(self, api: KubeAPIServer, watch_timeout: int = 1) -> None:
        self.kube = Kube(client_for(api.url), timeout=DEADLINE)
        self.stop = threading.Event()
        self.store = Store(keep=runner_pod_fields)
        kube = self.kube
        self.informer = Informer("pods", self.store,
                                 lambda: kube.list_pods(NS, runner_pod_fields),
                                 lambda v, t: kube.watch_pods(NS, v, t), lambda _: None,
                                 self.stop, watch_timeout=watch_timeout, backoff=0.05)
        self.informer.start()

    def close(self) -> None:
        self.stop.set()
        self.kube.stop_watches()
        self.informer.thread.join(5)
        self.kube.close()


def test_a_watch_that_goes_silent_is_ended_and_watched_again(
        api: KubeAPIServer, caplog: pytest.LogCaptureFixture) -> None:
    """The headers, then nothing (a proxy whose upstream went away, a partition): ended its
    read timeout after the time it was asked to last (1 s + 0.3 s), watched again, and a
    change is seen once the API server streams again. (The watch's read timeout was its
    timeout + 30 s, per read: a trickle held it for good.)"""
    caplog.set_level(logging.INFO, "gitscale.controller")
    release = api.slow("watch", "pods", after=0)
    informing = Informing(api)
    try:
        wait_for(lambda: api.call_count("watch", "pods") >= 2, 5)  # the first was ended
        release.set()  # the second streams
        api.create_object("pods", runner("q"), NS)
        wait_for(lambda: informing.store.get(f"{NS}/q") is not None, 5)
    finally:
        informing.close()
    assert api.call_count("list", "pods") == 1  # watched again from its version: no relist
    ended = [r.getMessage() for r in caplog.records if "answered too slowly" in r.getMessage()]
    assert ended[0] == ("watch runner pods: the API server answered too slowly: the watch, to "
                        "end after 1s, was not over 1.3s after it was asked; ended, to watch "
                        "again"), ended
    assert not [r for r in caplog.records if r.exc_info]


def test_a_watch_that_trickles_past_its_end_is_ended_too(
        api: KubeAPIServer, caplog: pytest.LogCaptureFixture) -> None:
    """Its headers at once, then its events a byte every 0.02 s, well within the read
    timeout each (bookmarks keep it going): ended like a silent one, and watched again."""
    caplog.set_level(logging.INFO, "gitscale.controller")
    api.bookmark_interval = 0.05
    release = api.slow("watch", "pods", every=0.02, after=0)
    informing = Informing(api)
    try:
        wait_for(lambda: api.call_count("watch", "pods") >= 2, 5)
    finally:
        release.set()
        informing.close()
    assert "watch runner pods: the API server answered too slowly: the watch" in caplog.text


def test_a_quiet_watch_is_not_cut_by_the_read_timeout(api: KubeAPIServer) -> None:
    """No event, no bookmark for 0.6 s, twice the read timeout: the watch stays open (it is
    the API server's to end, after its 2 s), and the change then comes on it."""
    informing = Informing(api, watch_timeout=2)
    try:
        wait_for(lambda: informing.informer.synced.is_set()
                 and api.call_count("watch", "pods") == 1, 5)
        time.sleep(2 * DEADLINE)
        api.create_object("pods", runner("q"), NS)
        wait_for(lambda: informing.store.get(f"{NS}/q") is not None, 5)
        watches = api.call_count("watch", "pods")
    finally:
        informing.close()
    assert watches == 1  # the change came on the first watch: it was not ended early
    assert informing.informer.failures == 0
