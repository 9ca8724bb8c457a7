"""`serve` lives for months: the clone it keeps is one that gitscale tidies (no reflog, no
background gc: ``tests/repo/test_kept_clone.py``), held by its owner's lock while it runs, and
gone with it."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from gitscale.repo import scratch
from tests.commands.test_serve import Server, job, remote_state, repo, wait_for_commit
from tests.helpers import git

__all__ = ["repo"]  # the fixture, shared with test_serve.py


def test_serve_keeps_a_clone_made_for_months_and_removes_it_at_its_stop(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    server = Server(repo.parent / "remote.git", window="1s")  # a bare repo: cloned
    try:
        commits = remote_state(repo)[0]
        assert server.post(job(7, "queued", ["self-hosted", "linux"]))[0] == 202
        wait_for_commit(server, repo, commits)
        (clone,) = temp.glob("gitscale-clone.*")
        assert (clone / scratch.LOCK).is_file()
        assert scratch.sweep(str(temp)) == []  # its owner lives: never swept
        root = clone / "repo"
        assert git(root, "config", "gc.auto") == "0"
        assert git(root, "config", "core.logAllRefUpdates") == "false"
        assert not (root / ".git" / "logs").exists()
        assert not (root / ".git" / "objects" / "info" / "alternates").exists()  # its own
    finally:
        server.close()
    assert not list(temp.glob("gitscale-*"))
