"""`gitscale serve`: workflow_job webhooks → capacity reservations → one commit per window.

Deliveries are verified, de-duplicated and queued by the HTTP thread
(``gitscale.webhooks.endpoints``, into ``webhooks.batcher``); a batch thread wakes every
``--window``, applies the queued events to the reservations file in the config repo, recomputes
the served sets (``--set``, by default every webhook-fed set; see ``gitscale.webhooks.served``)
from their reservations, and lands manifests and reservations in one commit (with the same
push-race handling as `reconcile`; ``webhooks.batch_loop``). A failed batch keeps its events and
is retried with backoff. Every ``--resync`` a worker thread reads the sets' jobs from GitHub's
API (``webhooks.resyncer``), and the next batch corrects the reservations from that list (lost
deliveries). ``GET /healthz`` reports the queue and the last batch. This module checks the
options and wires those parts into one loop.
"""
from __future__ import annotations

import re
import threading
import time
from datetime import timedelta
from typing import Callable

from gitscale import logline
from gitscale.commands import EXIT_OK, Checkpoint, RepoOptions, log, stop_on_signals
from gitscale.config.load import load_config
from gitscale.config.secrets import SecretError, env_name_problem
from gitscale.demand.resolve import Sources
from gitscale.errors import GitscaleError, InputError
from gitscale.files import default_cache_dir, warn_through
from gitscale.http_server import HttpServer, Limits
from gitscale.metrics import LoopMetrics, listen_address, start_listener, url_of
from gitscale.plan.cache import LOOP_LIMIT, StateCache
from gitscale.repo.opening import open_workspace
from gitscale.repo.workspace import Workspace
from gitscale.timeutil import parse_duration, utcnow
from gitscale.repo.deadline import StopDeadline, seconds_of, stopping_by
from gitscale.webhooks.batch_loop import Batch, batch_delay
from gitscale.webhooks.last_batch import write_last_batch
from gitscale.webhooks.batcher import Batcher
from gitscale.webhooks.delivery import MAX_BODY, Deliveries, RejectionLog
from gitscale.webhooks.endpoints import log_refused, make_handler
from gitscale.webhooks.reservations_file import check_path
from gitscale.webhooks.resyncer import Resyncer
from gitscale.webhooks.hold import Hold, default_hold
from gitscale.webhooks.secret import WebhookSecret
from gitscale.webhooks.served import Serving, check, check_claims, pick

# GitHub gives up on a delivery after 10 s and does not redeliver it by itself: a request (from
# waiting for it to its last byte) gets no longer than that, so a slow or silent client cannot
# keep a connection for longer.
REQUEST_DEADLINE = 10.0
MAX_CONNECTIONS = 2048  # or fewer, as the open-files limit allows; beyond it: 503 at once
EXPIRY_CHECK = 60.0  # seconds: a batch runs this often without events, so reservations expire


def _check_hook_path(path: str) -> None:
    """``--path``: what a request's path is compared with (its query string cut off)."""
    if not re.fullmatch(r"/[!-~]*", path) or "?" in path or "#" in path:
        raise InputError("--path", f"{path!r} is not a URL path: it starts with / and holds "
                         "no blank, ? or # (e.g. /webhook)")


# The shortest of each duration: below them serve would spin (a window of 0 is a busy loop), hold
# a job's runner for less time than one takes to start, or poll GitHub's API without pause.
MIN_WINDOW, MIN_RESERVATION, MIN_RESYNC = "1s", "1m", "10s"


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


def _duration(option: str, text: str, least: str | None = None, why: str = "") -> timedelta:
    """``text`` as a duration, refused below ``least`` (none: any)."""
    try:
        value = parse_duration(text)
    except ValueError as exc:
        raise InputError(option, str(exc)) from None
    if least is not None and value < parse_duration(least):
        raise InputError(option, f"{text!r} must be at least {least} ({why})")
    return value


def _check_secret_env(name: str) -> None:
    """``--secret-env`` names a variable: a token pasted there is refused without showing it
    (it was in "environment variable ghp_… is not set")."""
    problem = env_name_problem(name)
    if problem:
        raise InputError("--secret-env", problem)


