"""`gitscale serve --resync`: lost deliveries corrected from GitHub's API (the fake GitHub of
tests/demand, a real HTTP server on 127.0.0.1)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
import yaml

from tests.demand.conftest import GH_TOKEN
from tests.demand.fake_github import FakeGitHub
from tests.helpers import RUNNERSET, git, make_repo
from tests.test_metrics import scrape, value
from tests.commands.test_serve import SECRET, Server, job, remote_state, wait_for_commit

LINUX = ["self-hosted", "linux"]


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    monkeypatch.setenv("GH_TOKEN", GH_TOKEN)
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    with FakeGitHub(token=GH_TOKEN) as fake:
        fake.add_repo("octo-org", "octo-repo")
        yield fake


def config(api: str) -> str:
    source = f"{{org: octo-org, apiUrl: '{api}', token: {{env: GH_TOKEN}}"
    return f"""\
runnerSets:
  - name: linux
    manifest: sets/linux.yaml
    source: {{github: {source}, labels: [self-hosted, linux]}}}}
    policy: {{minReplicas: 0, maxReplicas: 20}}
  - name: gpu
    manifest: sets/gpu.yaml
    source: {{github: {source}, labels: [self-hosted, gpu]}}}}
    policy: {{minReplicas: 0, maxReplicas: 20}}
"""


def checkout(tmp_path: Path, api: str, reservations: str | None = None) -> Path:
    files = {"gitscale.yaml": config(api),
             "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=1),
             "sets/gpu.yaml": RUNNERSET.format(name="gpu", replicas=0)}
    if reservations is not None:
        files[".gitscale/reservations.yaml"] = reservations
    return make_repo(tmp_path, files)


def wait_for_book(repo: Path, expected: dict[str, dict[int, bool]], timeout: float = 30) -> None:
    import time

    deadline = time.monotonic() + timeout
    while book(repo) != expected:
        assert time.monotonic() < deadline, book(repo)
        time.sleep(0.2)


def book(repo: Path) -> dict[str, dict[int, bool]]:
    data = yaml.safe_load(git(repo.parent / "remote.git", "show",
                              "main:.gitscale/reservations.yaml"))
    return {name: {r["job"]: r["running"] for r in entry["reservations"]}
            for name, entry in data["sets"].items()}


# A running job whose `completed` was lost, an hour ago.
LOST_COMPLETED = """\
served: [gpu, linux]
sets:
  linux:
    reservations:
    - {job: 5, running: true, created: '2026-01-01T00:00:00Z', expires: '2026-01-01T00:10:00Z'}
    completed: []
"""


def test_a_resync_corrects_lost_deliveries_and_says_what_it_did(
        github: FakeGitHub, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A lost `completed` held a runner for ever; lost `queued`/`in_progress` deliveries never
    got one. The first resync runs at start."""
    run = github.add_run("octo-org/octo-repo", "in_progress",
                         [("queued", LINUX), ("in_progress", LINUX), ("completed", LINUX),
                          ("queued", ["self-hosted", "gpu"]), ("waiting", LINUX)])
    queued, running, _, gpu, _ = (j["id"] for j in run.jobs)
    repo = checkout(tmp_path, github.url, LOST_COMPLETED)
    server = Server(repo, window="1s", resync="1h")
    try:
        wait_for_book(repo, {"linux": {queued: False, running: True}, "gpu": {gpu: False}})
    finally:
        server.close()
    _, spec = remote_state(repo)
    assert spec["replicas"] == 2
    message = git(repo.parent / "remote.git", "log", "-1", "--format=%B", "main")
    assert (f"- resync with GitHub, linux: added 2 (1 queued, 1 running: jobs {queued}, "
            f"{running}); removed 1 (job 5)") in message
    err = capfd.readouterr().err
    assert (f"resync linux: added 2 (1 queued, 1 running: jobs {queued}, {running}); "
            "removed 1 (job 5)") in err
    assert GH_TOKEN not in err and GH_TOKEN not in message


