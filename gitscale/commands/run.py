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
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Callable

from gitscale import crash, logline
from gitscale.files import default_cache_dir, warn_through
from gitscale.plan.cache import LOOP_LIMIT, StateCache
from gitscale.commands import (EXIT_ERROR, EXIT_OK, Checkpoint, RepoOptions, given_demand, log,
                               stop_on_signals)
from gitscale.commands.reconcile import Planner
from gitscale.plan.pass_watch import PassWatch, stall_limit
from gitscale.demand.resolve import Sources
from gitscale.errors import GitError, GitscaleError, GitStopped, InputError, PushRejected
from gitscale.redact import redact
from gitscale.notify.failures import NotifyStreaks
from gitscale.plan.landing import describe_landing, land
from gitscale.streak import Streak
from gitscale.timeutil import backoff, format_time, parse_duration, utcnow
from gitscale.repo.git_output import refused_push_remedy
from gitscale.repo.deadline import StopDeadline, seconds_of, stop_deadline, stopping_by
from gitscale.repo.opening import open_workspace
from gitscale.repo.workspace import Workspace

if TYPE_CHECKING:
    from gitscale.demand.file import FileSource
    from gitscale.metrics import LoopMetrics

# After failed passes the wait doubles from --interval up to max(--interval, BACKOFF_CAP): a
# 30 s loop is back within 2 minutes of the remote (or the API) answering again, not frozen
# for 10, and a failing remote gets one fetch every 2 minutes. A loop slower than that never
# waits longer than its own interval.
BACKOFF_CAP = 120.0
MAX_RATE_WAIT = 3600.0
# A pass that changes nothing is logged when it follows one that did, then once every
# QUIET_LOG_EVERY seconds with the count of those in between: a quiet day of a 30 s loop is 12
# lines an hour, not 240 (its liveness is gitscale_passes_total's, not the log's).
QUIET_LOG_EVERY = 600.0
QUIET = "no change: nothing to commit"


@dataclass
class Unread:
    """A set whose demand could not be read, pass after pass (a revoked token, a source down):
    its error is logged when it starts or changes, then once every QUIET_LOG_EVERY seconds
    with the count, not on every pass (a 30 s loop logged 2,880 lines a day of one 401). The
    passes and when to say them again are a ``Streak``'s; ``since`` is the wall clock's, for
    the log."""

    message: str
    since: datetime
    passes: Streak


@dataclass
class LoopState:
    """What decides when the next pass starts."""

    interval: float
    failures: int = 0
    not_before: float = 0.0  # a monotonic deadline (rate limits, poll intervals)
    quiet: int = 0  # passes in a row that changed nothing (QUIET_LOG_EVERY)
    quiet_since: datetime | None = None  # the first of them
    said_at: float = 0.0  # time.monotonic() of the last pass line logged
    said: bool = True  # the last pass was logged (and so is the wait after it)
    failing_since: datetime | None = None  # the first failed pass of the failures in a row
    git_failed: bool = False  # the last pass failed in git: a kept clone is made again
    error: str = ""  # what the last failed pass said (a repeat of it is one line)
    # sets left untouched because their demand could not be read: name → the streak
    unread: dict[str, "Unread"] = field(default_factory=dict)
    notify: NotifyStreaks = field(default_factory=NotifyStreaks)  # failing notify targets

    def delay(self) -> float:
        base = self.interval if self.failures == 0 else backoff(
            self.interval, self.failures, max(self.interval, BACKOFF_CAP))
        return max(base, self.not_before - time.monotonic())


