"""`gitscale serve`: a job GitHub still lists keeps its reservation, however long it waits
(README, "Webhook mode", Resync). The resync renews the reservations of the jobs it lists;
before, a job queued longer than ``--reservation`` lost it at the expiry (a commit 1 → 0) and got
it back at the next resync (0 → 1): two needless commits and a flap every 10 to 15 minutes. The
real server on 127.0.0.1 with real deliveries and commits on a bare remote, the fake GitHub of
tests/demand for the resync; the durations shortened below their minimums (a job queued for
three reservations of 4 s, polled every second), as no user may."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml

import gitscale.commands.serve
from tests.commands.test_serve import SECRET, Server, job
from tests.commands.test_serve_sets import commits, remote, until
from tests.demand.conftest import GH_TOKEN
from tests.demand.fake_github import FakeGitHub
from tests.helpers import RUNNERSET, git, make_repo

LINUX = ["self-hosted", "linux"]
RESERVATION = 4.0  # seconds


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    monkeypatch.setenv("GH_TOKEN", GH_TOKEN)
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    monkeypatch.setattr(gitscale.commands.serve, "MIN_RESERVATION", "1s")
    monkeypatch.setattr(gitscale.commands.serve, "MIN_RESYNC", "1s")
    monkeypatch.setattr(gitscale.commands.serve, "EXPIRY_CHECK", 0.0)  # a batch every window
    with FakeGitHub(token=GH_TOKEN) as fake:
        fake.add_repo("octo-org", "octo-repo")
        yield fake


def make(tmp_path: Path, github: FakeGitHub) -> Path:
    """linux, 0 to 20, no scale-down delay: an expired reservation is a scale-down at once."""
    config = f"""\
runnerSets:
  - name: linux
    manifest: sets/linux.yaml
    source: {{github: {{org: octo-org, labels: [self-hosted, linux], apiUrl: '{github.url}',
                       token: {{env: GH_TOKEN}}}}}}
    policy: {{minReplicas: 0, maxReplicas: 20, scaleDownDelay: 0s}}
"""
    return make_repo(tmp_path, {"gitscale.yaml": config,
                                "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0)})


def replicas_by_commit(repo: Path) -> list[int]:
    """linux's replicas at each commit of the remote, oldest first."""
    return [int(yaml.safe_load(git(remote(repo), "show", f"{rev}:sets/linux.yaml"))["spec"]
                ["replicas"])
            for rev in git(remote(repo), "rev-list", "--reverse", "main").split()]


def polls(github: FakeGitHub) -> int:
    with github.lock:
        return sum(1 for request in github.log if "/actions/runs" in request.path)


def serve(repo: Path) -> Server:
    return Server(repo, window="1s", resync="1s", reservation=f"{RESERVATION:g}s")


def stays_queued(github: FakeGitHub, repo: Path, seconds: float) -> None:
    """``seconds`` pass (and resyncs with them) with the set at 1 and no commit."""
    before, since = commits(repo), time.monotonic()
    first = polls(github)
    while time.monotonic() - since < seconds or polls(github) < first + 3:
        assert replicas_by_commit(repo)[-1] == 1 and commits(repo) == before, \
            replicas_by_commit(repo)
        time.sleep(0.3)


def test_a_job_queued_longer_than_its_reservation_keeps_its_runner(
        tmp_path: Path, github: FakeGitHub, capsys: pytest.CaptureFixture[str]) -> None:
    repo = make(tmp_path, github)
    run = github.add_run("octo-org/octo-repo", "queued", [("queued", LINUX)])
    one = run.jobs[0]["id"]
    server = serve(repo)
    try:
        before = commits(repo)
        assert server.post(job(one, "queued", LINUX))[0] == 202
        until(lambda: commits(repo) > before and replicas_by_commit(repo)[-1] == 1,
              "the queued was not committed")
        scaled = commits(repo)
        stays_queued(github, repo, 3 * RESERVATION)
    finally:
        server.close()
    # the stop commits no renewal alone: the file in the repo says job 1 expired long ago
    assert commits(repo) == scaled
    said = capsys.readouterr().err
    # (before, each expiry was undone by the next resync: `added 1`, a flap when a batch ran
    # between the two, a correction held and committed at the stop when not)
    assert f"resync linux: added 1 (1 queued, 0 running: job {one})" not in said, said
    assert "resync: reservations match GitHub (1 set)" in said, said

    # A restart waits for its first resync before anything expires: no 1 → 0 at its start
    again = serve(repo)
    try:
        stays_queued(github, repo, RESERVATION)
        with github.lock:
            run.status = run.jobs[0]["status"] = "completed"
        assert again.post(job(one, "completed", LINUX))[0] == 202
        until(lambda: replicas_by_commit(repo)[-1] == 0, "the completion did not scale down")
    finally:
        again.close()
    said = capsys.readouterr().err
    assert "resync linux: added" not in said and "expired" not in said, said
    # one scale-down (and its patch ID 0, `quiet-reset`, in the window after), never a flap
    history = replicas_by_commit(repo)
    assert history[scaled - 1:] in ([1, 0], [1, 0, 0]), history
    assert [n for i, n in enumerate(history) if i == 0 or history[i - 1] != n] == [0, 1, 0]
