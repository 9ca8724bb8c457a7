"""`Started.stop`: a git ended before its work is done is reaped within seconds, even when a
helper it started outlives it holding its stderr."""
from __future__ import annotations

import os
import signal
import stat
import time
from pathlib import Path

import pytest

from gitscale.repo.git import Git

# A remote helper (``stuck::…`` runs ``git-remote-stuck``) that never answers, with a child of
# its own: both hold git's stderr, which they inherited, after git is killed.
_HELPER = """#!/bin/sh
sleep 60 &
echo "$$ $!" > "$STUCK_PIDS"
wait
"""


def test_a_clone_whose_helper_holds_stderr_is_stopped_within_seconds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    helper = bin_dir / "git-remote-stuck"
    helper.write_text(_HELPER)
    helper.chmod(helper.stat().st_mode | stat.S_IXUSR)
    pids_file = tmp_path / "pids"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STUCK_PIDS", str(pids_file))
    started = Git(tmp_path).start("clone", "--quiet", "stuck::nowhere", str(tmp_path / "c"))
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 10
        while not pids and time.monotonic() < deadline:  # the helper and its child run
            text = pids_file.read_text() if pids_file.exists() else ""
            pids = [int(p) for p in text.split()] if len(text.split()) == 2 else []
            time.sleep(0.02)
        assert len(pids) == 2, "the helper did not start"
        begun = time.monotonic()
        started.stop(grace=1.0)
        took = time.monotonic() - begun
        assert took < 4, f"stop() took {took:.1f} s"  # (it waited for `sleep 60` before)
        assert started.proc.returncode == -signal.SIGKILL  # git ended and reaped
        assert started.proc.stderr is not None and started.proc.stderr.closed
        for pid in pids:  # (the helper, left alone, still runs: the test ends it)
            os.kill(pid, 0)
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if started.proc.returncode is None:
            started.proc.kill()
            started.proc.wait()

