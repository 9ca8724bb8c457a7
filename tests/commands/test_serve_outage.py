"""`gitscale serve` when things break under it, as the person paged sees it: the config repo's
git server (``git http-backend`` on 127.0.0.1) gone and back, a push refused for good, files
broken by hand while serve runs, deliveries no set takes. Each: no event lost, one log line
per failure streak that says what to do, and a line when it is over."""
from __future__ import annotations

import http.client
import os
import re
import time
from pathlib import Path
from typing import Iterator

import pytest

import gitscale.commands.serve as serve
from gitscale.webhooks.batch_loop import batch_delay
from tests.commands.test_serve import CONFIG, SECRET, Server, job, remote_state, wait_for_commit
from tests.helpers import RUNNERSET, git, make_repo
from tests.integration.git_http import GitHTTPServer

LINUX = ["self-hosted", "linux"]
TOKEN = "tok-" + "5" * 32


@pytest.fixture()
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("GITSCALE_GIT_TOKEN", TOKEN)
    monkeypatch.setenv("GIT_TERMINAL_PROMPT", "0")
    yield make_repo(tmp_path, {
        "gitscale.yaml": CONFIG,
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "sets/gpu.yaml": RUNNERSET.format(name="gpu", replicas=0),
    })


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed batch is tried again after a quarter of serve's backoff (0.5 s, 1 s, 2 s…
    after the 1 s window, not 2 s, 4 s, 8 s…): the same streak of tries in a quarter of the
    time. ``batch_delay`` itself is checked in test_serve.py."""
    monkeypatch.setattr(serve, "batch_delay",
                        lambda window, failures: batch_delay(window, failures) / 4
                        if failures else batch_delay(window, failures))


def git_server(root: Path, port: int = 0) -> GitHTTPServer:
    server = GitHTTPServer(root, user="x-access-token", token=TOKEN, port=port)
    server.start()
    return server


def wait_until(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


@pytest.mark.usefixtures("quick_batches")
def test_a_git_server_gone_for_a_while_is_one_line_and_every_event_lands(
        repo: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Each retry logged the whole git error again (three lines each, every backoff); now the
    streak is said once, and its end once; the events kept meanwhile all land."""
    remote = git_server(repo.parent)
    server = Server(remote.url("remote.git"), window="1s")
    try:
        before, _ = remote_state(repo)
        server.post(job(1, "queued", LINUX))
        wait_for_commit(server, repo, before)
        port = remote.port
        remote.stop()
        for job_id in (2, 3, 4):
            assert server.post(job(job_id, "queued", LINUX))[0] == 202
        wait_until(lambda: server.health()["status"] == "degraded", 20, "no failed batch")
        failed = capfd.readouterr().err
        time.sleep(2)  # two more tries (0.5 s, then 1 s later)
        failed += capfd.readouterr().err
        assert server.health()["pending_events"] == 3
        remote = git_server(repo.parent, port)  # back, at the same address
        commits = remote_state(repo)[0]
        wait_for_commit(server, repo, commits, timeout=30)
        assert remote_state(repo)[1]["replicas"] == 4
        assert server.health()["status"] == "ok"
    finally:
        server.close()
        remote.stop()
    err = failed + capfd.readouterr().err
    assert err.count("batch failed, ") == 1, err
    assert "batch still failing" not in err  # (a reminder comes after 30 minutes)
    # the three deliveries may straddle a batch (one every quarter second: quick_batches),
    # so the first failed batch may keep 1, 2 or 3 of them; all three kept: pending_events
    assert re.search(r"batch failed, [123] events? kept for the next try \(retried with "
                     r"backoff up to 60 s", err), err
    assert "logged again when it changes, and every 30m while it lasts" in err
    assert "batches land again, after " in err and " failed tries in " in err
    assert "Traceback" not in err and TOKEN not in err


