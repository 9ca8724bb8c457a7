"""`gitscale serve`: workflow_job webhooks → capacity reservations → one commit per window.

Deliveries are verified, de-duplicated and queued by the HTTP thread (``webhook_http``); a
batch thread wakes every ``--window``, applies the queued events to the reservations file in the
config repo, recomputes the served sets (``--set``, by default every webhook-fed set; see
``gitscale.webhooks.served``) from their reservations, and lands manifests and reservations in
one commit (with the same push-race handling as `reconcile`). A failed batch
keeps its events and is retried with backoff. Every ``--resync`` a worker thread reads the sets'
jobs from GitHub's API, and the next batch corrects the reservations from that list (lost
deliveries). ``GET /healthz`` reports the queue and the last batch.
"""
from __future__ import annotations

import re
import threading
import time
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable

from gitscale import crash
from gitscale.files import default_cache_dir
from gitscale.plan.cache import LOOP_LIMIT, StateCache
from gitscale.commands import EXIT_OK, Checkpoint, RepoOptions, backoff, log, stop_on_signals
from gitscale.config.load import load_config
from gitscale.core.reservations import Correction
from gitscale.demand.resolve import Sources
from gitscale.config.secrets import SecretError, env_name_problem
from gitscale.errors import GitscaleError, InputError, PushRejected
from gitscale.repo.git import redact
from gitscale.plan.landing import describe_landing, land
from gitscale.metrics import (LoopMetrics, exposition, listen_address, start_listener,
                              url_of)
from gitscale.webhooks.reservations_file import check_path
from gitscale.webhooks.resync import Listing, list_jobs
from gitscale.timeutil import format_time, parse_duration, utcnow
from gitscale.webhooks.delivery import (MAX_BODY, Deliveries, JobEvent, Rejected, RejectionLog,
                                        parse, verify)
from gitscale.webhooks.batch import batch_plan
from gitscale.webhooks.secret import WebhookSecret
from gitscale.webhooks.served import Serving, check, check_claims, pick
from gitscale.webhooks.streak import Dropped, Streak, duration
from gitscale.plan.forecasts import read_forecasts
from gitscale.http_server import Handler, HttpServer, Limits, RefusedHook, Request, Response
from gitscale.repo.workspace import Workspace, open_workspace

# A failed batch is retried at least this often: its events are jobs waiting for runners, and
# a retry is a fetch (and a push) — cheap for the remote, and the events land within a minute
# of the remote coming back (at 5 minutes, a 10-minute outage cost every job 4 more minutes).
MAX_BACKOFF = 60.0
# GitHub gives up on a delivery after 10 s and does not redeliver it by itself: a request (from
# waiting for it to its last byte) gets no longer than that, so a slow or silent client cannot
# keep a connection for longer.
REQUEST_DEADLINE = 10.0
MAX_CONNECTIONS = 2048  # or fewer, as the open-files limit allows; beyond it: 503 at once
EXPIRY_CHECK = 60.0  # seconds: a batch runs this often without events, so reservations expire


@dataclass
class Batcher:
    """Events waiting for the next window, and what /healthz reports."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    pending: list[JobEvent] = field(default_factory=list)
    writing: int = 0  # taken by the batch being written
    last_batch: str | None = None
    last_error: str | None = None
    failures: int = 0
    commits: int = 0
    dropped: int = 0  # events landed batches dropped: jobs no served set takes

    def add(self, event: JobEvent) -> None:
        with self.lock:
            self.pending.append(event)

    def take(self) -> list[JobEvent]:
        with self.lock:
            taken, self.pending = self.pending, []
            self.writing = len(taken)
            return taken

    def give_back(self, events: list[JobEvent]) -> None:
        with self.lock:
            self.pending = events + self.pending  # keep delivery order
            self.writing = 0

    def health(self) -> dict[str, Any]:
        """``pending_events``: accepted and not yet landed (queued, or in the batch being
        written)."""
        with self.lock:
            return {"status": "degraded" if self.failures else "ok",
                    "pending_events": len(self.pending) + self.writing,
                    "last_batch": self.last_batch, "last_error": self.last_error,
                    "commits": self.commits, "dropped_events": self.dropped}


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
                return Response(200, batcher.health())
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
            event = parse(request.body, clock())
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
            log(f"delivery failed: {crash.summary(exc)}\n{crash.report()}")
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


def _check_hook_path(path: str) -> None:
    """``--path``: what a request's path is compared with (its query string cut off)."""
    if not re.fullmatch(r"/[!-~]*", path) or "?" in path or "#" in path:
        raise InputError("--path", f"{path!r} is not a URL path: it starts with / and holds "
                         "no blank, ? or # (e.g. /webhook)")


