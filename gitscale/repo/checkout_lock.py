"""One gitscale pass at a time in a checkout: an ``flock`` on ``LOCK`` in its git directory.

Two gitscale processes in one checkout share the work tree, the index, FETCH_HEAD and the
record of a write in progress (``gitscale.repo.workspace``): without a hold, the second took
the first one's edit in progress for the leftovers of a killed run. The kernel releases the
lock when its holder dies, so a killed run leaves none behind.
"""
from __future__ import annotations

import errno
import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from gitscale.errors import GitError
from gitscale.repo.git import Git

LOCK = "gitscale.lock"  # in the git directory: held by the pass writing in the checkout


@contextmanager
def hold_checkout(repo: Git, label: str, timeout: float,
                  say: Callable[[str], None] | None = None,
                  clock: Callable[[], float] = time.monotonic, *,
                  reading: bool = False, path: Path | None = None) -> Iterator[None]:
    """Hold a checkout against another gitscale process working in it (an ``flock`` on
    ``LOCK`` in the git directory, released by the kernel when its holder dies, so a killed
    run leaves no lock behind): a pass that writes, `plan` (which would otherwise read the
    other's edit in progress) and `crd --repo`. A second process waits, saying so once
    through ``say``, up to ``timeout`` seconds, then gives up.

    A lock file this process may not write (another user's, in a shared checkout) is held
    through a read-only descriptor (``flock`` needs no more). One that cannot be opened at
    all (a read-only mount): a ``reading`` command (`plan`) goes on without the hold — no
    writer can be editing there — and a writing one stops with an error naming the file.

    The holder writes its process number into the file for a waiter's message, and takes it
    out when it lets go: a later holder that cannot write its own (a read-only descriptor) is
    then "pid unknown", not the process number of one gone (which another process may have
    by then)."""
    if path is None:  # (``path``: where ``repo.git_path(LOCK)`` is, when already asked)
        path = repo.git_path(LOCK)
    fd = _open_lock(path, label, reading)
    if fd is None:
        yield
        return
    held = False
    try:
        started = None
        while not _try_lock(fd):
            if started is None:
                started = clock()
                if say is not None:
                    say(f"waiting for another gitscale run in {label} "
                        f"({_holder(fd)}) to finish its pass")
            if clock() - started >= timeout:
                raise GitError(f"{label}: another gitscale run ({_holder(fd)}) has "
                               f"been writing in this checkout for more than {timeout:g} "
                               f"s (it holds {path}); nothing was written")
            time.sleep(0.1)
        held = True
        try:  # who holds it, for a waiter's message: best effort (a read-only descriptor)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass
        yield
    finally:
        if held:
            try:  # still ours: no one reads it as the holder once we are gone
                os.ftruncate(fd, 0)
            except OSError:
                pass
        os.close(fd)  # releases the lock


def _open_lock(path: Path, label: str, reading: bool) -> int | None:
    cloexec = getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | cloexec, 0o644)
    except OSError as exc:
        try:
            return os.open(path, os.O_RDONLY | cloexec)
        except OSError:
            pass
        if reading:
            return None
        raise GitError(f"{label}: cannot hold the checkout for this pass: {path}: "
                       f"{exc.strerror or type(exc).__name__}; nothing was written") from None


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _holder(fd: int) -> str:
    """Who holds the lock, as its holder wrote it: ``pid N``."""
    try:
        pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        pid = ""
    return f"pid {pid}" if pid.isdigit() else "pid unknown"