def test_a_resync_that_github_did_not_list_every_run_for_removes_nothing(
        github: FakeGitHub, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """GitHub lists at most 1,000 runs a status (here 1): job 5's run may be one it left out,
    so its reservation is kept (it was removed as a lost `completed`); the listed job is added,
    and the log says why nothing was removed."""
    github.max_runs_listed = 1
    github.add_run("octo-org/octo-repo", "queued", [("queued", LINUX)])
    newest = github.add_run("octo-org/octo-repo", "queued", [("queued", LINUX)])
    listed = newest.jobs[0]["id"]
    repo = checkout(tmp_path, github.url, LOST_COMPLETED)
    server = Server(repo, window="1s", resync="1h")
    try:
        wait_for_book(repo, {"linux": {5: True, listed: False}})
    finally:
        server.close()
    err = capfd.readouterr().err
    assert f"resync linux: added 1 (1 queued, 0 running: job {listed})" in err, err
    assert ("resync linux: GitHub did not list every run (octo-org/octo-repo: 1 of 2 queued): "
            "reservations of jobs it does not list are kept") in err, err


def test_a_partial_listing_is_said_once_not_at_every_resync(
        github: FakeGitHub, tmp_path: Path, capfd: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """GitHub past its 1,000 runs a status stays so for hours: its warning is said at the first
    resync and then every 30 minutes while it lasts, as the sources' own warning is in `run`
    (was: one line per resync, every --resync, the counts in it changing)."""
    import time

    import gitscale.commands.serve as serve

    monkeypatch.setattr(serve, "MIN_RESYNC", "1s")
    github.max_runs_listed = 1
    github.add_run("octo-org/octo-repo", "queued", [("queued", LINUX)])
    github.add_run("octo-org/octo-repo", "queued", [("queued", LINUX)])
    repo = checkout(tmp_path, github.url, LOST_COMPLETED)
    server = Server(repo, window="1s", resync="1s")
    err = ""
    try:
        deadline = time.monotonic() + 30
        while "resync: reservations match" not in err:  # a second listing applied
            assert time.monotonic() < deadline, err
            time.sleep(0.2)
            err += capfd.readouterr().err
    finally:
        server.close()
    err += capfd.readouterr().err
    assert err.count("resync linux: GitHub did not list every run") == 1, err
    assert err.count("resync gpu: GitHub did not list every run") == 1, err
    assert ("resync linux: GitHub did not list every run (octo-org/octo-repo: 1 of 2 queued): "
            "reservations of jobs it does not list are kept (said again every 30m while it "
            "lasts)") in err, err
    # (what matches is what GitHub listed: not "match GitHub", which it did not show whole)
    assert ("resync: reservations match what GitHub listed (2 sets; 2 listed in part, their "
            "unlisted jobs' reservations kept)") in err, err
    assert "resync: reservations match GitHub" not in err, err


def test_a_failed_resync_changes_nothing(github: FakeGitHub, tmp_path: Path,
                                         capfd: pytest.CaptureFixture[str]) -> None:
    """GitHub unreachable or rate limited: the reservations stay as the webhooks made them."""
    github.add_run("octo-org/octo-repo", "queued", [("queued", LINUX)])
    github.fail("error", match="/actions/runs", status=502)
    repo = checkout(tmp_path, github.url, LOST_COMPLETED)
    server = Server(repo, window="1s", resync="1h")
    before, _ = remote_state(repo)  # after the first batch (it claims the sets)
    err = ""
    try:
        import time

        deadline = time.monotonic() + 60
        while "resync skipped" not in err:  # the client retries a 502 a few times first
            assert time.monotonic() < deadline, err
            time.sleep(0.2)
            err += capfd.readouterr().err
        assert server.port is not None
        samples = scrape(server.port)[2]
        assert value(samples, "gitscale_errors_total", kind="resync") == 1
        server.post(job(9, "queued", LINUX))
        wait_for_commit(server, repo, before)
    finally:
        server.close()
    assert book(repo) == {"linux": {5: True, 9: False}}
    err += capfd.readouterr().err
    assert "resync skipped, reservations left as they are: linux: github" in err
    assert "Traceback" not in err


def test_resync_zero_never_asks_github(github: FakeGitHub, tmp_path: Path) -> None:
    repo = checkout(tmp_path, github.url, LOST_COMPLETED)
    server = Server(repo, window="1s", resync="0")
    before, _ = remote_state(repo)
    try:
        server.post(job(9, "queued", LINUX))
        wait_for_commit(server, repo, before)
    finally:
        server.close()
    assert github.log == []
    assert book(repo) == {"linux": {5: True, 9: False}}  # the running job still holds a runner


def test_a_resync_failing_poll_after_poll_is_said_once_and_its_end_too(
        github: FakeGitHub, tmp_path: Path, capfd: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """GitHub answering 503 for a while: one line at the first failed poll (was one per poll,
    every --resync), one when a poll works again; the reservations stay meanwhile. (A poll
    every 3 s, below serve's least of 10 s: the same polls in a third of the time.)"""
    import time

    import gitscale.commands.serve as serve

    monkeypatch.setattr(serve, "MIN_RESYNC", "1s")
    github.fail("error", match="/actions/runs", status=503)
    repo = checkout(tmp_path, github.url, LOST_COMPLETED)
    server = Server(repo, window="1s", resync="3s")
    err = ""
    try:
        deadline = time.monotonic() + 60
        while sum(r.status == 503 for r in github.log) < 4:  # two polls (each tries twice)
            assert time.monotonic() < deadline, err
            time.sleep(0.2)
        err += capfd.readouterr().err
        time.sleep(1.5)  # the second poll's answer is taken by the next batch
        assert book(repo) == {"linux": {5: True}}
        github.clear_faults()
        while "resync works again" not in err:
            assert time.monotonic() < deadline, err
            time.sleep(0.2)
            err += capfd.readouterr().err
        wait_for_book(repo, {"linux": {}})  # the lost `completed` of job 5, corrected
    finally:
        server.close()
    err += capfd.readouterr().err
    assert err.count("resync skipped") == 1, err
    assert "(said again when the error changes, and every 30m while it lasts)" in err
    import re

    assert re.search(r"resync works again, after [23] failed polls in \d+s", err), err[-600:]
    assert "Traceback" not in err


def test_a_job_held_by_its_concurrency_group_keeps_its_reservation(github: FakeGitHub,
                                                                    tmp_path: Path) -> None:
    """A pass does not count a `pending` job (it needs no runner yet), but a resync lists it
    as queued: a reservation it removed would be tombstoned, and not come back once the job
    is released."""
    from datetime import datetime, timezone

    from gitscale.config.load import load_config
    from gitscale.demand.resolve import Sources
    from gitscale.webhooks.resync import list_jobs

    run = github.add_run("octo-org/octo-repo", "in_progress",
                         [("pending", LINUX), ("in_progress", LINUX), ("waiting", LINUX)])
    pending, running, _ = (j["id"] for j in run.jobs)
    (tmp_path / "gitscale.yaml").write_text(config(github.url))
    sources = Sources(tmp_path / "cache", timeout=5)
    try:
        listing = list_jobs(load_config(tmp_path).sets, sources,
                            datetime.now(timezone.utc))
    finally:
        sources.close()
    assert listing.error is None
    assert listing.jobs == {"linux": {pending: False, running: True}, "gpu": {}}