# The shortest of each duration: below them serve would spin (a window of 0 is a busy loop), hold
# a job's runner for less time than one takes to start, or poll GitHub's API without pause.
MIN_WINDOW, MIN_RESERVATION, MIN_RESYNC = "1s", "1m", "10s"
RETRY_FLOOR = 1.0  # seconds: a failed batch is retried after at least twice this, any window


def _durations(window: str, reservation: str, resync: str) -> tuple[float, timedelta, float]:
    """``--window``, ``--reservation`` and ``--resync`` (``0``: off), each refused below its
    minimum."""
    window_s = _duration("--window", window, MIN_WINDOW,
                         "the events of one window land as one commit").total_seconds()
    duration = _duration("--reservation", reservation, MIN_RESERVATION,
                         "a queued job's runner needs that long to start")
    if resync.strip() == "0" or _is_zero(resync):
        return window_s, duration, 0.0
    resync_s = _duration("--resync", resync, MIN_RESYNC, "each resync reads the sets' jobs "
                         "from GitHub's API; 0 turns it off").total_seconds()
    return window_s, duration, resync_s


def _is_zero(text: str) -> bool:
    """``0s``, ``0m``, ``0h``…: every way to write a duration of nothing (resync off)."""
    try:
        return parse_duration(text) == timedelta(0)
    except ValueError:
        return False  # (said by the check that follows)


def _duration(option: str, text: str, least: str, why: str) -> timedelta:
    try:
        value = parse_duration(text)
    except ValueError as exc:
        raise InputError(option, str(exc)) from None
    if value < parse_duration(least):
        raise InputError(option, f"{text!r} must be at least {least} ({why})")
    return value


def _check_secret_env(name: str) -> None:
    """``--secret-env`` names a variable: a token pasted there is refused without showing it
    (it was in "environment variable ghp_… is not set")."""
    problem = env_name_problem(name)
    if problem:
        raise InputError("--secret-env", problem)


def batch_delay(window_s: float, failures: int) -> float:
    """Seconds until the next batch: the window; after failed batches a backoff that doubles
    from at least ``2 * RETRY_FLOOR`` whatever the window, up to ``MAX_BACKOFF``."""
    if not failures:
        return window_s
    return backoff(max(window_s, RETRY_FLOOR), failures, MAX_BACKOFF)