def run_loop(opts: RepoOptions, *, interval: str, demand: str | None, max_passes: int | None,
             metrics_listen: str | None = None, stop: threading.Event | None = None,
             clock: Callable[[], datetime] = utcnow,
             ready: Callable[[int], None] | None = None, shutdown_timeout: str = "20s") -> int:
    """``ready`` is told the metrics port once it listens (tests pass port 0).
    ``shutdown_timeout``: from the stop, how long the pass in progress may take (its git
    commands that talk to the remote are stopped then: ``repo.deadline.StopDeadline``)."""
    from gitscale.metrics import LoopMetrics, start_listener, url_of

    logline.start("run")
    warn_through(logline.warn)  # the cache's warnings: an object in a JSON log too
    try:
        seconds = parse_duration(interval).total_seconds()
    except ValueError as exc:
        raise InputError("--interval", str(exc)) from None
    if seconds < 1:
        raise InputError("--interval", "must be at least 1s")
    deadline = StopDeadline(seconds_of("--shutdown-timeout", shutdown_timeout))
    given = given_demand(demand)  # a file: read at each pass; stdin or a pipe: here, once
    metrics = LoopMetrics()
    watch = PassWatch(stall_limit())
    listener = start_listener(metrics_listen, metrics.registry, health=watch.health) \
        if metrics_listen else None
    if listener is not None:
        log(f"metrics at {url_of(listener)}")
        if ready:
            ready(listener.port)
    stop = stop or stop_on_signals(f"finishing the pass in progress (up to "
                                   f"{deadline.seconds:g}s)")
    state = LoopState(seconds)
    cache = StateCache.load(default_cache_dir(), limit=LOOP_LIMIT)  # kept for months
    sources = Sources(default_cache_dir(), report=log)  # a credential file rotated: said
    passes = 0
    last_code = EXIT_OK

    def save() -> None:
        sources.save()
        cache.save()

    checkpoint = Checkpoint(save)
    try:
        with stopping_by(deadline, stop), ExitStack() as kept:
            ws: Workspace | None = None
            while not stop.is_set():
                started = time.monotonic()
                watch.begin()
                fresh = ws is None  # cloned by this pass: nothing to sync
                if ws is None:
                    ws = _open(kept, opts, state, clock, metrics, again=passes > 0)
                last_code = EXIT_ERROR if ws is None else _one_pass(
                    ws, opts, given, cache, sources, state, clock, passes, metrics,
                    fresh=fresh)
                if ws is not None and ws.mode == "clone" and state.git_failed:
                    # git failed in the kept clone: the remote, or the clone itself (a fetch
                    # cut by a full disk, its files removed). The next pass clones afresh, so
                    # a broken clone cannot fail every pass until a restart.
                    kept.close()
                    ws = None
                passes += 1
                checkpoint()
                watch.end()
                if max_passes is not None and passes >= max_passes:
                    break
                wait = max(0.0, state.delay() - (time.monotonic() - started))
                if state.said and not stop.is_set():  # (stopped mid-pass: no next one)
                    log(f"next pass in {wait:.0f}s")
                stop.wait(wait)
    finally:
        sources.close()  # (saves them)
        cache.save()
        if listener is not None:
            listener.stop()
    log(f"stopped after {passes} passes")
    return last_code if max_passes is not None else EXIT_OK


def _open(kept: ExitStack, opts: RepoOptions, state: LoopState, clock: Callable[[], datetime],
          metrics: "LoopMetrics", *, again: bool = False) -> Workspace | None:
    """The workspace every pass works in: a checkout, or the clone kept from pass to pass. A
    clone that cannot be made (the remote unreachable or refusing, its branch gone) is a
    failed pass, tried again with the backoff like any other: a Deployment restarted while
    its git server is down waits for it, rather than exiting into CrashLoopBackOff. Wrong
    options (a URL with a password in it, a path that is no checkout) stop it at its start,
    exit 1; ``again`` (a clone made again after a failed pass), whatever fails is that pass's
    failure, a bug too: the loop outlives it (a remote whose default branch went, a token
    file briefly unreadable)."""
    now, started = clock(), time.monotonic()
    try:
        return kept.enter_context(open_workspace(opts.repo, opts.branch, sparse=True,
                                                 kept=True))
    except GitError as exc:
        _failed(state, metrics, exc, now, started, redact(str(exc)))
        return None
    except GitscaleError as exc:
        if not again:
            raise
        _failed(state, metrics, exc, now, started, redact(str(exc)))
        return None
    except Exception as exc:  # noqa: BLE001 - the loop outlives a bug too (gitscale/crash.py)
        if not again:
            raise
        _failed(state, metrics, exc, now, started, crash.summary(exc), what="crashed",
                report=f"\n{crash.report()}")
        return None


def _failed(state: LoopState, metrics: "LoopMetrics", exc: Exception, now: datetime,
            started: float, said: str, *, what: str = "failed", report: str = "") -> None:
    """Count and log a failed pass. The first of a streak, and one that fails otherwise
    than the pass before it, is logged whole (with ``report``: a crash's); a repeat of the
    same error (the same last line: the cause, in git's output) is that one line, with the
    streak's start."""
    metrics.failed(exc, time.monotonic() - started)
    state.failures += 1
    state.said, state.quiet = True, 0
    if state.failures == 1:
        state.failing_since = now
    # what a streak repeats: git's last line (the command before it names a new temporary
    # clone each time), an input error's one line
    cause = next((line.strip() for line in reversed(said.splitlines()) if line.strip()), said)
    if state.failures > 1 and cause == state.error and state.failing_since is not None:
        log(f"pass {what} ({state.failures} in a row since {format_time(state.failing_since)})"
            f": the same error again: {cause}", level="error")
        return
    state.error = cause
    log(f"pass {what} ({state.failures} in a row): {said}{report}", level="error")


