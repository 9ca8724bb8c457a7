"""``?watch=true``: newline-delimited JSON events over a chunked response.

Semantics follow the real API server:
- ``resourceVersion`` unset or ``"0"`` (or ``sendInitialEvents=true``): synthetic ADDED events
  for every matching object, then changes; otherwise changes after that version, or a single
  ERROR event carrying a 410 Expired Status when the history no longer reaches back that far;
- label/field selectors filter events; a MODIFIED event that makes an object start (stop)
  matching is sent as ADDED (DELETED), so a filtered cache stays right;
- ``timeoutSeconds`` ends the stream cleanly; ``allowWatchBookmarks`` adds BOOKMARK events every
  ``server.bookmark_interval`` seconds (and the initial-events-end bookmark);
- the stream ends when the client goes away, when the server stops, or on ``drop_watches()``.
"""
from __future__ import annotations

import json
import select
import socket
import time
from http.server import BaseHTTPRequestHandler
from io import BufferedIOBase
from typing import TYPE_CHECKING, Any, Iterator

from tests.kubeapi.errors import APIError, bad_request, expired
from tests.kubeapi.resources import ResourceType
from tests.kubeapi.selectors import Matcher, matcher
from tests.kubeapi.store import WatchEvent

if TYPE_CHECKING:
    from tests.kubeapi.server import KubeAPIServer

_POLL = 0.2  # how often an idle stream checks its client, its deadline and the stop flag


class _ChunkWriter:
    def __init__(self, wfile: BufferedIOBase) -> None:
        self.wfile = wfile

    def event(self, kind: str, obj: Any) -> None:
        data = json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def _client_gone(sock: socket.socket) -> bool:
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def _bookmark(rt: ResourceType, rv: int, *, initial_end: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}


def _translate(event: WatchEvent, rt: ResourceType, match: Matcher) -> Iterator[tuple[str, Any]]:
    if event.rt != rt:
        return
    now = match(event.obj)
    if event.type != "MODIFIED":
        if now:
            yield event.type, event.obj
        return
    was = event.old is not None and match(event.old)
    if now:
        yield ("MODIFIED" if was else "ADDED"), event.obj
    elif was:
        yield "DELETED", event.obj


def serve_watch(handler: BaseHTTPRequestHandler, server: KubeAPIServer, rt: ResourceType,
                namespace: str | None, name: str | None, params: dict[str, str]) -> None:
    """Answer one watch request; a bad parameter raises APIError before any byte is sent."""
    field_selector = params.get("fieldSelector") or ""
    if name:  # the legacy /watch/.../{name} form
        field_selector = ",".join(filter(None, [field_selector, f"metadata.name={name}"]))
    match = matcher(rt, namespace, params.get("labelSelector"), field_selector)
    try:
        timeout = float(params["timeoutSeconds"]) if params.get("timeoutSeconds") else None
    except ValueError:
        raise bad_request(f"invalid timeoutSeconds {params['timeoutSeconds']!r}") from None
    rv_param = params.get("resourceVersion") or ""
    send_initial = params.get("sendInitialEvents") in ("true", "1")
    if rv_param not in ("", "0") and not rv_param.isdigit():
        raise bad_request(f"invalid resource version {rv_param!r}")
    stream = _Stream(handler, server, rt, match, timeout,
                     bookmarks=params.get("allowWatchBookmarks") in ("true", "1"))
    store = server.store
    with store.lock:
        if rv_param in ("", "0") or send_initial:
            stream.initial = store.snapshot(rt, match)
            stream.since = store.resource_version
        else:
            stream.since = int(rv_param)
            if stream.since < store.compacted_rv:
                stream.gone = expired(f"too old resource version: {stream.since} "
                                      f"({store.compacted_rv})")
        stream.epoch = server.watch_epoch
        server.open_watches += 1
    try:
        stream.run(initial_end_bookmark=send_initial)
    finally:
        with store.changed:
            server.open_watches -= 1
            store.changed.notify_all()


class _Stream:
    def __init__(self, handler: BaseHTTPRequestHandler, server: KubeAPIServer, rt: ResourceType,
                 match: Matcher, timeout: float | None, *, bookmarks: bool) -> None:
        self.handler, self.server, self.rt, self.match = handler, server, rt, match
        self.timeout, self.bookmarks = timeout, bookmarks
        self.since = 0
        self.epoch = 0
        self.initial: list[dict[str, Any]] = []
        self.gone: APIError | None = None
        self.out = _ChunkWriter(handler.wfile)

    def run(self, *, initial_end_bookmark: bool) -> None:
        self.handler.send_response(200)
        self.handler.send_header("Content-Type", "application/json")
        self.handler.send_header("Transfer-Encoding", "chunked")
        self.handler.end_headers()
        try:
            if self.gone is not None:
                self.out.event("ERROR", self.gone.status())
            else:
                for obj in self.initial:
                    self.out.event("ADDED", obj)
                if initial_end_bookmark and self.bookmarks:
                    self.out.event("BOOKMARK", _bookmark(self.rt, self.since, initial_end=True))
                self._follow()
            self.out.end()
        except OSError:  # the client went away
            self.handler.close_connection = True

    def _follow(self) -> None:
        server, store = self.server, self.server.store
        start = time.monotonic()
        deadline = start + self.timeout if self.timeout else None
        if server.cut_watches_after is not None:
            cut = start + server.cut_watches_after
            deadline = cut if deadline is None else min(deadline, cut)
        next_bookmark = start + server.bookmark_interval
        while True:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return
            wait = _POLL if deadline is None else min(_POLL, deadline - now)
            if self.bookmarks:
                wait = min(wait, max(next_bookmark - now, 0))
            error: APIError | None = None
            events: list[WatchEvent] = []
            with store.changed:
                if store.resource_version <= self.since and not server.stopping and wait > 0:
                    store.changed.wait(wait)
                if server.stopping or server.watch_epoch != self.epoch:
                    return
                try:
                    events = store.events_since(self.since)
                except APIError as exc:  # fell out of the history window while streaming
                    error = exc
            if error is not None:
                self.out.event("ERROR", error.status())
                return
            for event in events:
                for kind, obj in _translate(event, self.rt, self.match):
                    self.out.event(kind, obj)
                self.since = event.rv
            if self.bookmarks and time.monotonic() >= next_bookmark:
                self.out.event("BOOKMARK", _bookmark(self.rt, self.since))
                next_bookmark = time.monotonic() + server.bookmark_interval
            if not events and _client_gone(self.handler.connection):
                raise BrokenPipeError("watch client disconnected")
