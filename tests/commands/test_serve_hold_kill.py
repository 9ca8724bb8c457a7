"""`gitscale serve --hold` killed (SIGKILL) with a change held: what it held is not in the repo,
and the resync at the next start rebuilds it from GitHub's list (README, "Webhook mode": "A
change to the reservations alone is held"). Real `gitscale serve` processes, real deliveries,
real commits on a bare remote, the fake GitHub of tests/demand for the resync."""
from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest
import yaml

from gitscale.core.reservations import Book, Reservation
from gitscale.timeutil import format_time, utcnow
from gitscale.webhooks.reservations_file import render
from tests.commands.test_serve import SECRET, job
from tests.commands.test_serve_sets import commits, remote, replicas, shown, until
from tests.demand.conftest import GH_TOKEN
from tests.demand.fake_github import FakeGitHub, Run
from tests.helpers import RUNNERSET, git, make_repo

LINUX = ["self-hosted", "linux"]
STATE = ".gitscale/reservations.yaml"
HELD = ("batch of 1 event: reservations held (committed with the next scaling change, or in the "
        "first batch from ")
MATCH = "resync: reservations match GitHub (1 set)"  # its one set, said in the singular


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    """The fake GitHub; the token and the webhook secret only in the environment."""
    monkeypatch.setenv("GH_TOKEN", GH_TOKEN)
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", SECRET)
    with FakeGitHub(token=GH_TOKEN) as fake:
        fake.add_repo("octo-org", "octo-repo")
        yield fake


def make(tmp_path: Path, github: FakeGitHub, *, replicas: int = 0,
         extra: dict[str, str] | None = None, annotations: str = "") -> Path:
    """One webhook-fed set, linux (0 to 20), read from the fake; a scale-down delay of 10m
    keeps its RunnerSet as it is when a job starts or completes: those batches are held."""
    config = f"""\
runnerSets:
  - name: linux
    manifest: sets/linux.yaml
    source: {{github: {{org: octo-org, labels: [self-hosted, linux], apiUrl: '{github.url}',
                       token: {{env: GH_TOKEN}}}}}}
    policy: {{minReplicas: 0, maxReplicas: 20, scaleDownDelay: 10m}}
"""
    manifest = RUNNERSET.format(name="linux", replicas=replicas)
    if annotations:
        manifest = manifest.replace("  name: linux\n", f"  name: linux\n{annotations}")
    return make_repo(tmp_path, {"gitscale.yaml": config, "sets/linux.yaml": manifest,
                                **(extra or {})})