def _one_pass(ws: Workspace, opts: RepoOptions, demand: FileSource | None, cache: StateCache,
              sources: Sources, state: LoopState, clock: Callable[[], datetime],
              number: int, metrics: "LoopMetrics", *, fresh: bool = False) -> int:
    """``fresh``: the workspace was opened for this pass (a clone just made needs no sync)."""
    now, started = clock(), time.monotonic()
    state.git_failed = False
    planner = Planner(ws, opts, demand, clock, cache, sources, progress=number == 0,
                      window=timedelta(seconds=state.interval))
    try:
        if not fresh and ws.mode == "clone":
            ws.sync()  # a clone kept between passes moves to the remote's newest commit
        landed = land(ws, planner, cache=cache, say=log, told=state.notify)
    except GitStopped as exc:  # stopping, and the remote held the pass past the deadline
        metrics.failed(exc, time.monotonic() - started)
        state.git_failed = True
        stopping = stop_deadline()
        within = stopping.said() if stopping else "the stop deadline"
        stopped = str(exc).split(":", 1)[0]
        if exc.may_have_landed():  # (the remote took the push, perhaps, and did not answer)
            log(f"stopping: the pass in progress did not finish within {within} ({stopped} "
                "at the deadline before the remote answered: what it pushed may have "
                "landed); the next start's first pass decides again", level="error")
        else:
            log(f"stopping: the pass in progress did not finish within {within} ({stopped} "
                "at the deadline): what it would have written is left to the next start, "
                "whose first pass decides again", level="error")
        return exc.exit_code
    except PushRejected as exc:  # `reconcile` gives up on it; the loop tries again
        _failed(state, metrics, exc, now, started, redact(exc.retried()),
                report="\nrun tries again at every pass; to land its changes, "
                + refused_push_remedy("run", ws.remote_branch or ws.branch))
        state.git_failed = True
        return exc.exit_code
    except GitscaleError as exc:
        _failed(state, metrics, exc, now, started, redact(str(exc)))
        state.git_failed = isinstance(exc, GitError)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - the loop outlives a bug too (gitscale/crash.py)
        _failed(state, metrics, exc, now, started, crash.summary(exc), what="crashed",
                report=f"\n{crash.report()}")
        return crash.EXIT_CRASH
    metrics.landed(landed, time.monotonic() - started)
    recovered = "" if state.failures == 0 or state.failing_since is None else (
        f" (recovered: {state.failures} failed "
        f"pass{'es' if state.failures > 1 else ''} since {format_time(state.failing_since)})")
    state.failures, state.failing_since, state.error = 0, None, ""
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
    said = describe_landing(landed, ws)
    errors = _unread(state, landed.plan.errors, now, {c.name for c in landed.plan.changes}
                     | {name for name, _ in landed.plan.unchanged})
    if not _say_pass(state, now, number, quiet=said == QUIET and not changed
                     and not errors and not recovered
                     and (reading is None or reading.retry_at is None)):
        return EXIT_ERROR if landed.plan.errors else EXIT_OK
    # a quiet pass says "no change: nothing to commit" once, not "no change; no change: …"
    log(f"pass at {format_time(now)}: {changed + '; ' if changed else ''}{said}"
        + (f" (nothing changed in {state.quiet} passes since {format_time(state.quiet_since)})"
           if state.quiet > 1 and state.quiet_since is not None else "") + recovered
        + (f"; left untouched: {', '.join(sorted(landed.plan.errors))}" if landed.plan.errors
           else ""))
    for line in errors:  # "NAME: …", a set left untouched (a warning) or read again
        name = line.split(": ", 1)[0]
        log(line, level="warning" if name in landed.plan.errors else "info", runner_set=name)
    if number == 0:
        for name, why in landed.plan.left.items():
            log(f"{name}: {why}", runner_set=name)
    return EXIT_ERROR if landed.plan.errors else EXIT_OK


def _unread(state: LoopState, errors: dict[str, str], now: datetime,
            read: set[str] | frozenset[str] = frozenset(),
            clock: Callable[[], float] = time.monotonic) -> list[str]:
    """The lines to log of the sets left untouched this pass (``Unread``), and of those
    ``read`` again after a streak (a set gone from the config, or now served by webhooks, is
    forgotten without a word); a repeat within QUIET_LOG_EVERY says nothing (the pass is
    quiet)."""
    lines = [f"{name}: demand read again (after {_passes(unread.passes.count)} left untouched "
             f"since {format_time(unread.since)})" for name, unread in state.unread.items()
             if name not in errors and name in read]
    state.unread = {name: unread for name, unread in state.unread.items() if name in errors}
    for name, message in errors.items():
        unread = state.unread.get(name)
        if unread is None or unread.message != message:  # a new streak, said in full
            unread = state.unread[name] = Unread(
                message, now, Streak(remind=QUIET_LOG_EVERY, clock=clock))
        if not unread.passes.failed(message):
            continue
        lines.append(f"{name}: {message} (left untouched)" if unread.passes.count == 1 else
                     f"{name}: still left untouched ({_passes(unread.passes.count)} since "
                     f"{format_time(unread.since)}): {message}")
    return lines


def _passes(count: int) -> str:
    return f"{count} pass{'es' if count != 1 else ''}"


def _say_pass(state: LoopState, now: datetime, number: int, *, quiet: bool) -> bool:
    """Is this pass's line logged? Every pass that did or met something; of the passes that
    changed nothing in a row, the first, then one every QUIET_LOG_EVERY seconds (which says
    how many it stands for)."""
    clock = time.monotonic()
    if not quiet or number == 0:
        state.quiet, state.quiet_since = 0, None
    else:
        state.quiet += 1
        if state.quiet_since is None:
            state.quiet_since = now
        if state.quiet > 1 and clock - state.said_at < QUIET_LOG_EVERY:
            state.said = False
            return False
    state.said, state.said_at = True, clock
    return True
