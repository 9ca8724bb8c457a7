"""`serve`'s HTTP side: what a request gets — a webhook delivery verified, de-duplicated and
queued (``Batcher``), ``/healthz`` and ``/readyz``, ``/metrics`` — and the log line of a
delivery the server refused before the handler saw it."""
from __future__ import annotations

from datetime import datetime
from typing import Callable

from gitscale import crash
from gitscale.http_server import Handler, RefusedHook, Request, Response
from gitscale.logline import log
from gitscale.metrics import LoopMetrics, exposition
from gitscale.webhooks.batcher import Batcher
from gitscale.webhooks.delivery import (Deliveries, Rejected, RejectionLog, parse, payload_of,
                                         verify)
from gitscale.webhooks.secret import WebhookSecret


def make_handler(secret: bytes | WebhookSecret, batcher: Batcher, deliveries: Deliveries,
                 path: str, clock: Callable[[], datetime],
                 metrics: LoopMetrics | None = None, expose: bool = True,
                 rejections: RejectionLog | None = None) -> Handler:
    """What a request gets. The event is queued before the 202 goes out: an accepted delivery
    is in the next batch, or in the last one written on shutdown. Deliveries are counted in
    ``metrics``, which GET /metrics shows when ``expose`` (``--metrics-listen`` not given); a
    rejected one (401, 400) is logged through ``rejections`` (rate-limited)."""

    def handle(request: Request) -> Response:
        if request.path == path and request.method != "POST":  # (a browser, a probe)
            return Response(405, {"error": "webhook deliveries are POSTs"},
                            headers=(("Allow", "POST"),))
        if request.method in ("GET", "HEAD"):
            if request.path in ("/healthz", "/readyz"):
                return Response(*batcher.health())
            if request.path == "/metrics" and metrics is not None and expose:
                body, content_type = exposition(metrics.registry)
                return Response(200, raw=body, content_type=content_type)
            return Response(404, {"error": "not found"})
        if request.method != "POST" or request.path != path:
            return Response(404, {"error": "not found"})
        result, response = deliver(request)
        if metrics is not None:
            metrics.delivery(result)
        return response

    def deliver(request: Request) -> tuple[str, Response]:
        """A delivery's answer, and its ``result`` label in gitscale_webhook_deliveries_total."""
        try:
            signature = request.headers.get("x-hub-signature-256")
            if isinstance(secret, WebhookSecret):
                secret.verify(request.body, signature)
            else:
                verify(secret, request.body, signature)
            kind = request.headers.get("x-github-event", "")
            if kind == "ping":
                return "ping", Response(200, {"ok": "pong"})
            if kind != "workflow_job":
                return "ignored", Response(202, {"ignored": f"event {kind!r}"})
            event = parse(payload_of(request.body, request.headers.get("content-type")),
                          clock())
            delivery = request.headers.get("x-github-delivery", "")
            if delivery and not deliveries.first_time(delivery):
                return "duplicate", Response(200, {"ignored": "duplicate delivery"})
            if event is not None:
                batcher.add(event)
            return ("accepted" if event is not None else "ignored",
                    Response(202, {"accepted": event is not None}))
        except Rejected as exc:
            line = rejections.note(exc, request.headers.get("x-github-delivery")) \
                if rejections is not None else None
            if line is not None:
                log(line)
            result = "unauthorized" if exc.status == 401 else "bad_request"
            return result, Response(exc.status, {"error": str(exc)})
        except Exception as exc:  # noqa: BLE001 - one bad delivery must not take the server
            log(f"delivery failed: {crash.summary(exc)}\n{crash.report()}", level="error")
            return "error", Response(500, {"error": "internal error"})

    return handle


def log_refused(rejections: RejectionLog, path: str) -> RefusedHook:
    """The HTTP server's hook for a delivery it refused before the handler saw it (a body
    over GitHub's 25 MB: 413): logged as the handler's rejections are."""

    def refused(status: int, reason: str, request: Request) -> None:
        if request.method == "POST" and request.path == path:
            line = rejections.note(Rejected(status, reason), request.headers.get(
                "x-github-delivery"))
            if line is not None:
                log(line)

    return refused
