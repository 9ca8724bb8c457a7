"""`gitscale run --interval 30s`: the reconcile pass, repeated, until SIGTERM.

Between passes it keeps only plain data: the workspace's path, the ETag caches of the sources
and the manifest state cache. A failing pass (network, a bad config pushed by someone) is
logged and retried with exponential backoff; a rate limit or a Buildkite poll interval pushes
the next pass back. SIGTERM or SIGINT ends the loop after the pass in progress.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Callable


from gitscale.cache import StateCache, default_cache_dir
from gitscale.commands import (EXIT_ERROR, EXIT_OK, RepoOptions, log,
                               stop_on_signals)
from gitscale.commands.reconcile import Planner
from gitscale.demand.resolve import Sources
from gitscale.errors import GitscaleError, InputError
from gitscale.git import redact
from gitscale.landing import describe_landing, land
from gitscale.timeutil import format_time, parse_duration, utcnow
from gitscale.workspace import Workspace, open_workspace

MAX_BACKOFF = 600.0
MAX_RATE_WAIT = 3600.0


@dataclass
class LoopState:
    """What decides when the next pass starts."""

    interval: float
    failures: int = 0
    not_before: float = 0.0  # a monotonic deadline (rate limits, poll intervals)

    def delay(self) -> float:
        base = self.interval if self.failures == 0 else min(
            MAX_BACKOFF, self.interval * 2 ** self.failures)
        return max(base, self.not_before - time.monotonic())


def run_loop(opts: RepoOptions, *, interval: str, demand: str | None, max_passes: int | None,
             stop: threading.Event | None = None,
             clock: Callable[[], datetime] = utcnow) -> int:
    try:
        seconds = parse_duration(interval).total_seconds()
    except ValueError as exc:
        raise InputError("--interval", str(exc)) from None
    if seconds < 1:
        raise InputError("--interval", "must be at least 1s")
    stop = stop or stop_on_signals("finishing the pass in progress")
    state = LoopState(seconds)
    cache = StateCache.load(default_cache_dir())
    sources = Sources(default_cache_dir())
    passes = 0
    last_code = EXIT_OK
    try:
        with open_workspace(opts.repo, opts.branch, sparse=True) as ws:
            while not stop.is_set():
                started = time.monotonic()
                last_code = _one_pass(ws, opts, demand, cache, sources, state, clock, passes)
                passes += 1
                if max_passes is not None and passes >= max_passes:
                    break
                wait = max(0.0, state.delay() - (time.monotonic() - started))
                log(f"next pass in {wait:.0f}s")
                stop.wait(wait)
    finally:
        sources.close()
        cache.save()
    log(f"stopped after {passes} passes")
    return last_code if max_passes is not None else EXIT_OK


def _one_pass(ws: Workspace, opts: RepoOptions, demand: str | None, cache: StateCache,
              sources: Sources, state: LoopState, clock: Callable[[], datetime],
              number: int) -> int:
    now = clock()
    planner = Planner(ws, opts, demand, now, cache, sources)
    try:
        if number > 0 and ws.mode == "clone":
            ws.sync()  # a clone kept between passes moves to the remote's newest commit
        landed = land(ws, planner)
    except GitscaleError as exc:
        state.failures += 1
        log(f"pass failed ({state.failures} in a row): {redact(str(exc))}")
        return exc.exit_code
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
    changed = ", ".join(f"{c.name} {c.before.replicas}→{c.decision.replicas}"
                        for c in landed.plan.changes) or "no change"
    log(f"pass at {format_time(now)}: {changed}; {describe_landing(landed, ws)}")
    for name, message in landed.plan.errors.items():
        log(f"{name}: {message} (left untouched)")
    return EXIT_ERROR if landed.plan.errors else EXIT_OK
