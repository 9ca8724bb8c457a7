"""The HTTP side of `gitscale serve`: asyncio and h11 on one thread, built to keep taking
deliveries while hostile or broken clients hold connections open.

GitHub waits 10 s for an answer and does not redeliver by itself, so a delivery that cannot get
in is a lost job. A thread per connection lets a few silent peers fill every thread; here a
connection costs a socket and a few buffers, and every request has one deadline for all of it
(a client sending a byte at a time is cut off when it runs out, not kept while it trickles).
Connections are capped (each may buffer up to 25 MB before its signature can be checked), the
bytes buffered by unfinished requests are capped together, and the listen backlog is deep
enough for a burst of new connections.
"""
from __future__ import annotations

import asyncio
import json
import resource
import socket
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import h11

OFFLOAD = 256 * 1024  # bodies above this are checked on a worker thread, off the event loop


@dataclass(frozen=True)
class Limits:
    deadline: float = 10.0  # seconds for a whole request, from waiting for it to its last byte
    max_body: int = 25 * 1024 * 1024  # GitHub caps payloads at 25 MB
    buffered: int = 256 * 1024 * 1024  # bytes held by all unfinished requests together
    connections: int = 2048  # lowered to what the open-files limit allows
    backlog: int = 1024  # the kernel caps it at net.core.somaxconn
    header: int = 64 * 1024  # request line and headers


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # without the query string
    headers: dict[str, str]  # names lower-case
    body: bytes


@dataclass(frozen=True)
class Response:
    status: int
    body: dict[str, Any] = field(default_factory=dict)  # sent as JSON, unless ``raw`` is set
    raw: bytes | None = None  # sent as it is (e.g. /metrics)
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()  # more headers (``Allow`` with a 405)


Handler = Callable[[Request], Response]


