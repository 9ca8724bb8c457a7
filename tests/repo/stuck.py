"""A git remote helper that never answers (``stuck::…`` runs ``git-remote-stuck``), with a
child of its own, and whether a process still runs: for the tests of git stopped midway."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

_HELPER = """#!/bin/sh
sleep 60 &
echo "$$ $!" > "$STUCK_PIDS"
wait
"""


def install_stuck_helper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put ``git-remote-stuck`` on PATH; the file where it writes its pid and its child's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    helper = bin_dir / "git-remote-stuck"
    helper.write_text(_HELPER)
    helper.chmod(helper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    pids = tmp_path / "pids"
    monkeypatch.setenv("STUCK_PIDS", str(pids))
    return pids


def alive(pid: int) -> bool:
    """Running (not gone, nor a zombie waiting to be reaped)."""
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
