"""`gitscale serve`: workflow_job webhooks → capacity reservations → one commit per window.

Deliveries are verified, de-duplicated and queued by the HTTP thread; a batch thread wakes every
``--window``, applies the queued events to the reservations file in the config repo, recomputes
the webhook-fed sets from their reservations, and lands manifests and reservations in one commit
(with the same push-race handling as `reconcile`). A failed batch keeps its events and is
retried with backoff. ``GET /healthz`` reports the queue and the last batch.
"""
from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


from gitscale.cache import StateCache, default_cache_dir
from gitscale.commands import EXIT_OK, RepoOptions, log, stop_on_signals
from gitscale.config import Config, load_config
from gitscale.core.reservations import Book, apply
from gitscale.demand import DemandReading
from gitscale.demand.secrets import SecretError, read_secret
from gitscale.engine import Plan, compute_plan
from gitscale.errors import GitscaleError, InputError
from gitscale.git import redact
from gitscale.landing import describe_landing, land
from gitscale.reservations_file import read_books, render_books
from gitscale.timeutil import format_time, parse_duration, utcnow
from gitscale.webhook import (MAX_BODY, Deliveries, JobEvent, Rejected, parse, route,
                              to_event, verify)
from gitscale.workspace import Workspace, open_workspace

MAX_BACKOFF = 300.0
CLIENT_TIMEOUT = 30.0  # seconds a client may stall: a silent one would hold its thread forever


