"""A deadline for each answer of the Kubernetes API, not only for each read of it.

urllib3's read timeout (the kubernetes client's ``_request_timeout=(connect, read)``) bounds
each wait on the socket, not the answer: an API server, or a proxy before it, that sends its
answer a byte at a time, each within the timeout, held a pass for as long as it kept going
(until ``/healthz`` found the pass 5 minutes without progress). ``bound`` makes the read
timeout the answer's deadline: its status line, headers and body all come within ``read``
seconds of the request being sent, however slowly they come; the next read after that fails
as a timeout (``Overdue``, the cause of urllib3's ``ReadTimeoutError``).

A watch is one long answer: its headers come within the read timeout, and its events within
``streaming(seconds)`` of the request (the watch's ``timeout_seconds`` and a margin), each read
waiting up to that, so a quiet watch is never cut before the API server ends it, and one that
goes silent, or trickles, past it ends there.

The deadline is set on each response as it is created (``http.client``'s documented
``response_class`` of a connection), so a stream read later keeps its own; ``streaming`` is
the calling thread's, for the requests it makes inside.
"""
from __future__ import annotations

import http.client
import io
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import urllib3
from urllib3.connectionpool import HTTPConnectionPool

_local = threading.local()


class Overdue(TimeoutError):
    """The answer was not whole by its deadline. ``seconds``: what it was given; ``started``:
    some of it had come (an answer too slow, rather than none)."""

    def __init__(self, seconds: float, started: bool) -> None:
        said = f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.2g}"  # (30, 0.3; a Lease
        # call's time left, 0.299 when connecting took 1 ms, is said 0.3)
        super().__init__(f"the answer was not whole within {said}s" if started
                         else f"no answer within {said}s")
        self.seconds = seconds
        self.started = started


@contextmanager
def streaming(seconds: float) -> Iterator[None]:
    """The requests this thread makes inside are streams (a watch): once their headers have
    come (within the read timeout), their body may take up to ``seconds`` from the request."""
    previous = getattr(_local, "stream", None)
    _local.stream = seconds
    try:
        yield
    finally:
        _local.stream = previous


def bound(manager: urllib3.PoolManager) -> None:
    """Every connection ``manager`` makes from now on gives each answer its deadline."""
    manager.clear()  # (no pool made before keeps unbounded connections)
    manager.pool_classes_by_scheme = {
        scheme: _bounded(cls) for scheme, cls in manager.pool_classes_by_scheme.items()}


_BOUNDED: dict[type[HTTPConnectionPool], type[HTTPConnectionPool]] = {}
_BOUNDED_LOCK = threading.Lock()


def _bounded(pool: type[HTTPConnectionPool]) -> type[HTTPConnectionPool]:
    """``pool``, whose connections read their answers through ``_Response`` (made once per
    pool class: plain, TLS, SOCKS)."""
    if getattr(pool.ConnectionCls, "response_class", None) is _Response:
        return pool
    with _BOUNDED_LOCK:
        if pool not in _BOUNDED:
            conn = type(pool.ConnectionCls.__name__, (pool.ConnectionCls,),
                        {"response_class": _Response})
            _BOUNDED[pool] = type(pool.__name__, (pool,), {"ConnectionCls": conn})
        return _BOUNDED[pool]


class _Response(http.client.HTTPResponse):
    """An answer read through ``_Reads``: by the deadline of its headers (the read timeout
    urllib3 set on the socket for it, from now: the request is sent), then of its body."""

    def __init__(self, sock: socket.socket, debuglevel: int = 0, method: str | None = None,
                 url: str | None = None) -> None:
        read = sock.gettimeout()
        stream: float | None = getattr(_local, "stream", None)
        self._reads: _Reads | None = None
        self._body_within = stream if stream is not None else read
        if read is not None or stream is not None:
            self._reads = _Reads(sock, time.monotonic(), read)
            sock = cast(socket.socket, _Maker(self._reads))
        super().__init__(sock, debuglevel, method, url)

    def begin(self) -> None:
        super().begin()
        if self._reads is not None:  # the headers came: the body's deadline
            self._reads.within(self._body_within)


class _Maker:
    """What ``http.client.HTTPResponse`` takes for its socket: it only asks for a file."""

    def __init__(self, reads: _Reads) -> None:
        self.reads = reads

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(self.reads)


class _Reads(io.RawIOBase):
    """The socket's reads, each waiting at most what is left before the deadline (``sent`` +
    ``seconds``), and at most ``seconds``; once it has passed, ``Overdue``. The socket's own
    timeout is put back when the answer is closed (the connection is kept for the next)."""

    def __init__(self, sock: socket.socket, sent: float, seconds: float | None) -> None:
        super().__init__()
        self._sock, self._sent, self._seconds = sock, sent, seconds
        self._timeout = sock.gettimeout()
        self._raw: Any = sock.makefile("rb", buffering=0)  # (counted, closed with the file)
        self._started = False

    def within(self, seconds: float | None) -> None:
        self._seconds = seconds

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        if self._seconds is None:
            got: int | None = self._raw.readinto(buffer)
            return got
        left = self._sent + self._seconds - time.monotonic()
        if left <= 0:
            raise Overdue(self._seconds, self._started)
        self._sock.settimeout(min(left, self._seconds))
        try:
            got = self._raw.readinto(buffer)
        except TimeoutError as exc:  # (``socket.timeout`` is one)
            raise Overdue(self._seconds, self._started) from exc
        self._started = self._started or bool(got)
        return got

    def close(self) -> None:
        if not self.closed:
            try:
                self._sock.settimeout(self._timeout)
            except OSError:  # (closed already)
                pass
            self._raw.close()
        super().close()
