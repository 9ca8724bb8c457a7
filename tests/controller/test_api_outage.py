"""The API server in trouble, through the real ``kubernetes`` client: watches refused while
lists still answer (a 5xx, a 429 of API Priority and Fairness, a 410 at once because the watch
cache lags, a proxy that cuts every stream), the API server restarting while a write lands, and
one that does not answer at all.

An informer must back off — not list every runner pod twice a second for as long as it lasts —
say so once, and say once that it is over. A call that gets no answer is tried once (the
controller has its own retries) and is one line at most, never urllib3's three ``Retrying``.
"""
from __future__ import annotations

import logging
import re
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gitscale.controller.cache import BACKOFF_MAX, Informer, Store, runner_pod_fields
from gitscale.controller import status as st
from gitscale.controller.create import CREATE_RETRY, WAVE_FAILURES, _made_anyway
from gitscale.controller.errors import KubeError
from gitscale.controller.kube import Kube
from gitscale.controller.kube_config import client_for, load
from gitscale.controller.loop import Controller
from gitscale.controller.observe import LABEL_SET
from gitscale.controller.platforms import Platforms
from tests.controller.harness import NS, Elapsed, Harness, buildkite_spec, start
from tests.controller.test_kube_config import kubeconfig
from tests.helpers import wait_for
from tests.kubeapi.proxy import BlackHoleProxy
from tests.kubeapi.server import KubeAPIServer, start_api_server

TROUBLE = 8  # watches refused in a row


class Waits(threading.Event):
    """The informer's stop event, recording each wait instead of sleeping it (the backoff is
    read, not timed); ``then`` runs at the ``TROUBLE``-th wait (the trouble ends)."""

    def __init__(self, then: Callable[[], None]) -> None:
        super().__init__()
        self.waits: list[float] = []
        self._then = then

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is not None and not self.is_set():
            self.waits.append(timeout)
            if len(self.waits) == TROUBLE:
                self._then()
        return self.is_set()


@pytest.fixture
def api() -> Iterator[KubeAPIServer]:
    server = start_api_server(bookmark_interval=0.1)
    server.create_object("pods", {"metadata": {"name": "p", "labels": {LABEL_SET: "rs"}},
                                  "spec": {"containers": [{"name": "runner", "image": "r:1"}]}},
                         NS)
    try:
        yield server
    finally:
        server.stop()


def _refuse(api: KubeAPIServer, how: str) -> Callable[[], None]:
    """Make every watch of pods fail ``how``; return what ends it."""
    if how == "cut":
        api.cut_watches_after = 0.0

        def end() -> None:
            api.cut_watches_after = None
        return end
    code, reason = {"500": (500, "InternalError"), "429": (429, "TooManyRequests"),
                    "410": (410, "Expired")}[how]
    api.inject_error("watch", "pods", code=code, reason=reason, times=10**6)
    return api.clear_errors


def _pod_informer(api: KubeAPIServer, stop: Waits) -> tuple[Kube, Informer]:
    """A pod informer of the real client against ``api``, backing off from 0.5 s."""
    kube = Kube(client_for(api.url))
    return kube, Informer("pods", Store(keep=runner_pod_fields),
                          lambda: kube.list_pods(NS, runner_pod_fields),
                          lambda v, t: kube.watch_pods(NS, v, t), lambda _: None, stop,
                          watch_timeout=30, backoff=0.5)