class Refused(Exception):
    """Answer ``status`` and close the connection. ``request``: the refused request without
    its body, when its head was read (a body too large): the server's ``refused`` hook is told
    of it."""

    def __init__(self, status: int, message: str, request: Request | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.request = request


# Told of a request refused after its head was read: (status, reason, the request, no body).
RefusedHook = Callable[[int, str, Request], None]


class HttpServer:
    """``start()`` binds (raising OSError on a bad address) and serves on its own thread;
    ``stop()`` stops accepting, lets the requests in flight finish, and returns."""

    def __init__(self, host: str, port: int, handler: Handler, limits: Limits = Limits(),
                 report: Callable[[str], None] = lambda message: None,
                 offload: frozenset[str] = frozenset(),
                 refused: RefusedHook = lambda status, reason, request: None) -> None:
        self.handler = handler
        self.refused = refused  # e.g. serve logs a 413 as it logs its own rejections
        self.offload = offload  # paths answered on a worker thread (slow to build: /metrics)
        self.report = report  # told of unexpected errors (bugs), once each
        self.limits = limits
        self.max_connections = min(limits.connections, _open_files() - 64)
        self.sock = socket.create_server((host, port), backlog=limits.backlog)
        self.port: int = self.sock.getsockname()[1]
        self.loop = asyncio.new_event_loop()
        self.active = 0
        self.buffered = 0
        self.busy: set[asyncio.Task[None]] = set()  # connections with a request being read
        self.tasks: set[asyncio.Task[None]] = set()
        self.thread = threading.Thread(target=self._run, name="webhooks", daemon=True)
        self._started = threading.Event()
        self._server: asyncio.Server | None = None

    def start(self) -> int:
        self.thread.start()
        self._started.wait()
        return self.port

    def stop(self, grace: float = 5.0) -> None:
        if self.thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._stop(grace), self.loop).result(grace + 5)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
        self.sock.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self._server = self.loop.run_until_complete(
            asyncio.start_server(self._connection, sock=self.sock, limit=self.limits.header))
        self._started.set()
        self.loop.run_forever()
        self.loop.close()

    async def _stop(self, grace: float) -> None:
        assert self._server is not None
        self._server.close()  # no new connections
        for task in self.tasks - self.busy:
            task.cancel()  # idle between requests: nothing to finish
        if self.busy:
            await asyncio.wait(self.busy, timeout=grace)
        for task in self.tasks:
            task.cancel()
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=1)

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if self.active >= self.max_connections:
            await _close(writer, _raw(503, "too many connections"))
            return
        self.active += 1
        self.tasks.add(task)
        try:
            conn = h11.Connection(h11.SERVER, max_incomplete_event_size=self.limits.header)
            while await self._exchange(conn, reader, writer, task):
                conn.start_next_cycle()
        except (ConnectionError, asyncio.CancelledError):
            pass  # the client hung up, or the server is stopping
        except Exception as exc:  # noqa: BLE001 - one connection must not take the server
            self.report(f"webhook connection failed: unexpected {type(exc).__name__}: {exc} "
                        "(a bug: please report it)")
        finally:
            self.active -= 1
            self.tasks.discard(task)
            self.busy.discard(task)
            writer.close()

    async def _exchange(self, conn: h11.Connection, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter, task: asyncio.Task[None]) -> bool:
        """One request and its answer; False when the connection is to be closed."""
        held: list[int] = [0]
        try:
            try:
                async with asyncio.timeout(self.limits.deadline):
                    request = await self._read(conn, reader, writer, held, task)
            finally:
                self.buffered -= held[0]
        except TimeoutError:
            return False  # nobody waits for an answer from a client this slow
        except Refused as exc:
            if exc.request is not None:
                self.refused(exc.status, str(exc), exc.request)
            await _close(writer, _raw(exc.status, str(exc)))
            return False
        except h11.RemoteProtocolError as exc:  # the message would echo what the client sent
            await _close(writer, _raw(exc.error_status_hint, "malformed HTTP request"))
            return False
        if request is None:
            return False
        if len(request.body) > OFFLOAD or request.path in self.offload:
            response = await asyncio.get_running_loop().run_in_executor(
                None, self.handler, request)
        else:
            response = self.handler(request)
        self.busy.discard(task)
        data = response.raw if response.raw is not None else json.dumps(response.body).encode()
        headers = [("Content-Type", response.content_type), ("Content-Length", str(len(data))),
                   *response.headers]
        events: list[Any] = [h11.Response(status_code=response.status, headers=headers,
                                          reason=_reason(response.status))]
        if request.method != "HEAD":
            events.append(h11.Data(data=data))
        events.append(h11.EndOfMessage())
        # One write: a response split in segments meets the client's delayed ACK (40 ms).
        writer.write(b"".join(conn.send(event) or b"" for event in events))
        try:
            async with asyncio.timeout(self.limits.deadline):
                await writer.drain()
        except TimeoutError:
            return False
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    async def _read(self, conn: h11.Connection, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter, held: list[int],
                    task: asyncio.Task[None]) -> Request | None:
        head: h11.Request | None = None
        chunks: list[bytes] = []
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(65536)
                if data:
                    self.busy.add(task)  # from its first byte, a request is let finish
                conn.receive_data(data)
            elif isinstance(event, h11.Request):
                head = event
                length = _content_length(event)
                if length is not None and length > self.limits.max_body:
                    raise Refused(413, "payload too large", _head(event))
                if conn.they_are_waiting_for_100_continue:
                    go_on = h11.InformationalResponse(status_code=100, headers=[],
                                                      reason=b"Continue")
                    writer.write(conn.send(go_on) or b"")
            elif isinstance(event, h11.Data):
                held[0] += len(event.data)
                self.buffered += len(event.data)
                if held[0] > self.limits.max_body:
                    raise Refused(413, "payload too large", _head(head))
                if self.buffered > self.limits.buffered:
                    raise Refused(503, "too many large requests at once", _head(head))
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                return _head(head, b"".join(chunks))
            else:  # ConnectionClosed, or PAUSED after an answer (not reached)
                return None


def _head(head: h11.Request | None, body: bytes = b"") -> Request:
    """The Request of h11's head (none read yet: an empty one) and ``body``."""
    if head is None:
        return Request("", "", {}, body)
    target = head.target.decode("latin-1")
    return Request(head.method.decode("latin-1"), target.split("?")[0],
                   {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in head.headers},
                   body)


def _content_length(event: h11.Request) -> int | None:
    for name, value in event.headers:
        if name == b"content-length":
            return int(value)  # h11 has checked it is a number
    return None


def _reason(status: int) -> bytes:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


def _raw(status: int, message: str) -> bytes:
    body = json.dumps({"error": message}).encode()
    return (f"HTTP/1.1 {status} ".encode() + _reason(status) + b"\r\nContent-Type: "
            b"application/json\r\nConnection: close\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


async def _close(writer: asyncio.StreamWriter, data: bytes) -> None:
    """Answer a refused request, if the client still listens, and hang up."""
    try:
        writer.write(data)
        async with asyncio.timeout(1):
            await writer.drain()
    except (ConnectionError, TimeoutError):
        pass
    writer.close()


def _open_files() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20
