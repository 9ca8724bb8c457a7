"""Prometheus metrics of the long-running processes: `run`, `serve` and `controller`.

Each process builds its own registry (never prometheus_client's global one, so several loops in
one test process do not share counters) and records through the few verbs here. The call sites
hand over what they already have — a landed pass, an exception, a controller ``Report`` — and
never touch a metric themselves. The README lists every metric (section "Metrics").
"""
from __future__ import annotations

import time
from collections import Counter as Tally
from typing import TYPE_CHECKING, Any, Callable

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from gitscale.errors import (
    ConfigError,
    DemandError,
    GitError,
    GitscaleError,
    InputError,
    ManifestError,
    PushRejected,
    ValidationError,
)

if TYPE_CHECKING:
    from gitscale.core.model import Demand
    from gitscale.plan.landing import Landed
    from gitscale.http_server import HttpServer

# `*_created` series double every counter for nothing a dashboard reads.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

PASS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
PASS_RESULTS = ("ok", "partial", "error")
ERROR_KINDS = ("config", "manifest", "demand", "input", "validation", "push_rejected", "git",
               "other", "unexpected", "resync")
DELIVERY_RESULTS = ("accepted", "ignored", "duplicate", "ping", "unauthorized", "bad_request",
                    "error")
_KINDS: tuple[tuple[type[BaseException], str], ...] = (
    (ConfigError, "config"), (ManifestError, "manifest"), (DemandError, "demand"),
    (InputError, "input"), (ValidationError, "validation"), (PushRejected, "push_rejected"),
    (GitError, "git"), (GitscaleError, "other"))


def error_kind(exc: BaseException) -> str:
    """The ``kind`` label of an error: its family, or ``unexpected`` for a bug."""
    return next((kind for cls, kind in _KINDS if isinstance(exc, cls)), "unexpected")


def exposition(registry: CollectorRegistry) -> tuple[bytes, str]:
    """The registry in Prometheus' text format, and its Content-Type."""
    return generate_latest(registry), CONTENT_TYPE_LATEST


class LoopMetrics:
    """`run` (a pass per interval) and `serve` (a batch per window: its "pass")."""

    def __init__(self, *, webhooks: bool = False) -> None:
        reg = self.registry = CollectorRegistry()
        self.started = time.time()
        self.sets = SetGauges()
        reg.register(self.sets)
        self.writes = Counter("gitscale_set_writes", "Writes of the set's manifest, by reason "
                              "(scale-up, scale-down, reaffirm, quiet-reset, ...)",
                              ["set", "reason"], registry=reg)
        self.passes = Counter("gitscale_passes", "Passes (serve: batches), by result: ok, "
                              "partial (landed, but a set's demand could not be read: that set "
                              "was left untouched), error (nothing landed)", ["result"],
                              registry=reg)
        self.duration = Histogram("gitscale_pass_duration_seconds", "Wall time of a pass "
                                  "(serve: a batch), failed ones included", registry=reg,
                                  buckets=PASS_BUCKETS)
        self.last_success = Gauge("gitscale_last_success_timestamp_seconds", "Unix time at "
                                  "which the last pass (serve: batch) succeeded: landed with "
                                  "every set's demand read (exit code 0)", registry=reg)
        self.commits = Counter("gitscale_commits", "Commits made (and pushed, when the repo "
                               "has a remote)", registry=reg)
        self.retries = Counter("gitscale_push_retries", "Pushes retried because another "
                               "writer pushed first", registry=reg)
        self.errors = Counter("gitscale_errors", "Errors by kind: a failed pass counts once, a "
                              "set whose demand could not be read once per pass", ["kind"],
                              registry=reg)
        self.notifications = Counter("gitscale_notifications", "GitOps notifications after a "
                                     "push, by engine and result", ["engine", "result"],
                                     registry=reg)
        self.deliveries = Counter("gitscale_webhook_deliveries", "Webhook deliveries to "
                                  "`serve`, by result", ["result"], registry=reg)
        self.unrouted = Counter("gitscale_webhook_unrouted_events", "workflow_job events "
                                "`serve` accepted for jobs no served set takes (not stored)",
                                registry=reg) if webhooks else None
        self.written: set[tuple[str, str]] = set()  # the (set, reason) series of `writes`
        for result in PASS_RESULTS:
            self.passes.labels(result)
        for kind in ERROR_KINDS:
            self.errors.labels(kind)
        for result in DELIVERY_RESULTS if webhooks else ():
            self.deliveries.labels(result)

    def landed(self, landed: "Landed", seconds: float) -> None:
        """A pass that landed (with or without a commit). One that left a set untouched because
        its demand could not be read is ``partial``, not a success: `reconcile` and `run
        --max-passes` exit 1 on it, and last_success must not move while nothing scales."""
        plan = landed.plan
        now = time.time()
        self.passes.labels("partial" if plan.errors else "ok").inc()
        self.duration.observe(seconds)
        if not plan.errors:
            self.last_success.set(now)
        if landed.commit is not None:
            self.commits.inc()
        self.retries.inc(landed.attempts - 1)
        # A new snapshot each pass: a set no longer in this process's care (removed from
        # gitscale.yaml, now served by webhooks) goes with the old one.
        values = {name: (decision.replicas, decision.patch_id, plan.demands.get(name))
                  for name, decision in plan.unchanged}
        for change in plan.changes:
            values[change.name] = (change.decision.replicas, change.decision.patch_id,
                                   change.demand)
            self.writes.labels(change.name, change.decision.reason.value).inc()
            self.written.add((change.name, change.decision.reason.value))
        self.sets.values = values
        # its writes go with it too: a config that renames sets now and then (or generates
        # them) would otherwise add series for as long as the process lives
        for name, reason in [w for w in self.written
                             if w[0] not in values and w[0] not in plan.errors]:
            remove(self.writes, name, reason)
            self.written.discard((name, reason))
        # a set never read by this process counts from its start: "not read for 10 minutes"
        # then fires for a set whose source has failed since start-up, too
        self.sets.read = {name: now if name in plan.demands and name not in plan.errors
                          else self.sets.read.get(name, self.started) for name in values}
        for _ in plan.errors:
            self.errors.labels("demand").inc()
        if landed.pushed:
            told = Tally(landed.notified)
            for target in plan.notify:
                sent = told[target.label] > 0
                told[target.label] -= 1
                self.notifications.labels(target.kind, "sent" if sent else "failed").inc()

    def failed(self, exc: BaseException, seconds: float) -> None:
        """A pass (serve: a batch) that raised; the set gauges keep their last values."""
        self.passes.labels("error").inc()
        self.duration.observe(seconds)
        self.errors.labels(error_kind(exc)).inc()

    def error(self, kind: str) -> None:
        """An error outside a pass (serve's resync poll: ``resync``)."""
        self.errors.labels(kind).inc()

    def delivery(self, result: str) -> None:
        self.deliveries.labels(result).inc()

    def dropped(self, count: int) -> None:
        """Events for jobs no served set takes (serve's batches)."""
        if self.unrouted is not None:
            self.unrouted.inc(count)