def run_serve(opts: RepoOptions, *, listen: str, path: str, window: str, reservation: str,
              secret_env: str, secret_file: str | None, state_file: str, resync: str = "5m",
              metrics_listen: str | None = None, stop: threading.Event | None = None,
              ready: Callable[[int], None] | None = None, sets: tuple[str, ...] = (),
              secret_env_given: bool = False) -> int:
    """``sets``: ``--set`` (none: every set whose source takes webhooks). ``ready`` is told the
    webhook port once deliveries are taken (tests pass port 0). ``secret_env_given``:
    ``--secret-env`` was on the command line (not its default)."""
    window_s, duration, resync_s = _durations(window, reservation, resync)
    _check_hook_path(path)
    _check_secret_env(secret_env)
    if secret_file is not None and secret_env_given:  # which is meant cannot be guessed
        raise InputError("--secret-file", "give --secret-env or --secret-file, not both")
    ref = {"file": secret_file} if secret_file else {"env": secret_env}
    secret = WebhookSecret(ref, report=log)  # a file is read again as it changes
    try:
        secret.check()
    except SecretError as exc:  # it says "webhook secret: …" already: no second prefix
        raise SecretError(f"{exc} (the secret GitHub signs workflow_job deliveries with: "
                          "--secret-env names its variable, --secret-file its file)") from None
    host, port = listen_address("--listen", listen)
    if metrics_listen is not None:
        listen_address("--metrics-listen", metrics_listen)
    check_path(state_file)
    stop = stop or stop_on_signals("writing the last batch")
    batcher = Batcher()
    metrics = LoopMetrics(webhooks=True)
    rejections = RejectionLog()
    handler = make_handler(secret, batcher, Deliveries(), path, utcnow, metrics,
                           expose=metrics_listen is None, rejections=rejections)
    try:  # bound now (an address in use is refused before a clone), served once checked
        server = HttpServer(host, port, handler,
                            Limits(deadline=REQUEST_DEADLINE, max_body=MAX_BODY,
                                   connections=MAX_CONNECTIONS), report=log,
                            offload=frozenset({"/metrics"}),
                            refused=log_refused(rejections, path))
    except (OSError, OverflowError) as exc:  # in use, no such address, port above 65535
        raise InputError("--listen", f"cannot listen on {listen}: {exc}") from None
    cache = StateCache.load(default_cache_dir(), limit=LOOP_LIMIT)  # kept for months
    serving = Serving(tuple(dict.fromkeys(sets)) or None)
    resyncer = Resyncer(resync_s, Sources(default_cache_dir(), report=log), opts.config, cache,
                        metrics, serving)
    metrics_server = None
    try:
        with open_workspace(opts.repo, opts.branch, kept=True) as ws:  # for months
            # Before serve says it listens and answers a delivery: a refused --set stops it
            # with nothing written and no 202 given. Deliveries that come meanwhile wait in
            # the listen backlog (GitHub waits 10 s); the resync at start finds the rest.
            _check_sets(ws, opts.config, state_file, cache, serving)
            server.start()
            log(f"listening on {host}:{server.port}{path}; one commit per {window} "
                f"window; " + (f"resync with GitHub every {resync}" if resync_s
                               else "no resync"))
            if metrics_listen:
                metrics_server = start_listener(metrics_listen, metrics.registry)
                log(f"metrics at {url_of(metrics_server)}")
            batch = Batch(ws, opts, batcher, duration, state_file, cache, metrics, serving,
                          resync_on=bool(resync_s))
            batch.run([], None)  # at once: claims the sets, applies expiry
            if ready:
                ready(server.port)
            next_batch = time.monotonic() + EXPIRY_CHECK
            checkpoint = Checkpoint(cache.save)  # (the resync's clients save after each poll)
            while not stop.is_set():
                stop.wait(batch_delay(window_s, batcher.failures))
                for line in rejections.flush():  # a flood that stopped is still told
                    log(line)
                resyncer.start_if_due(ws)
                listing = resyncer.take()
                events = batcher.take()
                if events or listing or time.monotonic() >= next_batch:
                    next_batch = time.monotonic() + EXPIRY_CHECK
                    if not batch.run(events, listing) and listing is not None:
                        resyncer.give_back(listing)
                checkpoint()
            # Stop taking deliveries (those in flight finish), then write a last batch: an
            # accepted delivery is never left behind.
            server.stop()
            _last_batch(batch, batcher)
    finally:
        for line in rejections.flush(everything=True):
            log(line)
        server.stop()
        if metrics_server is not None:
            metrics_server.stop()
        resyncer.close()
        cache.save()
    log("stopped")
    return EXIT_OK


def _check_sets(ws: Workspace, config_path: str, state_file: str, cache: StateCache,
                serving: Serving) -> None:
    """``--set`` names sets that take webhooks, and no other reservations file serves them;
    else an error, and serve stops before it writes. A gitscale.yaml that cannot be read is
    the first batch's to report (and retry), as without ``--set``."""
    try:
        config = load_config(ws.root, config_path, cache.configs)
    except GitscaleError:
        return
    check(config, serving.names)
    check_claims(ws.root, state_file, pick(config, serving.names).names)


def _last_batch(batch: "Batch", batcher: Batcher, attempts: int = 3) -> None:
    """The events still queued at shutdown, with a few quick retries; what cannot be written
    is named, for the resync at the next start corrects it."""
    for attempt in range(attempts):
        events = batcher.take()
        if not events or batch.run(events, None):
            return
        if attempt + 1 < attempts:
            time.sleep(2 ** attempt)
    lost = batcher.take()
    jobs = ", ".join(str(e.job) for e in lost[:20]) + (", …" if len(lost) > 20 else "")
    log(f"{len(lost)} accepted events could not be written (jobs {jobs}); "
        + ("the resync at the next start corrects their reservations" if batch.resync_on else
           "with --resync 0 nothing corrects their reservations: start serve with a resync "
           "(--resync 5m) once, or they stay as they are until they expire"))


CLOSE_GRACE = 5.0  # seconds a resync poll in flight at a stop has to finish