@dataclass
class Batcher:
    """Events waiting for the next window, and what /healthz reports."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    pending: list[JobEvent] = field(default_factory=list)
    last_batch: str | None = None
    last_error: str | None = None
    failures: int = 0
    commits: int = 0

    def add(self, event: JobEvent) -> None:
        with self.lock:
            self.pending.append(event)

    def take(self) -> list[JobEvent]:
        with self.lock:
            taken, self.pending = self.pending, []
            return taken

    def give_back(self, events: list[JobEvent]) -> None:
        with self.lock:
            self.pending = events + self.pending  # keep delivery order

    def health(self) -> dict[str, Any]:
        with self.lock:
            return {"status": "degraded" if self.failures else "ok",
                    "pending_events": len(self.pending), "last_batch": self.last_batch,
                    "last_error": self.last_error, "commits": self.commits}


def make_handler(secret: bytes, batcher: Batcher, deliveries: Deliveries,
                 path: str, clock: Callable[[], datetime]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "gitscale"
        timeout = CLIENT_TIMEOUT

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.split("?")[0] in ("/healthz", "/readyz"):
                self._reply(200, batcher.health())
            else:
                self._reply(404, {"error": "not found"})

        def do_POST(self) -> None:  # noqa: N802
            if self.path.split("?")[0] != path:
                self._reply(404, {"error": "not found"})
                return
            try:
                raw_length = self.headers.get("Content-Length", "-1").strip()
                length = int(raw_length) if raw_length.isascii() and raw_length.isdigit() else -1
                if not 0 <= length <= MAX_BODY:
                    raise Rejected(413 if length > MAX_BODY else 411, "bad Content-Length")
                body = self.rfile.read(length)
                verify(secret, body, self.headers.get("X-Hub-Signature-256"))
                kind = self.headers.get("X-GitHub-Event", "")
                if kind == "ping":
                    self._reply(200, {"ok": "pong"})
                    return
                if kind != "workflow_job":
                    self._reply(202, {"ignored": f"event {kind!r}"})
                    return
                delivery = self.headers.get("X-GitHub-Delivery", "")
                if delivery and not deliveries.first_time(delivery):
                    self._reply(200, {"ignored": "duplicate delivery"})
                    return
                event = parse(body, clock())
                if event is not None:
                    batcher.add(event)
                self._reply(202, {"accepted": event is not None})
            except Rejected as exc:
                self._reply(exc.status, {"error": str(exc)})

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client hung up: no one to tell, no traceback

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # one line per batch is logged instead of one per delivery

    return Handler


def batch_plan(ws: Workspace, opts: RepoOptions, events: list[JobEvent], now: datetime,
               duration: timedelta, state_path: str, cache: StateCache) -> Plan:
    """Apply ``events`` to the reservations in the repo and plan the webhook-fed sets."""
    config: Config = load_config(ws.root, opts.config, cache.configs)
    old_text, books = read_books(ws.root, state_path)
    routed: dict[str, list[Any]] = {}
    counts: Counter[str] = Counter()
    for event in events:
        name = route(event, config.sets)
        if name is not None:
            routed.setdefault(name, []).append(to_event(event, name))
            counts[event.action.value] += 1
    reading = DemandReading()
    webhook_sets = {s.name for s in config.sets if s.source.kind == "github"}
    # A set removed from gitscale.yaml (or fed otherwise now) takes its reservations with it:
    # nothing would ever expire them.
    books = {name: book for name, book in books.items() if name in webhook_sets}
    for runner_set in config.sets:
        if runner_set.name not in webhook_sets:
            continue
        _, hi, _ = runner_set.policy.bounds(now)
        books[runner_set.name] = apply(books.get(runner_set.name, Book()),
                                       routed.get(runner_set.name, []), now, duration, hi)
        reading.demands[runner_set.name] = books[runner_set.name].demand()
    plan = compute_plan(ws.root, config, reading, now, ws.base(), only=webhook_sets, cache=cache)
    new_text = render_books(books)
    if new_text != old_text and (old_text or any(b.reservations or b.completed
                                                 for b in books.values())):
        plan.files[state_path] = (old_text, new_text)
    plan.events = dict(counts)
    return plan


class BoundedServer(ThreadingHTTPServer):
    """At most MAX_CONNECTIONS deliveries in flight: each may hold up to 25 MB before its
    signature can be checked, so unauthenticated clients must not get unlimited threads."""

    MAX_CONNECTIONS = 32

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slots = threading.BoundedSemaphore(self.MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(timeout=5):
            self.shutdown_request(request)  # busy: GitHub redelivers failed deliveries
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def run_serve(opts: RepoOptions, *, listen: str, path: str, window: str, reservation: str,
              secret_env: str, secret_file: str | None, state_file: str,
              stop: threading.Event | None = None,
              ready: Callable[[int], None] | None = None) -> int:
    try:
        window_s = parse_duration(window).total_seconds()
        duration = parse_duration(reservation)
    except ValueError as exc:
        raise InputError("--window/--reservation", str(exc)) from None
    ref = {"file": secret_file} if secret_file else {"env": secret_env}
    try:
        secret = read_secret(ref, "webhook secret").encode()
    except SecretError as exc:
        raise InputError("webhook secret", str(exc)) from None
    host, _, port = listen.rpartition(":")
    if not (port.isascii() and port.isdigit() and len(port) <= 5):
        raise InputError("--listen", f"{listen!r} is not HOST:PORT")
    if state_file.startswith("/") or ".." in state_file.split("/"):
        raise InputError("--state-file", f"{state_file!r} must be a path inside the config repo")
    stop = stop or stop_on_signals("writing the last batch")
    batcher = Batcher()
    try:
        server = BoundedServer((host or "127.0.0.1", int(port)),
                               make_handler(secret, batcher, Deliveries(), path, utcnow))
    except (OSError, OverflowError) as exc:  # in use, no such address, port above 65535
        raise InputError("--listen", f"cannot listen on {listen}: {exc}") from None
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="webhooks", daemon=True)
    thread.start()
    log(f"listening on {host or '127.0.0.1'}:{server.server_address[1]}{path}; "
         f"one commit per {window} window")
    if ready:
        ready(server.server_address[1])
    cache = StateCache.load(default_cache_dir())
    try:
        with open_workspace(opts.repo, opts.branch) as ws:
            next_expiry_check = time.monotonic() + 60
            while not stop.is_set():
                delay = window_s if not batcher.failures else min(
                    MAX_BACKOFF, window_s * 2 ** batcher.failures)
                stop.wait(delay)
                events = batcher.take()
                if not events and time.monotonic() < next_expiry_check:
                    continue
                next_expiry_check = time.monotonic() + 60
                _batch(ws, opts, batcher, events, duration, state_file, cache)
            leftover = batcher.take()  # a last batch so accepted deliveries are not lost
            if leftover:
                _batch(ws, opts, batcher, leftover, duration, state_file, cache)
    finally:
        server.shutdown()
        server.server_close()
        cache.save()
    log("stopped")
    return EXIT_OK


def _batch(ws: Workspace, opts: RepoOptions, batcher: Batcher, events: list[JobEvent],
           duration: timedelta, state_file: str, cache: StateCache) -> None:
    now = utcnow()
    try:
        if ws.mode == "clone":
            ws.sync()
        landed = land(ws, lambda: batch_plan(ws, opts, events, now, duration, state_file, cache))
    except Exception as exc:  # noqa: BLE001 - a server must outlive one bad batch
        # Keep the events whatever went wrong (a full disk is not a GitscaleError) and retry
        # with backoff; an unexpected error is a bug and says so.
        batcher.give_back(events)
        what = str(exc) if isinstance(exc, GitscaleError) else \
            f"unexpected {type(exc).__name__}: {exc} (a bug: please report it)"
        with batcher.lock:
            batcher.failures += 1
            batcher.last_error = redact(what)
        log(f"batch of {len(events)} events failed ({batcher.failures} in a row, kept for the "
            f"next try): {redact(what)}")
        return
    with batcher.lock:
        batcher.failures = 0
        batcher.last_error = None
        batcher.last_batch = format_time(now)
        batcher.commits += 1 if landed.commit else 0
    if events or landed.commit:
        log(f"batch of {len(events)} events: {describe_landing(landed, ws)}")