class SetGauges(Collector):
    """The per-set gauges of the last pass, kept as plain values and turned into samples only
    when scraped: recording a pass over thousands of sets costs a dict, not a metric update
    (with its lock) per set and gauge."""

    FAMILIES = (
        ("gitscale_set_queued_jobs", "Jobs waiting for a runner of the set, as the last pass "
         "read them (absent while its demand cannot be read)"),
        ("gitscale_set_running_jobs", "Jobs running on a runner of the set, as the last pass "
         "read them"),
        ("gitscale_set_desired_replicas", "spec.replicas of the set after the last pass "
         "(written by it, or left as it was)"),
        ("gitscale_set_patch_id", "spec.patchID of the set after the last pass"),
        ("gitscale_set_last_read_timestamp_seconds", "Unix time at which a pass last read the "
         "set's demand (the process's start while it never has)"),
    )

    def __init__(self) -> None:
        # set → (replicas, patch ID, demand); replaced whole by each pass
        self.values: dict[str, tuple[int, int | None, "Demand | None"]] = {}
        self.read: dict[str, float] = {}  # set → when its demand was last read (Unix time)

    def describe(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily(name, text, labels=["set"]) for name, text in self.FAMILIES]

    def collect(self) -> list[GaugeMetricFamily]:
        queued, running, desired, patch, read = self.describe()
        for name, when in self.read.items():
            read.add_metric([name], when)
        for name, (replicas, patch_id, demand) in self.values.items():
            desired.add_metric([name], replicas)
            if patch_id is not None:
                patch.add_metric([name], patch_id)
            if demand is not None:
                queued.add_metric([name], demand.queued)
                running.add_metric([name], demand.running)
        return [queued, running, desired, patch, read]


def remove(metric: Gauge | Counter, *labels: str) -> None:
    try:
        metric.remove(*labels)
    except KeyError:
        pass  # never set


def start_listener(listen: str, registry: CollectorRegistry, *,
                   health: Callable[[], tuple[int, dict[str, Any]]] | None = None,
                   ) -> "HttpServer":
    """``--metrics-listen HOST:PORT``: GET /metrics on a port of its own (the same asyncio
    server as serve's webhooks: a slow scraper holds a socket, not a thread), and ``health``'s
    answer at GET /healthz when given."""
    from gitscale.http_server import HttpServer, Request, Response

    host, port = listen_address("--metrics-listen", listen)

    def handle(request: Request) -> Response:
        if request.method in ("GET", "HEAD") and request.path == "/metrics":
            body, content_type = exposition(registry)
            return Response(200, raw=body, content_type=content_type)
        if request.method in ("GET", "HEAD") and request.path == "/healthz" and health:
            status, answer = health()
            return Response(status, answer)
        return Response(404, {"error": "not found"})

    try:
        server = HttpServer(host, port, handle, offload=frozenset({"/metrics"}))
    except (OSError, OverflowError) as exc:
        raise InputError("--metrics-listen", f"cannot listen on {listen}: {exc}") from None
    server.start()
    return server


def url_of(server: "HttpServer") -> str:
    """Where a listener serves the metrics, for the log."""
    host, port = server.sock.getsockname()[:2]
    return f"http://{host}:{port}/metrics"


def listen_address(option: str, listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (HOST may be empty: 127.0.0.1) → (host, port), or an InputError."""
    host, _, port = listen.rpartition(":")
    if not (port.isascii() and port.isdigit() and len(port) <= 5):
        raise InputError(option, f"{listen!r} is not HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)
