"""serve's stop with a resync poll in flight: the poll's thread uses the kept clients (and their
ETag caches), so they are saved and closed only once it is done — or, when it is still running
after the grace, not by the stop (saving a dict the poll is filling could crash it): the poll
saves them itself when done, before the process exits."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from gitscale.demand.resolve import Sources
from gitscale.metrics import LoopMetrics
from gitscale.plan.cache import StateCache
from gitscale.webhooks.resync import Listing
from gitscale.webhooks.resyncer import Resyncer
from gitscale.webhooks.served import Serving


class Client:
    """A kept client (``demand.resolve.Kept``) whose answers a poll is still adding to."""

    def __init__(self) -> None:
        self.answers: dict[str, int] = {}
        self.saved: dict[str, int] | None = None
        self.closed = False

    def save(self) -> None:
        self.saved = dict(self.answers)

    def close(self) -> None:
        self.closed = True


def resyncer(client: Client) -> Resyncer:
    sources = Sources(None, clients={("github",): client})
    return Resyncer(1.0, sources, "gitscale.yaml", StateCache(None), LoopMetrics(webhooks=True),
                    Serving(), pool=ThreadPoolExecutor(1))


def poll(client: Client, release: threading.Event) -> Listing:
    release.wait(10)
    client.answers["/orgs/acme/actions/runs"] = 1  # the last answer, stored as it finishes
    raise RuntimeError("not needed: the listing is never taken")


@pytest.mark.parametrize("finishes", [True, False])
def test_a_poll_in_flight_is_waited_for_before_its_clients_are_saved(
        finishes: bool, capsys: pytest.CaptureFixture[str]) -> None:
    client, release = Client(), threading.Event()
    syncer = resyncer(client)
    syncer.future = syncer.pool.submit(poll, client, release)
    if finishes:
        threading.Timer(0.2, release.set).start()
    syncer.close(grace=2.0 if finishes else 0.2)
    if finishes:  # saved after the poll's last answer, then closed
        assert client.saved == {"/orgs/acme/actions/runs": 1} and client.closed
    else:  # never saved or closed under the poll; the stop says so
        assert client.saved is None and not client.closed
        assert "a poll still running 0.2 s after the stop; the process exits once it is done" \
            in capsys.readouterr().err
        release.set()


def test_without_a_poll_the_clients_are_saved_at_once() -> None:
    client = Client()
    syncer = resyncer(client)
    syncer.close(grace=0.0)
    assert client.saved == {} and client.closed