@dataclass
class Resyncer:
    """Polls GitHub for the webhook-fed sets' jobs on a worker thread, every ``every`` seconds
    (0: never), so a slow API never holds a batch up."""

    every: float
    sources: Sources
    config_path: str
    cache: StateCache
    metrics: LoopMetrics
    serving: Serving
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(
        1, thread_name_prefix="resync"))
    future: "Future[Listing] | None" = None
    ready: Listing | None = None
    due: float = 0.0  # time.monotonic() of the next poll: the first one at start
    streak: Streak = field(default_factory=Streak)  # failed polls in a row

    def start_if_due(self, ws: Workspace) -> None:
        if not self.every or self.future is not None or time.monotonic() < self.due:
            return
        self.due = time.monotonic() + self.every
        try:
            config = load_config(ws.root, self.config_path, self.cache.configs)
        except GitscaleError as exc:
            log(f"resync skipped: {redact(str(exc))}")
            return
        sets = pick(config, self.serving.names).sets  # only the served sets' scopes
        self.future = self.pool.submit(list_jobs, sets, self.sources, utcnow())

    def take(self) -> Listing | None:
        """The newest listing, once its poll is done (None before)."""
        if self.future is not None and self.future.done():
            future, self.future = self.future, None
            try:
                polled = future.result()
            except Exception as exc:  # noqa: BLE001 - the server outlives a failed poll
                self.metrics.error("resync")
                if self.streak.failed(crash.summary(exc)):
                    log(f"resync failed: {crash.summary(exc)}\n{crash.report()}")
                return None
            if polled.error is not None:
                self.metrics.error("resync")
                if self.streak.failed(polled.error):  # the same error: said once per streak
                    log("resync skipped, reservations left as they are"
                        + (f" ({self.streak.count} polls in a row for "
                           f"{self.streak.lasted()})" if self.streak.count > 1 else "")
                        + f": {redact(polled.error)}"
                        + (" (said again when the error changes, and every "
                           f"{duration(self.streak.remind)} while it lasts)"
                           if self.streak.count == 1 else ""))
                return None
            ended = self.streak.ended()
            if ended is not None:
                log(f"resync works again, after {ended[0]} failed polls in {ended[1]}")
            self.ready = polled
        listing, self.ready = self.ready, None
        return listing

    def give_back(self, listing: Listing) -> None:
        """A batch failed: its listing is applied by the next one, unless a newer one came."""
        if self.ready is None:
            self.ready = listing

    def close(self, grace: float = CLOSE_GRACE) -> None:
        """Stop polling, then save and close the clients. A poll in flight has ``grace``
        seconds to finish first: its thread uses those clients (and their ETag caches), which
        must not be saved or closed under it. One still running then is not waited for here:
        the process waits for it at exit (the pool's thread is joined then), and it saves its
        clients itself when done (``list_jobs``); its requests are bounded by their timeouts."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        future = self.future
        if future is not None:
            try:
                future.exception(timeout=grace)
            except TimeoutError:
                log(f"resync: a poll still running {grace:g} s after the stop; the process "
                    "exits once it is done")
                return
            except CancelledError:
                pass
        self.sources.close()


@dataclass
class Batch:
    """Lands one batch: the events, a resync's listing, the expiry of reservations."""

    ws: Workspace
    opts: RepoOptions
    batcher: Batcher
    duration: timedelta
    state_file: str
    cache: StateCache
    metrics: LoopMetrics
    serving: Serving
    resync_on: bool = True
    told: dict[str, str] = field(default_factory=dict)  # --set names not served, said once
    streak: Streak = field(default_factory=Streak)  # failed batches in a row
    dropped: Dropped = field(default_factory=Dropped)  # events no served set takes

    def run(self, events: list[JobEvent], listing: Listing | None) -> bool:
        """True when it landed; a failed batch keeps its events for the next one."""
        now, started = utcnow(), time.monotonic()
        corrected: dict[str, Correction] = {}
        unrouted: list[JobEvent] = []
        ws = self.ws
        try:
            if ws.mode == "clone":
                ws.sync()
            landed = land(ws, lambda: batch_plan(
                ws.root, ws.base(), self.opts.config, events, now, self.duration,
                self.state_file, self.cache, listing, corrected,
                lambda config: read_forecasts(ws, config, self.cache, now), self.serving,
                unrouted), cache=self.cache, say=log)
        except Exception as exc:  # noqa: BLE001 - a server must outlive one bad batch
            # Keep the events whatever went wrong (a full disk is not a GitscaleError) and
            # retry with backoff; an unexpected error is a bug and says so.
            self.metrics.failed(exc, time.monotonic() - started)
            self.batcher.give_back(events)
            bug = not isinstance(exc, GitscaleError)
            what = crash.summary(exc) if bug else redact(str(exc))
            with self.batcher.lock:
                self.batcher.failures += 1
                self.batcher.last_error = what
                waiting = len(self.batcher.pending)
            if self.streak.failed(what):  # the same error again: said once per streak
                log(self._failure(what, waiting, exc) + (f"\n{crash.report()}" if bug else ""))
            return False
        ended = self.streak.ended()
        if ended is not None:
            log(f"batches land again, after {ended[0]} failed tries in {ended[1]}")
        self.metrics.landed(landed, time.monotonic() - started)
        self._tell_dropped(unrouted)
        self._tell_served()
        with self.batcher.lock:
            self.batcher.writing = 0
            self.batcher.failures = 0
            self.batcher.last_error = None
            self.batcher.last_batch = format_time(now)
            self.batcher.commits += 1 if landed.commit else 0
        for name, correction in corrected.items():
            log(f"resync {name}: {correction.describe()}")
        if listing is not None and not corrected:
            log(f"resync: reservations match GitHub ({len(listing.jobs)} sets)")
        if events or landed.commit:
            log(f"batch of {_events(len(events))}: {describe_landing(landed, ws)}")
        return True

    def _failure(self, what: str, waiting: int, exc: Exception) -> str:
        """The line of a failed batch: the first of a streak says how serve goes on, a
        remote's refusal what a person can do, a reminder how long it has lasted."""
        streak = self.streak
        if isinstance(exc, PushRejected):  # final for `reconcile`; serve tries again
            what = what.replace("; not retried.", ".")
            what += (f"\nserve keeps the events and tries again every {MAX_BACKOFF:g} s; to "
                     f"land them, let the identity serve pushes as (GITSCALE_GIT_TOKEN's user, "
                     f"the deploy key) push to {self.ws.remote_branch or self.ws.branch} (a "
                     "bypass of the branch protection rule or hook), or serve a branch it may "
                     "push to (--branch)")
        if streak.count == 1:
            return (f"batch failed, {_events(waiting)} kept for the next try (retried with "
                    f"backoff up to {MAX_BACKOFF:g} s; /healthz says degraded; this error is "
                    f"logged again when it changes, and every {duration(streak.remind)} while "
                    f"it lasts): {what}")
        return (f"batch still failing, {streak.count} tries in a row for {streak.lasted()}, "
                f"{_events(waiting)} kept: {what}")

    def _tell_dropped(self, unrouted: list[JobEvent]) -> None:
        """Events for jobs no served set takes: counted in /healthz, said at most every 10
        minutes with an example (the labels to compare with the sets')."""
        if not unrouted:
            return
        with self.batcher.lock:
            self.batcher.dropped += len(unrouted)
        self.metrics.dropped(len(unrouted))
        first = unrouted[0]
        example = f"job {first.job} of {first.repo}, labels [{', '.join(first.labels)}]"
        said = self.dropped.add(len(unrouted), example[:200])
        if said is not None:
            log(f"{_events(said.count)} for jobs no served set takes, not stored (e.g. "
                f"{said.example}): a set takes a job when its source's org/repos hold the "
                "repository and its labels hold every job label but self-hosted; said at most "
                f"every {duration(self.dropped.every)}, counted in /healthz dropped_events and "
                "gitscale_webhook_unrouted_events_total")

    def _tell_served(self) -> None:
        """After a landed batch: what it serves, once per change. A ``--set`` name that a
        reloaded gitscale.yaml lost (or feeds otherwise) is said once; the others are served."""
        serving, picked = self.serving, self.serving.picked
        if picked is None:
            return
        for name, why in picked.unservable.items():
            if self.told.get(name) != why:
                log(f"--set {name}: {why}: not served; serving "
                    f"{', '.join(picked.names) or 'no set'}")
        for name in sorted(self.told.keys() - picked.unservable.keys()):
            log(f"--set {name}: served again")
        self.told = dict(picked.unservable)
        if picked.names != serving.claimed:
            said = [f"served by webhooks: {', '.join(picked.names) or 'none'}"
                    + (f" ({self.opts.config} has no set whose source takes webhooks, such as "
                       "github: every delivery is answered 202 and dropped until it has)"
                       if not picked.names and serving.names is None else "")]
            if picked.others:
                said.append(f"left to `gitscale run` and `reconcile`: {', '.join(picked.others)}")
            dropped = sorted(set(serving.found) - set(picked.names))
            if dropped:
                said.append(f"no longer served here: {', '.join(dropped)} (reservations dropped; "
                            "a `gitscale serve` that serves them needs its own --state-file)")
            log("; ".join(said))
        serving.claimed = picked.names


def _events(count: int) -> str:
    return f"{count} event{'' if count == 1 else 's'}"
