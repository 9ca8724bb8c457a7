"""How long one git command may run, and ending one that ran too long with what it started.

A remote that accepts the connection and then never answers (a firewall that drops packets
after the handshake, a hung server, a proxy that holds the request) kept git waiting for ever:
git has no timeout of its own over ``git://`` or SSH, and over HTTP(S) none once connected. A
`run` loop stopped scaling without an error; a CronJob's pass was killed at its deadline
without a word. Every git command gitscale starts is now given ``GITSCALE_GIT_TIMEOUT``
(default 120 s; local commands take well under a second on 10,000 manifests), then stopped
with its helpers and said as a ``GitError``; over HTTP(S) a transfer slower than 1 KB/s for 60 s
is ended by git itself first (``GIT_HTTP_LOW_SPEED_LIMIT``/``_TIME``, unless set).

A process that is stopping has a second bound, its stop deadline (``StopDeadline``: `serve`'s
and `run`'s ``--shutdown-timeout`` after SIGTERM): a hung remote held serve's last batch for up
to 3 tries of a fetch and a push of 120 s each, far past the pod's grace period, and Kubernetes
killed it mid-push. Once the deadline passes, the git commands that talk to a remote (fetch,
push, clone, ls-remote) are ended, or refused before they start, as a ``GitStopped``; local
commands (a commit, a reset) are left to finish: they take well under a second, and one killed
half-way could leave a checkout's ``index.lock`` behind.
"""
from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Callable, Iterator, Mapping, Protocol

from gitscale.errors import InputError
from gitscale.timeutil import parse_duration

TIMEOUT_VARIABLE = "GITSCALE_GIT_TIMEOUT"
DEFAULT_TIMEOUT = 120.0  # seconds
# git's own stall check over HTTP(S), given when the caller's environment sets none
LOW_SPEED = {"GIT_HTTP_LOW_SPEED_LIMIT": "1000", "GIT_HTTP_LOW_SPEED_TIME": "60"}


def git_timeout() -> float:
    """Seconds one git command may run: ``GITSCALE_GIT_TIMEOUT`` (``90``, ``90s``, ``5m``),
    else 120. A value that is not a positive duration is refused, naming the variable."""
    text = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    seconds = _seconds(text)
    if seconds is None or seconds <= 0:
        raise InputError(TIMEOUT_VARIABLE, f"expected a positive duration such as 120, 90s "
                                           f"or 5m, got {text!r}")
    return seconds


def seconds_of(option: str, text: str, *, least: float = 1.0, most: float = 3600.0) -> float:
    """A number of seconds given as ``20``, ``20s`` or ``1m``, from ``least`` to ``most``;
    anything else is refused, naming ``option``."""
    text = text.strip()
    seconds = _seconds(text)
    if seconds is None or not least <= seconds <= most:
        raise InputError(option, f"expected a duration from {least:g}s to {most:g}s such as 20, "
                                 f"20s or 1m, got {text!r}")
    return seconds


def _seconds(text: str) -> float | None:
    """``90``, ``90.5``, ``90s``, ``5m`` in seconds; None for anything else."""
    try:
        return float(text) if text.replace(".", "", 1).isdigit() else \
            parse_duration(text).total_seconds()
    except ValueError:
        return None


# The git commands that talk to a remote: the ones a stop deadline ends (``StopDeadline``).
REMOTE_VERBS = frozenset({"clone", "fetch", "push", "ls-remote", "pull"})
# How often a remote git command looks whether a stop deadline was set meanwhile (the stop
# comes from another thread while git waits on the remote).
STOP_POLL = 0.2  # seconds


