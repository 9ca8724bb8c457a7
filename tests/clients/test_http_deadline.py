"""The one HTTP client against an API that answers too slowly to finish, on loopback: headers or
a body trickled a byte at a time (each byte well within the read timeout, which is per read),
and a host name whose resolution does not answer (outside the connect timeout in httpx). Each
ends as ``Unreachable`` naming the cause, within the request's deadline."""
from __future__ import annotations

import socket
import threading
from typing import Any

import pytest

from gitscale.clients.errors import Unreachable
from gitscale.clients.http import DEADLINE_TIMEOUTS, HttpClient

from tests.clients.test_http import add_runs, make_client, runs_url
from tests.demand.fake_github import FakeGitHub


@pytest.mark.parametrize("trickled", ["headers", "body"])
def test_an_answer_trickled_a_byte_at_a_time_ends_at_the_deadline(github: FakeGitHub,
                                                                  trickled: str) -> None:
    add_runs(github, 1)
    github.fail("trickle", trickled=trickled, delay=0.05)
    client = make_client(github, timeout=0.5, retries=1)
    with pytest.raises(Unreachable) as caught:
        client.get(runs_url(github))
    seconds = DEADLINE_TIMEOUTS * 0.5
    assert str(caught.value) == (
        f"github ({github.url}): GET {runs_url(github)} failed: timed out: the answer from "
        f"{github.url.removeprefix('http://')} was not whole within {seconds:g}s (it came "
        "too slowly) (after 2 tries)")
    assert caught.value.timed_out is False  # (set by ``send`` only)
    assert len(github.log) == 2  # a GET is tried again, each try within its own deadline


def test_a_courtesy_call_to_a_trickling_server_ends_at_its_deadline(github: FakeGitHub) -> None:
    """A notification after a push (``send``): its own timeout, three times, for the whole."""
    github.fail("trickle", trickled="body", delay=0.05)
    with pytest.raises(Unreachable) as caught:
        HttpClient(name="notify").send("POST", runs_url(github), content=b"{}",
                                       headers={"Content-Type": "application/json"},
                                       timeout=0.4)
    assert caught.value.timed_out
    assert caught.value.cause == (f"timed out: the answer from "
                                  f"{github.url.removeprefix('http://')} was not whole within "
                                  f"{DEADLINE_TIMEOUTS * 0.4:g}s (it came too slowly)")


def test_an_answer_slower_than_a_timeout_but_within_the_deadline_is_read(
        github: FakeGitHub) -> None:
    """The deadline ends what cannot finish, not what is merely slow: a body whose bytes all
    arrive, in more time than one timeout, is read."""
    github.add_repo("acme", "app")
    github.fail("trickle", body=b'{"total_count": 1}', delay=0.05)  # 0.9 s, 18 bytes
    answer = make_client(github, timeout=0.5).get(runs_url(github))
    assert answer.status == 200 and answer.body == {"total_count": 1}


def test_a_name_that_does_not_resolve_in_time_is_said_within_the_connect_timeout() -> None:
    """getaddrinfo blocks as long as the resolver retries (minutes, with a pod's search
    domains and a DNS that does not answer): it is waited for the timeout, no longer."""
    release = threading.Event()

    def silent_dns(host: str, port: int) -> list[tuple[Any, ...]]:
        release.wait(30)  # (a resolver that does not answer; freed at the end of the test)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
    client = HttpClient(name="api", timeout=0.3, retries=0, resolve=silent_dns)
    try:
        with pytest.raises(Unreachable) as caught:
            client.get("https://api.example.test/x")
    finally:
        release.set()
    assert str(caught.value) == ("api: GET https://api.example.test/x failed: DNS resolution of "
                                 "api.example.test gave no answer within 0.3s")


def test_a_name_is_resolved_by_the_resolver_and_connected_to(github: FakeGitHub) -> None:
    """The name is resolved by the resolver, in a thread of its own, and its addresses are
    tried in order (a refused one is skipped)."""
    add_runs(github, 1)
    port = github.server.server_address[1]
    asked: list[str] = []

    def hosts(host: str, port: int) -> list[tuple[Any, ...]]:
        asked.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.3", 1)),
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]
    client = HttpClient(name="api", timeout=2.0, retries=0, resolve=hosts,
                        headers=make_client(github).headers)
    answer = client.get(f"http://api.example.test:{port}/repos/acme/app/actions/runs")
    assert answer.body["total_count"] == 1
    assert asked == ["api.example.test"]
    assert [r.status for r in github.log] == [200]