def run_serve(opts: RepoOptions, *, listen: str, path: str, window: str, reservation: str,
              secret_env: str, secret_file: str | None, state_file: str, resync: str = "5m",
              metrics_listen: str | None = None, stop: threading.Event | None = None,
              ready: Callable[[int], None] | None = None, sets: tuple[str, ...] = (),
              secret_env_given: bool = False, hold: str | None = None,
              shutdown_timeout: str = "20s") -> int:
    """``sets``: ``--set`` (none: every set whose source takes webhooks). ``ready`` is told the
    webhook port once deliveries are taken (tests pass port 0). ``secret_env_given``:
    ``--secret-env`` was on the command line (not its default). ``hold``: ``--hold``, None
    when not given (``default_hold``). ``shutdown_timeout``: from the stop, how long the
    batch in flight and the last batch may take (``webhooks.last_batch``)."""
    logline.start("serve")
    warn_through(logline.warn)  # the cache's warnings: an object in a JSON log too
    window_s, duration, resync_s = _durations(window, reservation, resync)
    hold_given = hold is not None
    hold = hold if hold is not None else default_hold(bool(resync_s))
    held = timedelta(0) if hold.strip() == "0" else _duration("--hold", hold)
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
    deadline = StopDeadline(seconds_of("--shutdown-timeout", shutdown_timeout))
    stop = stop or stop_on_signals(f"writing the last batch (up to {deadline.seconds:g}s)")
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
        with stopping_by(deadline, stop), \
                open_workspace(opts.repo, opts.branch, kept=True) as ws:  # for months
            # Before serve says it listens and answers a delivery: a refused --set stops it
            # with nothing written and no 202 given. Deliveries that come meanwhile wait in
            # the listen backlog (GitHub waits 10 s); the resync at start finds the rest.
            webhook_sets = _check_sets(ws, opts.config, state_file, cache, serving)
            server.start()
            log(f"listening on {host}:{server.port}{path}; one commit per {window} "
                f"window; " + _resync_said(resync, resync_s, webhook_sets) + "; "
                + _held_said(hold, held, bool(resync_s), hold_given))
            # (equal is not enough: a renewal runs from the batch that applies a listing, and
            # the next such batch comes up to a poll and a window after the next due time)
            if resync_s and duration.total_seconds() <= resync_s:
                log(f"warning: --reservation {reservation} is not longer than --resync "
                    f"{resync}: a job queued for longer than {reservation} can lose its runner "
                    "before the next resync finds it still queued (a scale-down, then a "
                    "scale-up); give --reservation more than --resync")
            if metrics_listen:
                metrics_server = start_listener(metrics_listen, metrics.registry)
                log(f"metrics at {url_of(metrics_server)}")
            batch = Batch(ws, opts.config, batcher, duration, state_file, cache, metrics, serving,
                          resync_on=bool(resync_s), hold=Hold(held))
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
            # accepted delivery is never left behind — or, past the deadline, named.
            server.stop()
            write_last_batch(batch, batcher, deadline)
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


def _held_said(hold: str, held: timedelta, resync_on: bool, given: bool) -> str:
    if not held:
        return ("a change to the reservations alone lands at once (--hold 0"
                + ("" if given or resync_on else ", as there is no resync") + ")")
    said = f"a change to the reservations alone is held up to {hold} for a scaling commit " \
        "(--hold)"
    if not resync_on:
        said += (" — with no resync, what serve holds when it is killed is lost, and a running "
                 "job's reservation may stay until the file is edited: --hold 0 commits at once")
    return said


def _resync_said(resync: str, resync_s: float, webhook_sets: int | None) -> str:
    """The start line's resync: none to run while no served set takes webhooks (a GitHub set
    added to gitscale.yaml later is resynced from the next poll on)."""
    if not resync_s:
        return "no resync"
    if webhook_sets == 0:
        return (f"no resync to run (no served set takes webhooks; every {resync} once one "
                "does)")
    return f"resync with GitHub every {resync}"


def _check_sets(ws: Workspace, config_path: str, state_file: str, cache: StateCache,
                serving: Serving) -> int | None:
    """``--set`` names sets that take webhooks, and no other reservations file serves them;
    else an error, and serve stops before it writes. A gitscale.yaml that cannot be read is
    the first batch's to report (and retry), as without ``--set``. Returns how many sets
    serve scales (None: gitscale.yaml could not be read)."""
    try:
        config = load_config(ws.root, config_path, cache.configs)
    except GitscaleError:
        return None
    check(config, serving.names)
    picked = pick(config, serving.names)
    check_claims(ws.root, state_file, picked.sets)
    return len(picked.sets)
