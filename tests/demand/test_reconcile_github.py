"""`gitscale reconcile` end to end with GitHub sources: a real config repo with a bare remote,
the CLI run in-process, a fake GitHub on loopback holding an org of 50 repos."""
from __future__ import annotations

import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from gitscale.files import default_cache_dir
from gitscale.timeutil import format_time

from tests.demand.conftest import GH_TOKEN
from tests.demand.fake_github import FakeGitHub, OrgFixture, populate_org
from tests.helpers import RUNNERSET, git, make_repo, run

NOW = "2026-11-21T09:00:00Z"
LATER = "2026-11-21T09:01:00Z"

# name, labels, policy (min, max, buffer)
SETS = [
    ("linux-x64", ["self-hosted", "linux", "x64"], (1, 200, 2)),
    ("gpu", ["self-hosted", "linux", "gpu"], (0, 10, 0)),          # demand above max: clamped
    ("arm64", ["self-hosted", "linux", "arm64"], (0, 100, 0)),
]


@pytest.fixture
def org(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeGitHub, OrgFixture]]:
    """50 repos (3 pages of 20), repo 0 with 45 queued runs (3 pages), a 25-job matrix run
    (2 pages of jobs), an archived repo with a queued run that must not count."""
    monkeypatch.setenv("GH_TOKEN", GH_TOKEN)
    with FakeGitHub(token=GH_TOKEN, max_per_page=20) as fake:
        fixture = populate_org(fake, "acme", 50, busy_repo_runs=45, matrix_jobs=25)
        yield fake, fixture


def github_source(fake: FakeGitHub, labels: list[str]) -> str:
    return (f"{{github: {{org: acme, labels: [{', '.join(labels)}], "
            f"apiUrl: 'http://127.0.0.1:{fake.server.server_address[1]}', "
            f"token: {{env: GH_TOKEN}}}}}}")


def config_repo(tmp_path: Path, fake: FakeGitHub, *, file_set: bool = False) -> Path:
    lines = ["runnerSets:"]
    files = {}
    for name, labels, (lo, hi, buffer) in SETS:
        lines += [f"  - name: {name}", f"    manifest: sets/{name}.yaml",
                  f"    source: {github_source(fake, labels)}",
                  f"    policy: {{minReplicas: {lo}, maxReplicas: {hi}, buffer: {buffer}}}"]
        files[f"sets/{name}.yaml"] = RUNNERSET.format(name=name, replicas=1)
    if file_set:
        lines += ["  - name: static", "    manifest: sets/static.yaml",
                  "    source: {file: demand.yaml}",
                  "    policy: {minReplicas: 0, maxReplicas: 10}"]
        files["sets/static.yaml"] = RUNNERSET.format(name="static", replicas=1)
        files["demand.yaml"] = "static: {queued: 4, running: 2}\n"
    files["gitscale.yaml"] = "\n".join(lines) + "\n"
    return make_repo(tmp_path, files)


def expected_replicas(fixture: OrgFixture) -> dict[str, int]:
    out = {}
    for name, labels, (lo, hi, buffer) in SETS:
        queued, running = fixture.expected(labels)
        out[name] = max(lo, min(hi, queued + running + buffer))
    return out


def spec(tmp_path: Path, name: str) -> dict:  # type: ignore[type-arg]
    return yaml.safe_load(git(tmp_path / "remote.git", "show", f"main:sets/{name}.yaml"))["spec"]


def commits(tmp_path: Path) -> int:
    return int(git(tmp_path / "remote.git", "rev-list", "--count", "main"))


def assert_no_secret(fake: FakeGitHub, *texts: str) -> None:
    for text in texts:
        assert GH_TOKEN not in text
    for request in fake.log:
        assert GH_TOKEN not in request.path
        assert request.authorization == f"Bearer {GH_TOKEN}"