class StopDeadline:
    """When a stopping process must be done with its remote: ``seconds`` after the stop (the
    event ``follow`` watches) was asked for. ``at`` is None until then, then a
    ``time.monotonic()`` time; set from a watching thread, read by the git commands of the
    thread that runs ``stopping_by`` (a remote command started before the stop sees it too:
    ``git.Started`` looks every ``STOP_POLL`` seconds)."""

    def __init__(self, seconds: float, option: str = "--shutdown-timeout") -> None:
        self.seconds, self.option = seconds, option
        self.at: float | None = None
        self._closed = threading.Event()

    def start(self, now: float | None = None) -> None:
        """The stop was asked for: the clock runs from now (from the first call only)."""
        if self.at is None:
            self.at = (time.monotonic() if now is None else now) + self.seconds

    def left(self) -> float | None:
        """Seconds left (0 once passed); None while no stop was asked for."""
        return None if self.at is None else max(0.0, self.at - time.monotonic())

    def passed(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at

    def said(self) -> str:
        """``--shutdown-timeout 20s``: the option and its value, for messages."""
        return f"{self.option} {self.seconds:g}s"

    def stopped(self, verb: str) -> str:
        """What a remote command ended (or refused) at the deadline says."""
        return (f"git {verb} was stopped: the process is stopping and its stop deadline "
                f"({self.said()} after the stop) passed before git was done with the remote")

    def follow(self, stop: threading.Event) -> None:
        """Start the clock when ``stop`` is set, from a thread of its own, until ``close``."""
        def watch() -> None:
            # (looks at ``stop`` without waiting on it: a caller's stop object may count or
            # answer its waits — the loop's wait between passes — and this is not one)
            while not self._closed.wait(STOP_POLL):
                if stop.is_set():
                    self.start()
                    return
        threading.Thread(target=watch, name="stop-deadline", daemon=True).start()

    def close(self) -> None:
        """The process is done: the watching thread ends."""
        self._closed.set()


_STOPPING: ContextVar[StopDeadline | None] = ContextVar("gitscale_stop_deadline", default=None)


@contextmanager
def stopping_by(deadline: StopDeadline, stop: threading.Event) -> Iterator[StopDeadline]:
    """The git commands this thread starts inside keep ``deadline``, which starts when
    ``stop`` is set (`serve`'s batches, `run`'s passes: the main thread); other threads' and
    other processes' commands are not touched."""
    deadline.follow(stop)
    token = _STOPPING.set(deadline)
    try:
        yield deadline
    finally:
        _STOPPING.reset(token)
        deadline.close()


def stop_deadline() -> StopDeadline | None:
    """The stop deadline of this thread's commands (``stopping_by``), if any."""
    return _STOPPING.get()


def low_speed_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``LOW_SPEED``'s variables the caller's environment does not set itself."""
    return {name: value for name, value in LOW_SPEED.items() if not environ.get(name)}


def descendants(pid: int, proc_dir: Path = Path("/proc")) -> list[int]:
    """The processes ``pid`` started, and theirs (git's remote helper, ssh, a credential
    helper), read from ``/proc``; none where there is no ``/proc``."""
    children: dict[int, list[int]] = {}
    try:
        entries = [e for e in os.listdir(proc_dir) if e.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            stat = (proc_dir / entry / "stat").read_text()
        except OSError:  # (it ended meanwhile)
            continue
        # "pid (comm) state ppid …": comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


class Process(Protocol):
    """What ``end_tree`` needs of a started process (a ``subprocess.Popen``)."""

    pid: int

    def poll(self) -> int | None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


# How long git is given to end when asked (SIGTERM) before it is killed.
TERM_GRACE = 1.0  # seconds


def end_tree(proc: Process, grace: float = TERM_GRACE) -> None:
    """End git and every process it started (read before git ends: once it is gone its
    children belong to init). The helpers are killed first, at once (a pid read is not left
    time to be taken by another process): a helper left running would hold its connection,
    and a pipe of ours, until the remote answered — never, for a remote that does not. Then
    git is asked to end (SIGTERM), and given ``grace`` seconds before it is killed: it
    removes the lock files it holds (a depth-1 fetch holds ``.git/shallow.lock`` while the
    pack comes; a ref's update its ``.lock``), where killed outright it left them, and every
    later fetch in that clone failed ('File exists')."""
    helpers = descendants(proc.pid) if proc.poll() is None else []
    for pid in helpers:
        try:
            os.kill(pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
    if proc.poll() is None:
        proc.terminate()
        until = time.monotonic() + grace
        while proc.poll() is None and time.monotonic() < until:
            time.sleep(0.01)
    if proc.poll() is None:
        proc.kill()


class ReadDeadline:
    """The deadline of a streamed read (``Git.blocks``): ``seconds`` of git's time, not the
    reader's. While the reader holds a block (``hold`` … ``resume``) the clock stops: a
    ``gitscale history | less`` read page by page keeps git's pipe full, git waiting on the
    reader, not stuck, and ending it there cut the history short with a timeout blamed on
    the remote. ``expire`` is called (once, from a timer's thread) when git's time is up;
    ``fired`` says it was. One timer thread, as before, unless the reader held a block past
    the time left: then one more when it resumes."""

    def __init__(self, seconds: float, expire: Callable[[], None]) -> None:
        self._left, self._since = seconds, time.monotonic()
        self._held, self._over = False, False
        self._expire = expire
        self._lock = threading.Lock()
        self.fired = False
        self._timer = self._arm(seconds)

    def _arm(self, seconds: float) -> threading.Timer:
        timer = threading.Timer(max(0.0, seconds), self._due)
        timer.daemon = True
        timer.start()
        return timer

    def _due(self) -> None:
        with self._lock:
            if self._over or self._held:
                return  # (``resume`` arms a timer for what is left)
            left = self._left - (time.monotonic() - self._since)
            if left > 0:  # (the reader held a block meanwhile)
                self._timer = self._arm(left)
                return
            self.fired = self._over = True
        self._expire()

    def hold(self) -> None:
        """The reader has a block: git's clock stops."""
        with self._lock:
            self._left -= time.monotonic() - self._since
            self._held = True

    def resume(self) -> None:
        """The reader reads again: git's clock goes on from where it stopped."""
        with self._lock:
            self._since, self._held = time.monotonic(), False
            if not self._over and not self._timer.is_alive():
                self._timer = self._arm(self._left)

    def cancel(self) -> None:
        """The read is over (git's output read to its end, or the reader gone)."""
        with self._lock:
            self._over = True
            self._timer.cancel()
