"""The API server in trouble, through the real ``kubernetes`` client: watches refused while
lists still answer (a 5xx, a 429 of API Priority and Fairness, a 410 at once because the watch
cache lags, a proxy that cuts every stream), and the API server restarting while a write lands.

An informer must back off — not list every runner pod twice a second for as long as it lasts —
say so once, and say once that it is over.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

import pytest

from gitscale.controller.cache import BACKOFF_MAX, Informer, Store, runner_pod_fields
from gitscale.controller.kube import Kube
from gitscale.controller.kube_config import client_for
from gitscale.controller.observe import LABEL_SET
from tests.controller.harness import NS, Harness, buildkite_spec, start
from tests.helpers import wait_for
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


@pytest.mark.parametrize("how", ["500", "429", "410", "cut"])
def test_a_watch_refused_while_lists_answer_backs_off_and_is_said_once(
        api: KubeAPIServer, how: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "gitscale.controller")
    stop = Waits(_refuse(api, how))
    kube = Kube(client_for(api.url))
    informer = Informer("pods", Store(keep=runner_pod_fields),
                        lambda: kube.list_pods(NS, runner_pod_fields),
                        lambda v, t: kube.watch_pods(NS, v, t), lambda _: None, stop,
                        watch_timeout=30, backoff=0.5)
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
    kube = Kube(client_for(api.url))
    informer = Informer("pods", Store(keep=runner_pod_fields),
                        lambda: kube.list_pods(NS, runner_pod_fields),
                        lambda v, t: kube.watch_pods(NS, v, t), lambda _: None, stop,
                        watch_timeout=30, backoff=0.5)
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
    # An Event lost to the outage blames the outage, not the Role.
    lost = [r.getMessage() for r in mine if "not posted" in r.getMessage()]
    assert all("Role" not in m for m in lost), lost
