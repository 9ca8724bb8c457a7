"""Temporary directories that a killed gitscale does not leave behind for ever.

A run removes its scratch directories (a clone of ``--repo URL``, the askpass script) when it
ends; a run killed with SIGKILL cannot. So each one is named after its owner,
``gitscale-KIND.HOST.PID.RANDOM``, and every run first removes those of its host whose owner is
gone. The host is in the name because a temp directory may be shared by containers whose
process numbers mean different things.

A process number alone cannot say that the owner is gone: in a container gitscale is process 1,
and after a restart (an OOM kill, a failed liveness probe) the new process 1 finds the clone
of the old one in the same ``/tmp`` (an emptyDir lives as long as the pod), on the same host
name — it took it for its own, and each restart left a clone behind. So the owner also holds
an ``flock`` on ``LOCK`` inside the directory for as long as it lives (the kernel releases it
when the process dies, however it dies): a directory whose lock can be taken has no owner,
whatever its number says. A directory without the lock file (made by an older gitscale, or
caught between its creation and its lock) is judged by the number alone, as before.
"""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import tempfile
from pathlib import Path

_NAME = re.compile(r"^gitscale-[a-z]+\.(?P<host>[\w-]+)\.(?P<pid>\d+)\.")
LOCK = ".owner.lock"
_held: dict[str, int] = {}  # directory → the descriptor holding its lock, for this process's life


def _host() -> str:
    return re.sub(r"[^\w-]", "-", os.uname().nodename)[:64] or "host"


def make(kind: str) -> Path:
    """A new private directory (0700) for ``kind`` (a lowercase word), owned by this process
    until ``remove`` (or its end)."""
    sweep()
    path = Path(tempfile.mkdtemp(prefix=f"gitscale-{kind}.{_host()}.{os.getpid()}."))
    # locked under another name first: a sweep never finds the lock file not yet locked
    fd = os.open(path / f"{LOCK}.new", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # new, and its name is ours: never waits
    os.rename(path / f"{LOCK}.new", path / LOCK)
    _held[str(path)] = fd
    return path


def remove(path: Path) -> None:
    """Delete a directory ``make`` gave, and let go of its lock."""
    shutil.rmtree(path, ignore_errors=True)
    fd = _held.pop(str(path), None)
    if fd is not None:
        os.close(fd)


def sweep(directory: str | None = None) -> list[Path]:
    """Remove the scratch directories of this host's dead gitscale processes; return them."""
    parent = Path(directory or tempfile.gettempdir())
    host = _host()
    removed: list[Path] = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        match = _NAME.match(name)
        if not match or match.group("host") != host:
            continue
        path = parent / name
        if path.is_symlink() or not path.is_dir() or path.stat().st_uid != os.getuid():
            continue  # never follow a link, never touch another user's files
        if str(path) in _held or not _orphaned(path, int(match.group("pid"))):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _orphaned(path: Path, pid: int) -> bool:
    """Is the process that made ``path`` gone? By its lock when it has one, else its number."""
    try:
        fd = os.open(path / LOCK, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return not _alive(pid)  # no lock file: an older gitscale's, or not locked yet
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: its owner lives
    finally:
        os.close(fd)  # (releases the lock if this process took it)
    return True


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # another user's process (or a number we cannot ask about): leave it
    return True