@pytest.mark.parametrize("how", ["500", "429", "410", "cut"])
def test_a_watch_refused_while_lists_answer_backs_off_and_is_said_once(
        api: KubeAPIServer, how: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "gitscale.controller")
    stop = Waits(_refuse(api, how))
    kube, informer = _pod_informer(api, stop)
    informer.start()
    try:
        wait_for(lambda: len(stop.waits) >= TROUBLE and informer.failures == 0, 20)
    finally:
        stop.set()
        kube.stop_watches()
        informer.thread.join(5)
        kube.close()
    # Each refused watch waits twice as long as the one before (it was 0.5 s every time: the
    # list before it succeeded, and that reset the count), up to BACKOFF_MAX.
    assert stop.waits == [0.5, 1, 2, 4, 8, 16, BACKOFF_MAX, BACKOFF_MAX]
    assert api.call_count("list", "pods") == TROUBLE + 1  # one list per attempt, no more
    said = [r for r in caplog.records if r.name == "gitscale.controller"]
    warnings = [r.getMessage() for r in said if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith("pods: "), warnings
    assert "(retrying in 0.5s)" in warnings[0]
    over = [r.getMessage() for r in said if "answers again" in r.getMessage()]
    assert over == [f"pods: the API server answers again, after {TROUBLE} failed attempt(s)"]
    assert not [r for r in caplog.records if r.exc_info]


def test_a_watch_that_expires_after_serving_lists_again_at_once(
        api: KubeAPIServer, caplog: pytest.LogCaptureFixture) -> None:
    """The usual 410 (a watch resumed past the API server's history) is no failure: listed
    again at once, no backoff, no warning."""
    caplog.set_level(logging.INFO, "gitscale.controller")
    stop = Waits(lambda: None)
    kube, informer = _pod_informer(api, stop)
    informer.start()
    try:
        wait_for(lambda: informer.synced.is_set() and api.call_count("watch", "pods"), 5)
        wait_for(lambda: informer._moved, 5)  # the watch served (a bookmark)
        api.inject_error("watch", "pods", code=410, reason="Expired",
                         message="too old resource version")
        api.drop_watches()  # resumed past the API server's history: 410
        wait_for(lambda: api.call_count("list", "pods") == 2, 5)
    finally:
        stop.set()
        kube.stop_watches()
        informer.thread.join(5)
        kube.close()
    assert stop.waits == [] and informer.failures == 0
    assert "pods: watch expired, listing again" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_list_answered_410_after_a_watch_expired_backs_off(
        api: KubeAPIServer, caplog: pytest.LogCaptureFixture) -> None:
    """The watch served, then expired (410: listed again at once); the list that follows is
    refused 410 too (its continue token expired while paging, every time: an API server too
    slow to page through before etcd compacts). That is a failure of the list, backed off as
    any other — not the watch's usual expiry, listed again at once for as long as it lasts."""
    caplog.set_level(logging.INFO, "gitscale.controller")
    stop = Waits(api.clear_errors)
    kube, informer = _pod_informer(api, stop)
    informer.start()
    try:
        wait_for(lambda: informer.synced.is_set() and informer._moved, 5)
        api.inject_error("list", "pods", code=410, reason="Expired",
                         message="the continue token expired", times=10**6)
        api.inject_error("watch", "pods", code=410, reason="Expired",
                         message="too old resource version")
        api.drop_watches()  # resumed past the API server's history: 410, listed again
        wait_for(lambda: len(stop.waits) >= TROUBLE and informer.failures == 0, 10)
    finally:
        stop.set()
        kube.stop_watches()
        informer.thread.join(5)
        kube.close()
    assert stop.waits == [0.5, 1, 2, 4, 8, 16, BACKOFF_MAX, BACKOFF_MAX]
    assert api.call_count("list", "pods") == 1 + TROUBLE + 1  # the first, refused, answered
    assert caplog.text.count("watch expired, listing again") == 1


@pytest.fixture
def running() -> Iterator[Harness]:
    yield from start(workers=True, resync=0.5, relist_backoff=0.05)


def test_an_api_server_restart_is_said_once_per_informer_and_the_write_meanwhile_applied(
        running: Harness, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "gitscale.controller")
    running.write("bk", 2, 0, spec=buildkite_spec())
    wait_for(lambda: len(running.pods("bk")) == 2, 10)
    old = running.api
    port, store, registry = old.server_address[1], old.store, old.registry
    old.stop()  # the API server goes down: connections refused ...
    wait_for(lambda: all(i.failures >= 3 for i in running.controller.informers), 20)
    new = KubeAPIServer(port=port)  # ... and comes back on its address, with its etcd
    new.store, new.registry = store, registry
    running.api = new.start()
    try:
        running.write("bk", 4, 1)  # Argo CD synced while it was down
        wait_for(lambda: len(running.pods("bk")) == 4, 30)
        wait_for(lambda: (s := running.status("bk")).get("appliedPatchID") == 1
                 and s["conditions"][0]["status"] == "True", 10)
        wait_for(lambda: all(i.failures == 0 for i in running.controller.informers), 10)
        records = list(caplog.records)
    finally:
        new.stop()
        running.api = old
    mine = [r for r in records if r.name == "gitscale.controller"]
    for informer in ("pods", "runnersets"):  # a streak: one warning, and one line at its end
        said = [r for r in mine if r.getMessage().startswith(f"{informer}: ")]
        assert len([r for r in said if r.levelno == logging.WARNING]) == 1, said
        assert len([r for r in said if "answers again" in r.getMessage()]) == 1, said
    assert not [r for r in records if r.exc_info]
    # Each failed call is said by the controller alone: no urllib3 retry, nor its warning.
    assert not [r for r in records if r.name.startswith("urllib3")], [
        r.getMessage() for r in records if r.name.startswith("urllib3")]
    # An Event lost to the outage blames the outage, not the Role.
    lost = [r.getMessage() for r in mine if "not posted" in r.getMessage()]
    assert all("Role" not in m for m in lost), lost


def _kube(how: str, url: str, tmp_path: Path, timeout: float = 30.0) -> Kube:
    """The controller's client as ``gitscale controller`` makes it (a kubeconfig), or as the
    tests and benchmarks do (a URL)."""
    if how == "kubeconfig":
        return Kube(load(str(kubeconfig(tmp_path / "K", url, {"token": "t0ken"}))),
                    timeout=timeout)
    return Kube(client_for(url), timeout=timeout)


@pytest.mark.parametrize("how", ["kubeconfig", "url"])
def test_a_call_to_an_api_server_that_is_down_is_tried_once_and_said_once(
        how: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Connections refused: each call fails once, with the cause, and logs nothing of its own
    (it was three ``Retrying (Retry(total=2, ...))`` warnings of urllib3 per call); the caller
    says it — a pass in its status and one line, an informer once per streak."""
    server = start_api_server()
    kube = _kube(how, server.url, tmp_path)
    server.stop()
    caplog.set_level(logging.DEBUG, "urllib3")
    try:
        for call in (lambda: kube.list_pods(NS), lambda: kube.create_pod({
                "metadata": {"namespace": NS, "name": "p"}, "spec": {"containers": []}}),
                lambda: kube.patch_runnerset_status(NS, "rs", {"replicas": 1})):
            with pytest.raises(KubeError) as caught:
                call()
            assert "the API server did not answer (NewConnectionError: Connection refused)" \
                in str(caught.value)
    finally:
        kube.close()
    retried = [r.getMessage() for r in caplog.records if "Retrying" in r.getMessage()]
    assert retried == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


class BlackHole:
    """A listener that accepts connections and never answers (an API server wedged, a
    firewall that holds): counts the connections made to it."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


@pytest.mark.parametrize("how", ["kubeconfig", "url"])
def test_a_read_that_times_out_is_not_sent_again(
        how: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A GET the API server never answers: one connection, one timeout (urllib3 sent it
    four times, each waiting out the timeout: a relist in an outage took 4 × 30 s)."""
    hole = BlackHole()
    kube = _kube(how, hole.url, tmp_path, timeout=0.3)
    caplog.set_level(logging.DEBUG, "urllib3")
    try:
        with pytest.raises(KubeError) as caught:
            kube.list_pods(NS)
    finally:
        kube.close()
        hole.close()
    assert str(caught.value) == ("list runner pods: the API server answered too slowly (no answer "
                                 "within 0.3s)")
    assert len(hole.accepted) == 1
    assert not [r for r in caplog.records if "Retrying" in r.getMessage()]


def test_a_kept_alive_connection_reset_when_reused_is_no_failure_for_a_read(
        caplog: pytest.LogCaptureFixture) -> None:
    """A load balancer's idle timeout (or a NAT table that dropped the flow) resets a
    kept-alive connection as it is reused: a GET or a DELETE is sent again, once, on a new
    connection, and succeeds, with nothing to say; a POST or a PATCH, which may have been
    applied, is not sent again: it fails, said once by the caller."""
    server = start_api_server()
    proxy = BlackHoleProxy(server.server_address).start()
    kube = Kube(client_for(proxy.url))
    caplog.set_level(logging.DEBUG, "urllib3")
    try:
        server.create_object("secrets", {"metadata": {"name": "s"}, "data": {}}, NS)
        kube.list_pods(NS)  # a connection is kept alive
        proxy.forget()
        assert kube.list_pods(NS)[0] == []  # sent again once, answered
        proxy.forget()
        kube.delete_secret(NS, "s")
        assert server.get_object("secrets", "s", NS) is None
        assert proxy.resets == 2
        kube.list_pods(NS)
        proxy.forget()
        with pytest.raises(KubeError) as caught:
            kube.create_secret({"metadata": {"namespace": NS, "name": "t"}, "data": {}})
        assert re.fullmatch(r"create Secret default/t: the API server did not answer "
                            r"\(ProtocolError: (Connection reset by peer|Remote end closed "
                            r"connection without response)\)", str(caught.value)), caught.value
        assert proxy.resets == 3 and server.call_count("create", "secrets") == 0
    finally:
        kube.close()
        proxy.stop()
        server.stop()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [
        r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len([r for r in caplog.records if r.getMessage().startswith("Retrying (")]) == 2


def test_a_cluster_without_the_crd_is_told_how_to_install_it(
        api: KubeAPIServer, caplog: pytest.LogCaptureFixture) -> None:
    """A 404 on the RunnerSets' list is a CRD that is not installed (the controller deployed
    before it, or its namespace's kustomization without it): the warning says so and how to
    install it, not only "the server could not find the requested resource"."""
    from gitscale.controller.loop import CRD_MISSING

    caplog.set_level(logging.INFO, "gitscale.controller")
    api.inject_error("list", "runnersets", code=404, reason="NotFound",
                     message="the server could not find the requested resource", times=2)
    kube = Kube(client_for(api.url))
    controller = Controller(kube, concurrency=1, relist_backoff=0.05)
    controller.start(workers=False)
    try:
        assert controller.synced(10)  # installed meanwhile: it lists on its own
        # both informers watching: a watch still being opened when the stop ends the open
        # ones would hold the stop 5 s (its join), for nothing this test checks
        wait_for(lambda: api.open_watches == 2, 5)
    finally:
        controller.stop()
        kube.close()
    warnings = [r.getMessage() for r in caplog.records
                if r.name == "gitscale.controller" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith("runnersets: "), warnings
    assert "could not find the requested resource" in warnings[0]
    assert f": {CRD_MISSING} (retrying in 0.05s)" in warnings[0]
    assert "gitscale crd | kubectl apply -f -" in CRD_MISSING


def test_an_api_server_gone_mid_wave_ends_the_creations_not_started(harness: Harness) -> None:
    """The API server goes away during a wave (a restart: connections refused). Every creation
    not started yet would meet that too, and each would first register its runner with GitHub,
    then unregister it: two content-creating requests a runner, where GitHub allows 80 a
    minute (a 60-runner wave sent 120, a 500-runner one 1,000, in a second). The first
    connection refused ends them, as a refusal of the API server does."""
    proxy = BlackHoleProxy(harness.api.server_address).start()  # the API server's address
    kube = Kube(client_for(proxy.url))
    controller = Controller(kube, clock=harness.clock, concurrency=4, platforms=Platforms(
        kube.read_secret, list_max_age=0, clock=Elapsed(harness.clock)))
    creations: list[str] = []

    def restart(verb: str, resource: str, query: dict[str, str]) -> None:
        if (verb, resource) == ("create", "pods") and "dryRun" not in query:
            creations.append(verb)
            if len(creations) == 3:
                proxy.stop()  # down: this answer lost, every connection after it refused
    harness.write("rs", 60, 1)
    controller.start(workers=False)
    try:
        assert controller.synced(5)
        wait_for(lambda: controller.runnersets.get(f"{NS}/rs"), 5)
        harness.api.on_call(restart)
        report = controller.reconcile(f"{NS}/rs")
    finally:
        controller.stop()
        kube.close()
    registered = harness.github.count("POST", "generate-jitconfig")
    assert registered <= 3 * 4, registered  # (a few for each of the 4 in flight, not 60)
    assert report.errors[0].startswith("create ") and "the API server did not answer" in \
        report.errors[0] and len(report.created) < 10


def test_a_pod_creation_that_made_no_connection_made_no_pod() -> None:
    """A creation that got no answer may have been stored: it is looked for, and when the
    look-up fails too, nobody knows (None: the registration stays, the next pass looks again).
    One that made no connection at all was never sent: surely no pod (False: undone at once),
    without a look-up that could not answer either."""
    with socket.socket() as sock:  # a port nothing listens on: connections refused
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    kube = Kube(client_for(url))
    try:
        no_answer = KubeError("create pod: the API server did not answer (reset)")
        refused = KubeError("create pod: the API server did not answer (refused)",
                            unreachable=True)
        assert _made_anyway(kube, NS, "rs-abc", no_answer) is None
        assert _made_anyway(kube, NS, "rs-abc", refused) is False
    finally:
        kube.close()


JIT = "generate-jitconfig"


@pytest.mark.parametrize("code, reason, retry_after, backoff", [
    pytest.param(503, "ServiceUnavailable", None, 10.0, id="503"),
    pytest.param(429, "TooManyRequests", 45, 45.0, id="429-retry-after"),
])
def test_an_api_server_failing_every_creation_ends_the_wave_and_comes_back_slowly(
        harness: Harness, code: int, reason: str, retry_after: int | None,
        backoff: float) -> None:
    """A brownout: the dry run passes, then every creation answers a 5xx (or a 429 of API
    Priority and Fairness). Each creation registers its runner with GitHub first and
    unregisters it when its Secret is refused: a 60-runner wave sent 60 registrations and 60
    removals in a second (a 500-runner one 1,000, where GitHub allows 80 a minute).
    ``WAVE_FAILURES`` server failures in a row end the wave's creations not started yet; the
    pass says so, waits its backoff (a 429's Retry-After when longer), and the next pass comes
    back in slow start."""
    harness.api.inject_error("create", "secrets", code=code, reason=reason, skip=1,
                             times=10**6, message="the server is busy",
                             retry_after=retry_after)  # (the dry run's Secret passes)
    harness.write("rs", 60, 1)
    report = harness.sync("rs")
    in_flight = 8  # the harness's --concurrency: creations started before the wave ended
    assert report.created == []
    registered = harness.github.count("POST", JIT)
    assert registered < WAVE_FAILURES + in_flight, registered
    assert harness.github.count("DELETE", "actions/runners/") == registered
    assert harness.github.runners == {}  # every registration undone
    cond = dict(st.ready_of(harness.status("rs")))
    assert cond["reason"] == "CreateFailed", cond
    assert f"{code} {reason}: the server is busy" in cond["message"]
    assert f"{60 - registered} more runner(s) not tried after {WAVE_FAILURES} failures of " \
           "the API server in a row" in cond["message"], cond["message"]
    assert report.requeue_after == backoff
    harness.api.clear_errors()  # over
    harness.sync("rs")  # within the backoff: nothing tried
    assert harness.github.count("POST", JIT) == registered
    harness.clock.advance(backoff)
    report = harness.sync("rs")  # slow start: batches of 1, 2, 4… 32, each one answered
    assert len(report.created) == 60 and report.errors == []
    assert harness.github.count("POST", JIT) == registered + 60


def test_a_few_server_failures_in_a_wave_do_not_end_it(harness: Harness) -> None:
    """A hiccup (fewer server failures in a row than end a wave): the other creations go on;
    the runners missing are made by the next pass, after the backoff of a failed pass, as
    before."""
    harness.api.inject_error("create", "pods", code=500, message="etcdserver: leader changed",
                             skip=1, times=WAVE_FAILURES - 1)  # (the dry run's pod passes)
    harness.write("rs", 60, 1)
    report = harness.sync("rs")
    assert len(report.created) == 60 - (WAVE_FAILURES - 1)
    assert harness.github.count("POST", JIT) == 60
    assert report.requeue_after == CREATE_RETRY
    harness.clock.advance(CREATE_RETRY)
    assert len(harness.sync("rs").created) == WAVE_FAILURES - 1
    assert len(harness.pods("rs")) == 60
