"""The HTTP server of `gitscale serve` on its own (gitscale/http_server.py): real sockets on
127.0.0.1, a handler that echoes what it got."""
from __future__ import annotations

import socket
import threading
from typing import Iterator

import pytest

from gitscale.http_server import HttpServer, Limits, Request, Response


@pytest.fixture
def server() -> Iterator[tuple[int, list[str]]]:
    reports: list[str] = []

    def handle(request: Request) -> Response:
        if request.path == "/boom":
            raise RuntimeError("a bug")
        return Response(200, {"method": request.method, "length": len(request.body)})

    http = HttpServer("127.0.0.1", 0, handle, Limits(deadline=2, max_body=1000, buffered=1500),
                      report=reports.append)
    yield http.start(), reports
    http.stop()


def exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        return sock.makefile("rb").read()


@pytest.mark.parametrize(("request_bytes", "answer"), [
    pytest.param(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                 b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 31\r\n"
                 b"Connection: close\r\n\r\n", id="head-has-no-body"),
    pytest.param(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                 b"Connection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
                 b'{"method": "POST", "length": 3}', id="chunked"),
    pytest.param(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n"
                 b"Connection: close\r\n\r\nabc", b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK",
                 id="expect-100-continue"),
    pytest.param(b"GET / HTTP/1.0\r\n\r\n", b'{"method": "GET", "length": 0}', id="http-1.0"),
    pytest.param(b"<script>\r\n\r\n", b'HTTP/1.1 400 Bad Request', id="malformed"),
    pytest.param(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n",
                 b"HTTP/1.1 413", id="declared-too-large"),
    pytest.param(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n"
                 + b"a" * 1001 + b"\r\n", b"HTTP/1.1 413", id="chunked-too-large"),
])
def test_requests(server: tuple[int, list[str]], request_bytes: bytes, answer: bytes) -> None:
    port, reports = server
    got = exchange(port, request_bytes)
    assert got.startswith(answer) or got.endswith(answer), got
    assert b"<script>" not in got  # nothing the client sent is echoed back
    assert reports == []


def test_pipelined_requests_are_answered_in_order(server: tuple[int, list[str]]) -> None:
    port, _ = server
    got = exchange(port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab"
                         b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert got.count(b"HTTP/1.1 200 OK") == 2
    assert got.index(b'"POST"') < got.index(b'"GET"')


def test_a_handler_bug_is_reported_and_the_server_goes_on(server: tuple[int, list[str]]) -> None:
    port, reports = server
    assert exchange(port, b"GET /boom HTTP/1.1\r\nHost: x\r\n\r\n") == b""
    assert reports and "RuntimeError: a bug" in reports[0] and "please report" in reports[0]
    assert b"200 OK" in exchange(port, b"GET / HTTP/1.0\r\n\r\n")


def test_bytes_buffered_by_unfinished_requests_are_capped(server: tuple[int, list[str]]) -> None:
    """Each request may hold up to max_body before its signature can be checked; together they
    may not hold more than `buffered` (1500 here): the one that would go past it gets 503."""
    port, _ = server
    first = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        first.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b"a" * 900)
        ready = threading.Event()
        threading.Timer(0.2, ready.set).start()
        ready.wait()  # the server has buffered those 900 bytes
        got = exchange(port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
                             + b"b" * 1000)
        assert got.startswith(b"HTTP/1.1 503"), got
        first.sendall(b"a" * 100)
        assert b'"length": 1000' in first.recv(1000)
    finally:
        first.close()
    # the budget is given back: a request of the full size fits again
    got = exchange(port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
                         b"Connection: close\r\n\r\n" + b"c" * 1000)
    assert b'"length": 1000' in got
