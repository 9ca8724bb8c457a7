"""A config repo that gitignores ``.gitscale/`` (a habit of some repos: tool state stays out of
git): serve's reservations file is still committed, since gitscale names it explicitly and the
next serve start, or another replica, reads it from the branch."""
from __future__ import annotations

import http.client
from pathlib import Path

import pytest
import yaml

from tests.commands.test_serve import CONFIG, SECRET, Server, job, remote_state, wait_for_commit
from tests.helpers import RUNNERSET, git, make_repo


def test_serve_commits_its_state_file_in_a_repo_that_ignores_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    repo = make_repo(tmp_path, {
        ".gitignore": ".gitscale/\n*.yaml.bak\n",
        "gitscale.yaml": CONFIG,
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "sets/gpu.yaml": RUNNERSET.format(name="gpu", replicas=0),
    })
    server = Server(repo, window="1s")
    try:
        before, _ = remote_state(repo)
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        for job_id in (1, 2, 3):
            assert server.post(job(job_id, "queued", ["self-hosted", "linux"]),
                               conn=conn)[0] == 202
        conn.close()
        wait_for_commit(server, repo, before)
        commits, spec = remote_state(repo)
        assert (commits, spec["replicas"]) == (before + 1, 3)
        remote = repo.parent / "remote.git"
        book = yaml.safe_load(git(remote, "show", "main:.gitscale/reservations.yaml"))
        assert len(book["sets"]["linux"]["reservations"]) == 3
        health = server.health()
        assert health["status"] == "ok" and health["last_error"] is None, health
    finally:
        server.close()
