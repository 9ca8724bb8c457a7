"""`Started.stop`: a git ended before its work is done is reaped within seconds, with the helper
it started and that helper's child, which held its stderr."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from gitscale.repo.git import Git
from tests.repo.stuck import alive, install_stuck_helper


def test_a_clone_whose_helper_holds_stderr_is_stopped_within_seconds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the helper and its child hold git's stderr, which they inherited, after git is killed
    pids_file = install_stuck_helper(tmp_path, monkeypatch)
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
        # git ended and reaped: on its helper's end (128) or asked to (SIGTERM)
        assert started.proc.returncode in (128, -signal.SIGTERM), started.proc.returncode
        assert started.proc.stderr is not None and started.proc.stderr.closed
        deadline = time.monotonic() + 5  # the helper and its child were ended with git
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not [pid for pid in pids if alive(pid)]
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if started.proc.returncode is None:
            started.proc.kill()
            started.proc.wait()

