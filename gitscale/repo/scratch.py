"""Temporary directories that a killed gitscale does not leave behind for ever.

A run removes its scratch directories (a clone of ``--repo URL``, the askpass script) when it
ends; a run killed with SIGKILL cannot. So each one is named after its owner,
``gitscale-KIND.HOST.PID.RANDOM``, and every run first removes those of its host whose process
is gone. The host is in the name because a temp directory may be shared by containers whose
process numbers mean different things.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

_NAME = re.compile(r"^gitscale-[a-z]+\.(?P<host>[\w-]+)\.(?P<pid>\d+)\.")


def _host() -> str:
    return re.sub(r"[^\w-]", "-", os.uname().nodename)[:64] or "host"


def make(kind: str) -> Path:
    """A new private directory (0700) for ``kind`` (a lowercase word), owned by this process."""
    sweep()
    return Path(tempfile.mkdtemp(prefix=f"gitscale-{kind}.{_host()}.{os.getpid()}."))


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
        if not match or match.group("host") != host or _alive(int(match.group("pid"))):
            continue
        path = parent / name
        if path.is_symlink() or not path.is_dir() or path.stat().st_uid != os.getuid():
            continue  # never follow a link, never touch another user's files
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


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
