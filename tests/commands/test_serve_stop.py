"""`gitscale serve` stopped (SIGTERM: a rollout) while its config repo's git server hangs: the
batch in flight and the last batch get ``--shutdown-timeout`` from the stop, not 3 tries of a
fetch and a push bounded by the git timeout (some 6 minutes at 120 s, far past the pod's grace
period: Kubernetes killed it mid-push); what did not land is named in one line, and the resync
at the next start recovers it. A real ``git http-backend`` on 127.0.0.1 behind a proxy that
stops answering (``tests/integration/stalling_proxy.py``), real `gitscale serve` processes,
the fake GitHub of tests/demand for the resync."""
from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from tests.commands.test_serve import CONFIG, SECRET, Server, job
from tests.commands.test_serve_hold_kill import MATCH, STATE, Serve, make
from tests.commands.test_serve_sets import commits, remote, shown, until
from tests.demand.fake_github import FakeGitHub
from tests.demand.conftest import GH_TOKEN
from tests.helpers import RUNNERSET, git, make_repo
from tests.integration.git_http import GitHTTPServer
from tests.integration.stalling_proxy import StallingProxy

LINUX = ["self-hosted", "linux"]
GPU = ["self-hosted", "gpu"]
TOKEN = "tok-" + "7" * 32


@pytest.fixture
def git_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[GitHTTPServer]:
    """The config repo's git server; one git command may run for a minute (the stop deadline,
    not the git timeout, must end a hung one)."""
    monkeypatch.setenv("GITSCALE_GIT_TOKEN", TOKEN)
    monkeypatch.setenv("GIT_TERMINAL_PROMPT", "0")
    monkeypatch.setenv("GITSCALE_GIT_TIMEOUT", "60")
    server = GitHTTPServer(tmp_path, user="x-access-token", token=TOKEN)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def proxy(git_server: GitHTTPServer) -> Iterator[StallingProxy]:
    stalling = StallingProxy(git_server.port)
    yield stalling
    stalling.close()


def no_lock_left(bare: Path) -> list[str]:
    return [str(p.relative_to(bare)) for p in bare.rglob("*.lock")]


