"""`gitscale serve`: workflow_job webhooks → capacity reservations → one commit per window.

Deliveries are verified, de-duplicated and queued by the HTTP thread; a batch thread wakes every
``--window``, applies the queued events to the reservations file in the config repo, recomputes
the webhook-fed sets from their reservations, and lands manifests and reservations in one commit
(with the same push-race handling as `reconcile`). A failed batch keeps its events and is
retried with backoff. ``GET /healthz`` reports the queue and the last batch.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
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
from gitscale.webhook_http import Handler, HttpServer, Limits, Request, Response
from gitscale.workspace import Workspace, open_workspace

MAX_BACKOFF = 300.0
# GitHub gives up on a delivery after 10 s and does not redeliver it by itself: a request (from
# waiting for it to its last byte) gets no longer than that, so a slow or silent client cannot
# keep a connection for longer.
REQUEST_DEADLINE = 10.0
MAX_CONNECTIONS = 2048  # or fewer, as the open-files limit allows; beyond it: 503 at once


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
                 path: str, clock: Callable[[], datetime]) -> Handler:
    """What a request gets. The event is queued before the 202 goes out: an accepted delivery
    is in the next batch, or in the last one written on shutdown."""

    def handle(request: Request) -> Response:
        if request.method in ("GET", "HEAD"):
            if request.path in ("/healthz", "/readyz"):
                return Response(200, batcher.health())
            return Response(404, {"error": "not found"})
        if request.method != "POST" or request.path != path:
            return Response(404, {"error": "not found"})
        try:
            verify(secret, request.body, request.headers.get("x-hub-signature-256"))
            kind = request.headers.get("x-github-event", "")
            if kind == "ping":
                return Response(200, {"ok": "pong"})
            if kind != "workflow_job":
                return Response(202, {"ignored": f"event {kind!r}"})
            event = parse(request.body, clock())
            delivery = request.headers.get("x-github-delivery", "")
            if delivery and not deliveries.first_time(delivery):
                return Response(200, {"ignored": "duplicate delivery"})
            if event is not None:
                batcher.add(event)
            return Response(202, {"accepted": event is not None})
        except Rejected as exc:
            return Response(exc.status, {"error": str(exc)})
        except Exception as exc:  # noqa: BLE001 - one bad delivery must not take the server
            log(f"delivery failed: unexpected {type(exc).__name__}: {redact(str(exc))} "
                "(a bug: please report it)")
            return Response(500, {"error": "internal error"})

    return handle


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
    handler = make_handler(secret, batcher, Deliveries(), path, utcnow)
    try:
        server = HttpServer(host or "127.0.0.1", int(port), handler,
                            Limits(deadline=REQUEST_DEADLINE, max_body=MAX_BODY,
                                   connections=MAX_CONNECTIONS))
    except (OSError, OverflowError) as exc:  # in use, no such address, port above 65535
        raise InputError("--listen", f"cannot listen on {listen}: {exc}") from None
    server.start()
    log(f"listening on {host or '127.0.0.1'}:{server.port}{path}; "
        f"one commit per {window} window")
    if ready:
        ready(server.port)
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
            # Stop taking deliveries (those in flight finish), then write a last batch: an
            # accepted delivery is never left behind.
            server.stop()
            leftover = batcher.take()
            if leftover:
                _batch(ws, opts, batcher, leftover, duration, state_file, cache)
    finally:
        server.stop()
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
