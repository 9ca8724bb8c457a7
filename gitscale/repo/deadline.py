"""How long one git command may run, and ending one that ran too long with what it started.

A remote that accepts the connection and then never answers (a firewall that drops packets
after the handshake, a hung server, a proxy that holds the request) kept git waiting for ever:
git has no timeout of its own over ``git://`` or SSH, and over HTTP(S) none once connected. A
`run` loop stopped scaling without an error; a CronJob's pass was killed at its deadline
without a word. Every git command gitscale starts is now given ``GITSCALE_GIT_TIMEOUT``
(default 120 s; local commands take well under a second on 10,000 manifests), then stopped
with its helpers and said as a ``GitError``; over HTTP(S) a transfer slower than 1 KB/s for 60 s
is ended by git itself first (``GIT_HTTP_LOW_SPEED_LIMIT``/``_TIME``, unless set).
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable, Mapping, Protocol

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
    try:
        seconds = float(text) if text.replace(".", "", 1).isdigit() else \
            parse_duration(text).total_seconds()
    except ValueError:
        seconds = 0.0
    if seconds <= 0:
        raise InputError(TIMEOUT_VARIABLE, f"expected a positive duration such as 120, 90s "
                                           f"or 5m, got {text!r}")
    return seconds


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

    def kill(self) -> None: ...


def end_tree(proc: Process) -> None:
    """Kill git and every process it started (read before git is killed: once it is gone
    its children belong to init). A helper left running would hold its connection, and a
    pipe of ours, until the remote answered — never, for a remote that does not."""
    helpers = descendants(proc.pid) if proc.poll() is None else []
    if proc.poll() is None:
        proc.kill()
    for pid in helpers:
        try:
            os.kill(pid, 9)
        except (ProcessLookupError, PermissionError):
            pass


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
