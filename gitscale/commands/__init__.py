"""One module per command; each is a typed function returning an exit code."""
from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable, Iterator

from gitscale.errors import InputError
from gitscale.logline import log as log  # what run and serve report (a timestamped line)
from gitscale.timeutil import format_time, parse_duration, parse_time, utcnow

if TYPE_CHECKING:
    import threading

    from gitscale.demand.file import FileSource

    from gitscale.plan.cache import StateCache
    from gitscale.config.load import Config
    from gitscale.repo.index import Tree
    from gitscale.repo.workspace import Workspace

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CHANGES = 2
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as a shell reports it)


@dataclass(frozen=True)
class RepoOptions:
    """The options every command takes: where the config repo is and which file configures it."""

    repo: str
    branch: str | None
    config: str


def option_time(option: str, text: str | None) -> datetime | None:
    """An RFC 3339 time given to ``option`` (``--since``, ``--until``); an error naming it."""
    if text is None:
        return None
    try:
        return parse_time(text)
    except ValueError as exc:
        raise InputError(option, str(exc)) from None


def resolve_now(now: str | None) -> tuple[datetime, str | None]:
    """The pass clock, and the git date to stamp commits with when the clock is pinned."""
    if now is None:
        return utcnow(), None
    try:
        value = parse_time(now)
    except ValueError as exc:
        raise InputError("--now", str(exc)) from None
    return value, format_time(value)


def resolve_every(every: str | None) -> timedelta:
    """``--every``: how often a `plan` or `reconcile` runs (a cron's period), the time a
    forecast's cushion must serve until the next pass; a minute when not given."""
    if every is None:
        from gitscale.core.forecast import DEFAULT_WINDOW  # (not on every command's start)

        return DEFAULT_WINDOW
    try:
        value = parse_duration(every)
    except ValueError as exc:
        raise InputError("--every", str(exc)) from None
    if not timedelta(seconds=1) <= value <= timedelta(hours=1):
        raise InputError("--every", f"{every!r} must be between 1s and 1h (a forecast's "
                         "cushion covers the jobs of one run to the next)")
    return value


CHECKPOINT_SECONDS = 600.0  # run and serve save what they learnt at least this often


@dataclass
class Checkpoint:
    """Saves what a long-running command (run, serve) learnt at most every ``every`` seconds,
    besides at its stop: a ``kill -9`` (an OOM kill, a node lost) then costs what it learnt
    since the last save, not since its start (the next start would be a cold pass, and a
    saturated set's job ids would be forgotten)."""

    save: Callable[[], None]
    every: float | None = None  # None: CHECKPOINT_SECONDS
    clock: Callable[[], float] = time.monotonic
    last: float | None = field(default=None)

    def __call__(self) -> None:
        """Called after each pass or batch: saves when ``every`` has gone by since the
        first call or the last save."""
        now = self.clock()
        if self.last is None:
            self.last = now
        elif now - self.last >= (CHECKPOINT_SECONDS if self.every is None else self.every):
            self.save()
            self.last = self.clock()


def given_demand(demand: str | None) -> "FileSource | None":
    """``--demand`` as typed, once per command: a file is read at each pass; ``-`` (standard
    input) and a pipe (``<(…)``, a FIFO) are read here, before the pass, and what they held
    serves every attempt and pass (``demand.file.given``)."""
    if not demand:
        return None
    import sys

    from gitscale.demand.file import STDIN, given

    if demand == STDIN and sys.stdin is not None and sys.stdin.isatty():
        import click

        click.echo("reading --demand from standard input (end it with Ctrl-D)", err=True)
    return given(demand)


def stop_on_signals(what: str) -> "threading.Event":
    """An event set once SIGTERM or SIGINT arrives: the loop finishes ``what`` and stops.

    The Python handler takes no lock: a handler runs on the main thread between two bytecodes,
    possibly while that thread holds the event's own lock inside ``stop.wait()``, and an
    ``Event.set()`` there waits for itself forever (seen: one SIGTERM in six hung `run`). The C
    handler writes the signal's number into a pipe (``signal.set_wakeup_fd``); a thread reads
    it, logs the line and sets the event — for the first signal only: a supervisor that
    signals the process and then its group (GNU timeout, a wrapper script) sends two, and the
    stop is one. Call it from the main thread, once per process."""
    import os
    import signal
    import threading

    stop = threading.Event()
    wake, woken = os.pipe()
    os.set_blocking(woken, False)  # the C handler must never block on a full pipe
    stopping = {signal.SIGTERM.value, signal.SIGINT.value}

    def watch() -> None:
        while data := os.read(wake, 64):
            for signum in data:
                if signum in stopping and not stop.is_set():  # said once, however many come
                    log(f"{signal.Signals(signum).name}: {what}, then stopping")
                    stop.set()

    threading.Thread(target=watch, name="signals", daemon=True).start()
    signal.set_wakeup_fd(woken, warn_on_full_buffer=False)
    for signum in stopping:
        signal.signal(signum, _ignore)  # a Python handler: the C one writes to the pipe
    return stop


def _ignore(_signum: int, _frame: object) -> None:
    """Nothing: ``stop_on_signals``'s thread does the work, outside the signal handler."""


def pass_inputs(ws: "Workspace", config_path: str,
                cache: "StateCache") -> tuple["Tree", "Config"]:
    """The index (blob ids of every tracked file) and the config of the commit a pass works
    on. In a sparse clone, the folders the pass reads from disk are checked out first."""
    import posixpath

    from gitscale.config.load import load_config
    from gitscale.config.sources import SOURCES
    from gitscale.repo.index import Tree, check_out
    from gitscale.webhooks.reservations_file import DIRECTORY

    tree = Tree.read(ws.git, sparse=ws.sparse)
    if ws.sparse:
        # the presets, the config's folder, and .gitscale/ (which sets `gitscale serve` scales);
        # a partial clone is checked out here the first time, these folders included
        check_out(ws.git, ws.root, tree, ["policies", DIRECTORY, posixpath.dirname(config_path)])
    config = load_config(ws.root, config_path, cache.configs)
    if ws.sparse:
        sources = {id(s.source): s.source for s in config.sets}.values()  # few, shared
        check_out(ws.git, ws.root, tree, {posixpath.dirname(path) for s in sources
                                          for path in SOURCES[s.kind].files(s.settings)})
    return tree, config


@contextmanager
def collector_off() -> Iterator[None]:
    """Import a command's modules with the garbage collector off, then freeze them as ``main``
    froze what came before: they live for the whole run, so the dozen collections their
    loading set off (≈ 2 ms of a `reconcile` pass of 0.25 s) would have walked objects that all
    survive. The collector is on again for the pass."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


# ONE_SHOT_GC: a one-shot `plan` or `reconcile` runs with the garbage collector off until it
# returns (the process ends then). What such a pass loads — the cached config, the state cache,
# the demand — lives to its end, yet set off collections that walked all of it, a full one
# among them: ≈ 17 ms of a 10,000-set pass (≈ 2 ms at 1,000). Not for `run` or `serve`.


@contextmanager
def begun(repo: str, branch: str | None, *, push: bool = True) -> Iterator[Any]:
    """``gitscale.repo.opening.begin`` for a one-shot pass's ``--repo`` and ``--branch``."""
    with collector_off():
        from gitscale.repo.opening import begin

    with begin(repo, branch, push=push, sparse=True) as started:
        yield started