def test_the_last_batch_against_a_hung_git_server_ends_at_the_deadline_and_is_named(
        tmp_path: Path, git_server: GitHTTPServer, proxy: StallingProxy,
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    repo = make_repo(tmp_path, {"gitscale.yaml": CONFIG,
                                "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
                                "sets/gpu.yaml": RUNNERSET.format(name="gpu", replicas=0)})
    # (a window of an hour: only the last batch at the stop writes)
    server = Server(proxy.url("remote.git"), window="1h", shutdown_timeout="2s")
    before = commits(repo)  # (the start's batch claimed the sets)
    for job_id, labels in ((1, LINUX), (2, LINUX), (3, GPU)):
        assert server.post(job(job_id, "queued", labels))[0] == 202
    proxy.hang()
    began = time.monotonic()
    server.close()  # the stop: exit 0 (Server.close checks it)
    took = time.monotonic() - began
    assert took < 20, f"the stop took {took:.1f}s"  # (2 s and the stop; it was 3 × 2 × 60 s)
    err = capfd.readouterr().err
    line = ("stopping: the last batch did not land within --shutdown-timeout 2s (git fetch was "
            "stopped at the deadline); not committed: 3 accepted events (gpu: queued job 3; "
            "linux: queued jobs 1, 2); with --resync 0 nothing recovers them")
    assert line in err, err
    assert err.count("stopping: the last batch did not land") == 1
    assert "batch failed" not in err, err  # (the batch cut at the deadline: the stop's line)
    assert "Traceback" not in err and TOKEN not in err
    assert err.rstrip().endswith("stopped"), err
    proxy.release()
    assert commits(repo) == before
    assert git(remote(repo), "fsck", "--no-progress") == ""
    assert no_lock_left(remote(repo)) == []


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    monkeypatch.setenv("GH_TOKEN", GH_TOKEN)
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", SECRET)
    with FakeGitHub(token=GH_TOKEN) as fake:
        fake.add_repo("octo-org", "octo-repo")
        yield fake


def test_what_the_stop_could_not_land_comes_back_from_the_resync_at_the_next_start(
        tmp_path: Path, github: FakeGitHub, git_server: GitHTTPServer,
        proxy: StallingProxy) -> None:
    """The README's promise, checked: serve accepts two queued jobs while its git server
    hangs, the SIGTERM comes with their batch in flight, serve exits 0 within its
    --shutdown-timeout naming them; the next serve's resync finds them queued on GitHub and
    reserves them again."""
    repo = make(tmp_path, github)
    bare = remote(repo)
    first = Serve(repo, tmp_path / "first.log",
                  url=proxy.url("remote.git"), extra=["--shutdown-timeout", "2s"])
    try:
        first.said(MATCH)  # the start's resync: GitHub lists no job yet
        started = commits(repo)
        jobs = [github.add_run("octo-org/octo-repo", "queued", [("queued", LINUX)]).jobs[0]["id"]
                for _ in range(2)]
        proxy.hang()
        for one in jobs:
            assert first.post(job(one, "queued", LINUX)) == 202
        until(lambda: proxy.stalled > 0, "no batch tried the hung server")
        began = time.monotonic()
        assert first.end(signal.SIGTERM) == 0
        took = time.monotonic() - began
    finally:
        first.close()
    assert took < 20, f"the stop took {took:.1f}s"
    log = first.text()
    assert re.search(
        r"stopping: the last batch did not land within --shutdown-timeout 2s \(git fetch was "
        rf"stopped at the deadline\); not committed: 2 accepted events \(linux: queued jobs "
        rf"{jobs[0]}, {jobs[1]}\); the resync at the next start recovers them from GitHub's "
        r"list of queued and running jobs", log), log
    assert "Traceback" not in log and TOKEN not in log and GH_TOKEN not in log
    assert log.rstrip().endswith("stopped"), log
    proxy.release()
    assert commits(repo) == started, "nothing landed"
    assert git(bare, "fsck", "--no-progress") == "" and no_lock_left(bare) == []
    book = yaml.safe_load(shown(repo, STATE))["sets"].get("linux") or {}
    assert book.get("reservations", []) == []

    again = Serve(repo, tmp_path / "second.log", url=git_server.url("remote.git"),
                  extra=["--window", "1s"])
    try:
        again.said(f"resync linux: added 2 (2 queued, 0 running: jobs {jobs[0]}, {jobs[1]})")
        until(lambda: commits(repo) > started, "the resync's reservations did not land")
        assert again.end(signal.SIGTERM) == 0
    finally:
        again.close()
    book = yaml.safe_load(shown(repo, STATE))["sets"]["linux"]
    assert sorted(r["job"] for r in book["reservations"]) == sorted(jobs)
    spec = yaml.safe_load(shown(repo, "sets/linux.yaml"))["spec"]
    assert spec["replicas"] == 2
    assert os.environ.get("GITSCALE_GIT_TIMEOUT") == "60"


def test_a_push_that_landed_but_went_unanswered_is_not_said_to_be_uncommitted(
        tmp_path: Path, git_server: GitHTTPServer, proxy: StallingProxy,
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    """The push reaches the server, which takes it; its answer never comes back (a proxy
    that drops it, a post-receive hook that hangs). git push is stopped at the deadline with
    the commit on the remote: the stop's line must not say the events were not committed."""
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    repo = make_repo(tmp_path, {"gitscale.yaml": CONFIG,
                                "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
                                "sets/gpu.yaml": RUNNERSET.format(name="gpu", replicas=0)})
    server = Server(proxy.url("remote.git"), window="1h", shutdown_timeout="2s")
    before = commits(repo)
    for job_id, labels in ((1, LINUX), (3, GPU)):
        assert server.post(job(job_id, "queued", labels))[0] == 202
    proxy.hang_answers()
    server.close()  # exit 0
    err = capfd.readouterr().err
    assert commits(repo) == before + 1, "the push did not land"
    line = ("stopping: the last batch may have landed: git push was stopped at the deadline "
            "(--shutdown-timeout 2s) before the remote answered; if it did not land, not "
            "committed: 2 accepted events (gpu: queued job 3; linux: queued job 1); with "
            "--resync 0 nothing recovers them")
    assert line in err, err
    assert "not landed" not in err and "did not land within" not in err, err
    assert "Traceback" not in err and TOKEN not in err
    proxy.release()
    assert git(remote(repo), "fsck", "--no-progress") == ""
    assert no_lock_left(remote(repo)) == []


def test_a_push_that_landed_unanswered_is_not_counted_twice_by_the_next_resync(
        tmp_path: Path, github: FakeGitHub, git_server: GitHTTPServer,
        proxy: StallingProxy) -> None:
    """The stop's push landed without an answer; the next serve's resync finds the jobs
    reserved already and adds none again."""
    repo = make(tmp_path, github)
    first = Serve(repo, tmp_path / "first.log",
                  url=proxy.url("remote.git"), extra=["--shutdown-timeout", "2s"])
    try:
        first.said(MATCH)
        started = commits(repo)
        jobs = [github.add_run("octo-org/octo-repo", "queued", [("queued", LINUX)]).jobs[0]["id"]
                for _ in range(2)]
        proxy.hang_answers()
        for one in jobs:
            assert first.post(job(one, "queued", LINUX)) == 202
        until(lambda: commits(repo) > started, "the push did not reach the server")
        assert first.end(signal.SIGTERM) == 0
    finally:
        first.close()
    assert "the last batch may have landed: git push was stopped" in first.text(), first.text()
    proxy.release()
    again = Serve(repo, tmp_path / "second.log", url=git_server.url("remote.git"),
                  extra=["--window", "1s"])
    try:
        again.said(MATCH)  # (the jobs reserved already: none added again)
        assert "added" not in again.text(), again.text()
        assert again.end(signal.SIGTERM) == 0
    finally:
        again.close()
    book = yaml.safe_load(shown(repo, STATE))["sets"]["linux"]
    assert sorted(r["job"] for r in book["reservations"]) == sorted(jobs)
    assert yaml.safe_load(shown(repo, "sets/linux.yaml"))["spec"]["replicas"] == 2