@pytest.mark.usefixtures("quick_batches")
def test_a_push_refused_for_good_says_what_to_do_once(
        repo: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Branch protection: the refusal said "not retried" (in the log, then in /healthz's
    last_error) while serve retried it; now it says that serve tries again, and what a
    person can change."""
    hook = repo.parent / "remote.git" / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'GH006: Protected branch update failed for "
                    "refs/heads/main.' >&2\nexit 1\n")
    os.chmod(hook, 0o755)
    server = Server(repo, window="1s")
    try:
        before, _ = remote_state(repo)
        server.post(job(1, "queued", LINUX))
        wait_until(lambda: server.health()["status"] == "degraded", 20, "no failed batch")
        time.sleep(2)  # more refused tries (0.5 s, then 1 s later)
        health = server.health()
        assert health["pending_events"] == 1
        # /healthz says what the log says: the refusal, not the `reconcile`'s "not retried"
        assert "GH006: Protected branch update failed" in health["last_error"]
        assert "not retried" not in health["last_error"], health
        assert remote_state(repo)[0] == before
        hook.unlink()
        wait_for_commit(server, repo, before, timeout=30)
    finally:
        server.close()
    err = capfd.readouterr().err
    assert err.count("batch failed, ") == 1, err
    assert "GH006: Protected branch update failed" in err
    assert "not retried" not in err
    assert ("serve keeps the events and tries again every 60 s; to land them, let the identity "
            "serve pushes as") in err
    assert "push to main" in err and "(--branch)" in err


@pytest.mark.parametrize("path, broken, where", [
    pytest.param("gitscale.yaml", CONFIG.replace("maxReplicas: 2}", "maxReplicas: 2"),
                 "gitscale.yaml:10: not valid YAML", id="config"),
    pytest.param(".gitscale/reservations.yaml",
                 "served: [gpu, linux]\nsets:\n  linux:\n    reservations:\n"
                 "    - {job: 1, running: maybe, created: '2026-01-01T00:00:00Z',"
                 " expires: '2026-01-01T00:10:00Z'}\n",
                 ".gitscale/reservations.yaml:5: not a reservations file gitscale wrote "
                 "(running: 'maybe' is not true or false)", id="reservations"),
])
@pytest.mark.usefixtures("quick_batches")
def test_a_file_broken_by_hand_while_serve_runs_is_named_and_the_fix_lands_the_events(
        repo: Path, capfd: pytest.CaptureFixture[str], path: str, broken: str,
        where: str) -> None:
    """A person pushes a broken file to the config repo: serve writes nothing, names the file
    and line once, keeps the events, and lands them once the fix is pushed."""
    server = Server(repo.parent / "remote.git", window="1s")  # a clone: synced every batch
    try:
        before, _ = remote_state(repo)
        server.post(job(1, "queued", LINUX))
        wait_for_commit(server, repo, before)
        git(repo, "pull", "-q")
        good = (repo / path).read_text()
        (repo / path).write_text(broken)
        git(repo, "commit", "-qam", "by hand")
        git(repo, "push", "-q")
        server.post(job(2, "queued", LINUX))
        wait_until(lambda: server.health()["status"] == "degraded", 20, "no failed batch")
        assert where in server.health()["last_error"]
        time.sleep(2)  # more tries (0.5 s, then 1 s later)
        assert server.health()["pending_events"] == 1
        (repo / path).write_text(good)
        git(repo, "commit", "-qam", "fixed")
        git(repo, "push", "-q")
        commits = remote_state(repo)[0]
        wait_for_commit(server, repo, commits, timeout=30)
        assert remote_state(repo)[1]["replicas"] == 2
    finally:
        server.close()
    err = capfd.readouterr().err
    assert err.count("batch failed, ") == 1 and err.count(where) == 1, err
    assert "batches land again" in err and "Traceback" not in err


def test_deliveries_no_set_takes_are_counted_said_and_not_stored(
        repo: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """An org webhook sends GitHub-hosted jobs too, and a label typo sends every job of a set
    nowhere: they were dropped without a word."""
    server = Server(repo, window="1s")
    try:
        before, _ = remote_state(repo)
        server.post(job(1, "queued", ["ubuntu-latest"]))
        server.post(job(2, "queued", ["self-hosted", "linux"], repo="other-org/app"))
        server.post(job(3, "queued", LINUX))
        wait_for_commit(server, repo, before)
        wait_until(lambda: server.health()["dropped_events"] == 2, 10, "not counted")
        commits = remote_state(repo)[0]
        server.post(job(4, "queued", ["self-hosted", "arm64"]))
        server.post(job(5, "queued", LINUX))
        wait_for_commit(server, repo, commits)
        wait_until(lambda: server.health()["dropped_events"] == 3, 10, "not counted")
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request("GET", "/metrics")
        metrics = conn.getresponse().read().decode()
        assert "\ngitscale_webhook_unrouted_events_total 3.0\n" in metrics, metrics
    finally:
        server.close()
    err = capfd.readouterr().err
    assert err.count("for jobs no served set takes") == 1, err  # at most every 10 minutes
    assert ("2 events for jobs no served set takes, not stored (e.g. job 1 of "
            "octo-org/octo-repo, labels [ubuntu-latest])") in err
    book = git(repo.parent / "remote.git", "show", "main:.gitscale/reservations.yaml")
    assert "job: 3" in book and "job: 5" in book
    assert not any(f"job: {n}," in book for n in (1, 2, 4))


@pytest.mark.usefixtures("quick_batches")
def test_a_batch_held_by_a_push_that_never_ends_is_stuck_then_fails_and_lands(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A push that hangs (here the remote's pre-receive hook) held serve's batch for ever while
    /healthz said ok, and deliveries kept being accepted for a batch that never landed. The
    push ends at GITSCALE_GIT_TIMEOUT; /healthz says stuck while a batch runs past every bound
    a batch has (here 1 s), so a liveness probe restarts a serve no timeout frees."""
    import gitscale.webhooks.batcher as batcher

    monkeypatch.setenv("GITSCALE_GIT_TIMEOUT", "2.5")
    monkeypatch.setattr(batcher, "stall_limit", lambda: 1.0)
    hook = repo.parent / "remote.git" / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\nsleep 30\n")
    hook.chmod(0o755)
    server = Server(repo.parent / "remote.git", window="1s")
    try:
        before, _ = remote_state(repo)
        assert server.post(job(1, "queued", LINUX))[0] == 202
        wait_until(lambda: server.health()["status"] == "stuck", 20, "never stuck")
        stuck = server.health()
        assert stuck["pending_events"] == 1 and stuck["batch_running_seconds"] >= 1
        wait_until(lambda: server.health()["status"] == "degraded", 20, "the push never ended")
        assert "git push did not finish within 2.5 s" in server.health()["last_error"]
        hook.unlink()
        wait_for_commit(server, repo, before, timeout=30)
        assert server.health()["status"] == "ok"
    finally:
        server.close()