class Serve:
    """`gitscale serve` as its own process, its stderr in a file."""

    def __init__(self, repo: Path, log: Path, *, url: str | None = None,
                 extra: Sequence[str] = ()) -> None:
        """``url``: the remote's (default: the bare repo's path); ``extra``: more options (a
        repeated one wins over the one here)."""
        self.log = log
        argv = [sys.executable, "-m", "gitscale", "serve", "--repo", url or str(remote(repo)),
                "--listen", "127.0.0.1:0", "--window", "1s", "--hold", "5m", "--resync", "10s",
                *extra]
        assert SECRET not in argv and GH_TOKEN not in argv
        with log.open("wb") as err:
            self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err,
                                         env=os.environ.copy())
        found: list[int] = []

        def listening() -> bool:
            assert self.proc.poll() is None, self.text()
            hit = re.search(r"listening on 127\.0\.0\.1:(\d+)/webhook", self.text())
            found.extend([int(hit.group(1))] if hit else [])
            return bool(hit)
        until(listening, f"serve did not start: {log}", timeout=20)
        self.port = found[0]

    def text(self) -> str:
        return self.log.read_text()

    def said(self, line: str, timeout: float = 20) -> None:
        until(lambda: line in self.text(), f"serve never said {line!r}: {self.text()}",
              timeout=timeout)

    def post(self, body: bytes) -> int:
        digest = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.request("POST", "/webhook", body=body, headers={
            "Content-Type": "application/json", "X-GitHub-Event": "workflow_job",
            "X-GitHub-Delivery": str(uuid.uuid4()), "X-Hub-Signature-256": f"sha256={digest}"})
        status = conn.getresponse().status
        conn.close()
        return status

    def health(self) -> dict[str, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.request("GET", "/healthz")
        data: dict[str, Any] = json.loads(conn.getresponse().read())
        conn.close()
        return data

    def end(self, sig: signal.Signals) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(30)

    def close(self) -> None:
        """(a test that failed half-way: the process goes with it)"""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def running(repo: Path) -> dict[int, bool]:
    """job → running, as the pushed reservations file says (linux's)."""
    book = yaml.safe_load(shown(repo, STATE))["sets"].get("linux") or {}
    return {r["job"]: r["running"] for r in book.get("reservations", [])}


def set_status(github: FakeGitHub, run: Run, status: str) -> None:
    """The run and its job as GitHub lists them now."""
    with github.lock:
        run.status = status
        run.jobs[0]["status"] = status


def test_a_start_held_when_serve_is_killed_is_rebuilt_by_the_resync_at_the_next_start(
        tmp_path: Path, github: FakeGitHub) -> None:
    repo = make(tmp_path, github)
    serve = Serve(repo, tmp_path / "first.log")
    try:
        serve.said(MATCH)  # the poll at start: GitHub lists no job yet
        run = github.add_run("octo-org/octo-repo", "queued", [("queued", LINUX)])
        one = run.jobs[0]["id"]
        before = commits(repo)
        assert serve.post(job(one, "queued", LINUX)) == 202
        until(lambda: commits(repo) > before, "the queued was not committed")
        assert replicas(repo, "linux") == 1 and running(repo) == {one: False}
        scaled = commits(repo)
        set_status(github, run, "in_progress")
        assert serve.post(job(one, "in_progress", LINUX)) == 202
        serve.said(HELD)
        assert serve.health()["reservations_held_since"] is not None
        assert serve.end(signal.SIGKILL) == -signal.SIGKILL
    finally:
        serve.close()
    assert commits(repo) == scaled and running(repo) == {one: False}, "the held start is lost"

    again = Serve(repo, tmp_path / "second.log")
    try:
        again.said(f"resync linux: marked running 1 (job {one})")
        # The correction changes the reservations alone: it is held too, as any such batch
        # (it lands with the next scaling commit, by --hold, or at the stop)
        until(lambda: again.health()["reservations_held_since"] is not None, "not held")
        # the log says the correction is held
        again.said(HELD.replace("batch of 1 event", "no event (the resync's correction)"))
        assert commits(repo) == scaled and running(repo) == {one: False}
        assert again.end(signal.SIGTERM) == 0
    finally:
        again.close()
    assert commits(repo) == scaled + 1, "the stop's last batch commits the correction"
    assert running(repo) == {one: True} and replicas(repo, "linux") == 1
    body = git(remote(repo), "log", "-1", "--format=%B", "main")
    assert f"resync with GitHub, linux: marked running 1 (job {one})" in body, body
    assert "Traceback" not in again.text() and again.text().endswith("stopped\n"), again.text()


def test_a_completion_held_when_serve_is_killed_is_removed_by_the_resync_at_the_next_start(
        tmp_path: Path, github: FakeGitHub) -> None:
    """Job 1 runs since 5 minutes ago (its reservation older than the resync's grace of a
    minute, batch.GRACE), its set scaled up then (the scale-down delay, 10m, holds it)."""
    run = github.add_run("octo-org/octo-repo", "in_progress", [("in_progress", LINUX)])
    one = run.jobs[0]["id"]
    began = utcnow() - timedelta(minutes=5)
    book = Book((Reservation(one, True, began, began + timedelta(minutes=10)),), ())
    repo = make(tmp_path, github, replicas=1, extra={STATE: render({"linux": book}, ["linux"])},
                annotations="  annotations: {gitscale.dev/last-scale-up: "
                            f"'{format_time(began)}'}}\n")
    serve = Serve(repo, tmp_path / "first.log")
    try:
        serve.said(MATCH)  # GitHub lists job 1 running: as the file says
        started = commits(repo)
        set_status(github, run, "completed")
        assert serve.post(job(one, "completed", LINUX)) == 202
        serve.said(HELD)  # the delay keeps linux at 1: the completion changes the file alone
        assert serve.end(signal.SIGKILL) == -signal.SIGKILL
    finally:
        serve.close()
    assert commits(repo) == started and running(repo) == {one: True}, "the completion is lost"
    assert replicas(repo, "linux") == 1

    again = Serve(repo, tmp_path / "second.log")
    try:
        again.said(f"resync linux: removed 1 (job {one})")  # GitHub no longer lists it
        until(lambda: again.health()["reservations_held_since"] is not None, "not held")
        assert commits(repo) == started and running(repo) == {one: True}
        assert again.end(signal.SIGTERM) == 0
    finally:
        again.close()
    assert commits(repo) == started + 1, "the stop's last batch commits the correction"
    assert running(repo) == {}
    completed = yaml.safe_load(shown(repo, STATE))["sets"]["linux"]["completed"]
    assert [entry["jobs"] for entry in completed] == [[one]], completed
    assert replicas(repo, "linux") == 1, "the scale-down delay still holds the runner"
    body = git(remote(repo), "log", "-1", "--format=%B", "main")
    assert f"resync with GitHub, linux: removed 1 (job {one})" in body, body