def test_reconcile_scales_each_set_to_its_jobs_then_a_quiet_pass_is_all_304s(
        org: tuple[FakeGitHub, OrgFixture], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake, fixture = org
    checkout = config_repo(tmp_path, fake)
    expected = expected_replicas(fixture)
    assert expected == {"linux-x64": 137, "gpu": 10, "arm64": 80}  # the fixture, spelled out

    code, out, err = run(capsys, "reconcile", "--repo", str(checkout), "--now", NOW)
    assert code == 0, err
    assert commits(tmp_path) == 2
    for name, replicas in expected.items():
        assert spec(tmp_path, name)["replicas"] == replicas, name
    message = git(tmp_path / "remote.git", "log", "-1", "--format=%B", "main")
    queued, running = fixture.expected(SETS[0][1])
    assert (f"Gitscale-Set: linux-x64 replicas=137 previous=1 patch=0 queued={queued} "
            f"running={running}") in message

    # every list was read to its end; per_page was asked and honoured
    paths = [r.path for r in fake.log]
    assert [r.query.get("page") for r in fake.log if r.route == "/orgs/acme/repos"] == [
        None, "2", "3"]
    assert [r.query.get("page") for r in fake.log
            if r.route == "/repos/acme/service-000/actions/runs"
            and r.query["status"] == "queued"] == [None, "2", "3"]
    assert any(r.route.endswith("/jobs") and r.query.get("page") == "2" for r in fake.log)
    assert all(r.query["per_page"] == "100" for r in fake.log if "/actions/runs" in r.path)
    assert len(paths) == len(set(paths))  # three sets, one poll
    assert not any("/old-" in p for p in paths)  # archived
    assert_no_secret(fake, out, err, message)
    cache_files = list(default_cache_dir().glob("etags-*.json"))  # type: ignore[union-attr]
    assert len(cache_files) == 1 and GH_TOKEN not in cache_files[0].read_text()
    first_pass = len(fake.log)

    # nothing changed: conditional requests, ≥95% answered 304, no commit
    fake.clear_log()
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout), "--now", LATER)
    assert code == 0, err
    assert commits(tmp_path) == 2
    assert len(fake.log) == first_pass
    assert all(r.if_none_match for r in fake.log)
    not_modified = sum(r.status == 304 for r in fake.log)
    assert not_modified / len(fake.log) >= 0.95, (not_modified, len(fake.log))
    assert_no_secret(fake, out, err)


def test_rate_limited_nothing_is_scaled_down_and_the_reset_is_named(
        org: tuple[FakeGitHub, OrgFixture], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake, fixture = org
    checkout = config_repo(tmp_path, fake)
    assert run(capsys, "reconcile", "--repo", str(checkout), "--now", NOW)[0] == 0
    before = {name: spec(tmp_path, name) for name, _, _ in SETS}
    # every job finishes (demand would drop to the minimums) but the API is out of requests
    for runs in fake.runs.values():
        for workflow_run in runs:
            workflow_run.status = "completed"
    fake.reset = int(time.time()) + 1800
    fake.fail("ratelimit", match="/actions/runs")  # mid-pass: the org list still answers
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout), "--now", LATER)
    assert code == 1
    reset = format_time(datetime.fromtimestamp(fake.reset, timezone.utc))
    for name, _, _ in SETS:
        assert f"error: {name}: " in err and spec(tmp_path, name) == before[name]
    assert f"rate limited until {reset}" in err
    assert commits(tmp_path) == 2
    assert "Traceback" not in err
    assert_no_secret(fake, out, err)


def test_a_file_set_lands_while_the_github_sets_are_rate_limited(
        org: tuple[FakeGitHub, OrgFixture], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake, _ = org
    checkout = config_repo(tmp_path, fake, file_set=True)
    fake.reset = int(time.time()) + 600
    fake.fail("ratelimit")
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout), "--now", NOW)
    assert code == 1
    assert commits(tmp_path) == 2
    assert spec(tmp_path, "static")["replicas"] == 6 and spec(tmp_path, "static")["patchID"] == 0
    subject = git(tmp_path / "remote.git", "log", "-1", "--format=%s", "main")
    assert subject == "gitscale: static 1→6"
    for name, _, _ in SETS:  # untouched: not even the first write of a patch ID
        assert spec(tmp_path, name)["replicas"] == 1
        assert "patchID" not in spec(tmp_path, name)
    reset = format_time(datetime.fromtimestamp(fake.reset, timezone.utc))
    assert f"rate limited until {reset}" in err
    assert [r.status for r in fake.log] == [403]  # one poll for the three sets, not retried
    assert_no_secret(fake, out, err)


def test_the_loop_waits_at_most_an_hour_for_a_rate_limit(
        org: tuple[FakeGitHub, OrgFixture], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A reset centuries away (a broken header or clock) stopped the loop: the wait for it
    overflowed threading's timeout and the loop died."""
    import threading

    from gitscale.commands import RepoOptions
    from gitscale.commands.run import run_loop

    fake, _ = org
    checkout = config_repo(tmp_path, fake)
    fake.reset = int(time.time()) + 10**11
    fake.fail("ratelimit", match="/actions/runs")
    stop = threading.Event()
    result: list[object] = []

    def loop() -> None:
        try:
            result.append(run_loop(RepoOptions(str(checkout), None, "gitscale.yaml"),
                                   interval="1s", demand=None, max_passes=None, stop=stop))
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            result.append(exc)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    err = ""
    deadline = time.monotonic() + 30
    while "next pass in" not in err and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
        err += capsys.readouterr().err
    stop.set()
    thread.join(30)
    err += capsys.readouterr().err
    assert result == [0], (result, err)
    # the hour, less the time the pass itself took (seconds on a loaded machine)
    waited = [int(w) for w in re.findall(r"next pass in (\d+)s", err)]
    assert waited and 3570 <= waited[0] <= 3600, err
