"""`gitscale run --interval 30s`: the reconcile pass, repeated, until SIGTERM.

Between passes it keeps only plain data: the workspace's path, the ETag caches of the sources
and the manifest state cache. A failing pass (network, a bad config pushed by someone) is
logged and retried with exponential backoff (up to max(interval, 2 minutes)), and so is a pass that crashed on a bug in
gitscale (logged with a crash report, exit code 70 for that pass); a rate limit or a Buildkite poll interval pushes
the next pass back. SIGTERM or SIGINT ends the loop after the pass in progress.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Callable

from gitscale import crash
from gitscale.files import default_cache_dir
from gitscale.plan.cache import StateCache
from gitscale.commands import (EXIT_ERROR, EXIT_OK, Checkpoint, RepoOptions, backoff, log,
                               stop_on_signals)
from gitscale.commands.reconcile import Planner
from gitscale.demand.resolve import Sources
from gitscale.errors import GitscaleError, InputError
from gitscale.repo.git import redact
from gitscale.plan.landing import describe_landing, land
from gitscale.timeutil import format_time, parse_duration, utcnow
from gitscale.repo.workspace import Workspace, open_workspace

if TYPE_CHECKING:
    from gitscale.metrics import LoopMetrics

# After failed passes the wait doubles from --interval up to max(--interval, BACKOFF_CAP): a
# 30 s loop is back within 2 minutes of the remote (or the API) answering again, not frozen
# for 10, and a failing remote gets one fetch every 2 minutes. A loop slower than that never
# waits longer than its own interval.
BACKOFF_CAP = 120.0
MAX_RATE_WAIT = 3600.0


@dataclass
class LoopState:
    """What decides when the next pass starts."""

    interval: float
    failures: int = 0
    not_before: float = 0.0  # a monotonic deadline (rate limits, poll intervals)

    def delay(self) -> float:
        base = self.interval if self.failures == 0 else backoff(
            self.interval, self.failures, max(self.interval, BACKOFF_CAP))
        return max(base, self.not_before - time.monotonic())


def run_loop(opts: RepoOptions, *, interval: str, demand: str | None, max_passes: int | None,
             metrics_listen: str | None = None, stop: threading.Event | None = None,
             clock: Callable[[], datetime] = utcnow,
             ready: Callable[[int], None] | None = None) -> int:
    """``ready`` is told the metrics port once it listens (tests pass port 0)."""
    from gitscale.metrics import LoopMetrics, start_listener, url_of

    try:
        seconds = parse_duration(interval).total_seconds()
    except ValueError as exc:
        raise InputError("--interval", str(exc)) from None
    if seconds < 1:
        raise InputError("--interval", "must be at least 1s")
    metrics = LoopMetrics()
    listener = start_listener(metrics_listen, metrics.registry) if metrics_listen else None
    if listener is not None:
        log(f"metrics at {url_of(listener)}")
        if ready:
            ready(listener.port)
    stop = stop or stop_on_signals("finishing the pass in progress")
    state = LoopState(seconds)
    cache = StateCache.load(default_cache_dir())
    sources = Sources(default_cache_dir(), report=log)  # a credential file rotated: said
    passes = 0
    last_code = EXIT_OK

    def save() -> None:
        sources.save()
        cache.save()

    checkpoint = Checkpoint(save)
    try:
        with open_workspace(opts.repo, opts.branch, sparse=True, kept=True) as ws:
            while not stop.is_set():
                started = time.monotonic()
                last_code = _one_pass(ws, opts, demand, cache, sources, state, clock, passes,
                                      metrics)
                passes += 1
                checkpoint()
                if max_passes is not None and passes >= max_passes:
                    break
                wait = max(0.0, state.delay() - (time.monotonic() - started))
                log(f"next pass in {wait:.0f}s")
                stop.wait(wait)
    finally:
        sources.close()  # (saves them)
        cache.save()
        if listener is not None:
            listener.stop()
    log(f"stopped after {passes} passes")
    return last_code if max_passes is not None else EXIT_OK


def _one_pass(ws: Workspace, opts: RepoOptions, demand: str | None, cache: StateCache,
              sources: Sources, state: LoopState, clock: Callable[[], datetime],
              number: int, metrics: "LoopMetrics") -> int:
    now, started = clock(), time.monotonic()
    planner = Planner(ws, opts, demand, now, cache, sources, progress=number == 0,
                      window=timedelta(seconds=state.interval))
    try:
        if number > 0 and ws.mode == "clone":
            ws.sync()  # a clone kept between passes moves to the remote's newest commit
        landed = land(ws, planner, cache=cache, say=log)
    except GitscaleError as exc:
        metrics.failed(exc, time.monotonic() - started)
        state.failures += 1
        log(f"pass failed ({state.failures} in a row): {redact(str(exc))}")
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - the loop outlives a bug too (gitscale/crash.py)
        metrics.failed(exc, time.monotonic() - started)
        state.failures += 1
        log(f"pass crashed ({state.failures} in a row): {crash.summary(exc)}\n{crash.report()}")
        return crash.EXIT_CRASH
    metrics.landed(landed, time.monotonic() - started)
    state.failures = 0
    reading = planner.reading
    if reading is not None:
        if reading.retry_at is not None:
            # at most an hour (GitHub's limits reset within one): a Retry-After years ahead
            # would stop the loop, and past threading's limit make the wait itself fail
            wait = min(MAX_RATE_WAIT, max(0.0, (reading.retry_at - now).total_seconds()))
            state.not_before = time.monotonic() + wait
            log(f"rate limited: no pass before {format_time(reading.retry_at)}")
        if reading.min_interval:
            state.interval = max(state.interval, reading.min_interval)
    changed = "".join(f"{c.name} {c.before.replicas}→{c.decision.replicas}, "
                      for c in landed.plan.changes).removesuffix(", ")
    # a quiet pass says "no change: nothing to commit" once, not "no change; no change: …"
    log(f"pass at {format_time(now)}: {changed + '; ' if changed else ''}"
        f"{describe_landing(landed, ws)}")
    for name, message in landed.plan.errors.items():
        log(f"{name}: {message} (left untouched)")
    if number == 0:
        for name, why in landed.plan.left.items():
            log(f"{name}: {why}")
    return EXIT_ERROR if landed.plan.errors else EXIT_OK
