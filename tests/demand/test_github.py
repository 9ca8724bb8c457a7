"""The GitHub polling source against a fake GitHub on loopback: label matching, the org poll,
ETag revalidation across passes, rate limits, credentials and GitHub App auth."""
from __future__ import annotations

import json
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitscale.clients.github import jobs_page
from gitscale.files import default_cache_dir
from gitscale.config.load import Config, load_config
from gitscale.demand import DemandReading
from gitscale.demand.github import Job, count, matches
from gitscale.clients.github_app import NOT_REFUSED
from gitscale.demand.resolve import Sources, read_demand
from gitscale.config.secrets import SecretError, read_secret
from gitscale.timeutil import format_time

from tests.demand.conftest import GH_TOKEN, app_key
from tests.demand.fake_github import FakeGitHub, populate_org, repo_id


# -- label matching ------------------------------------------------------------------------------
# "every job label other than self-hosted is among the set's labels". So a job asking only for
# [self-hosted], or for nothing at all, can run on a runner of ANY set (and counts for each).
NONE: list[str] = []
SH = ["self-hosted"]
CUSTOM = ["custom"]
SH_CUSTOM = ["self-hosted", "custom"]

LABEL_TABLE = [
    # runner labels   job labels     matches
    (NONE,            SH,            True),
    (NONE,            SH_CUSTOM,     False),
    (NONE,            NONE,          True),
    (SH,              SH,            True),
    (SH,              SH_CUSTOM,     False),
    (SH,              NONE,          True),
    (CUSTOM,          SH,            True),
    (CUSTOM,          SH_CUSTOM,     True),
    (CUSTOM,          NONE,          True),
    (SH_CUSTOM,       SH,            True),
    (SH_CUSTOM,       SH_CUSTOM,     True),
    (SH_CUSTOM,       NONE,          True),
    # beyond the brief's grid
    (SH_CUSTOM,       ["custom"],                       True),   # no self-hosted on the job
    (SH_CUSTOM,       ["Self-Hosted", "CUSTOM"],        True),   # labels are case-insensitive
    (SH_CUSTOM,       ["self-hosted", "custom", "gpu"], False),  # one label the set lacks
    (SH_CUSTOM,       ["ubuntu-latest"],                False),  # a GitHub-hosted job
    (["self-hosted", "custom", "gpu"], SH_CUSTOM,       True),   # a set may have more labels
]


@pytest.mark.parametrize("runner,job,expected", LABEL_TABLE,
                         ids=[f"runner={r or 'none'}-job={j or 'none'}" for r, j, _ in LABEL_TABLE])
def test_label_matching_table(runner: list[str], job: list[str], expected: bool) -> None:
    assert matches(job, runner) is expected


def test_count_takes_queued_and_in_progress_jobs_of_matching_labels() -> None:
    jobs = [Job(1, "queued", ("self-hosted", "linux")), Job(2, "in_progress", ("linux",)),
            Job(3, "completed", ("linux",)), Job(4, "queued", ("gpu",)),
            Job(5, "waiting", ("linux",)),  # held by an environment's protection rule
            Job(6, "requested", ()),
            Job(7, "pending", ("self-hosted",))]  # held by its concurrency group
    demand = count(jobs, ["self-hosted", "linux"])
    assert (demand.queued, demand.running) == (2, 1)
    assert demand.jobs == frozenset({"1", "2", "6"})


# -- helpers ------------------------------------------------------------------------------------
def write_config(root: Path, sets: list[dict[str, Any]]) -> Config:
    """gitscale.yaml with ``sets`` (name + source settings), validated by load_config."""
    root.mkdir(parents=True, exist_ok=True)
    doc = {"runnerSets": [
        {"name": s["name"], "manifest": f"sets/{s['name']}.yaml", "source": s["source"],
         "policy": {"minReplicas": 0, "maxReplicas": 100}} for s in sets]}
    (root / "gitscale.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_config(root)


def github_source(github: FakeGitHub, labels: list[str], **extra: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {"org": "acme", "labels": labels, "apiUrl": github.url,
                                "token": {"env": "GH_TOKEN"}}
    settings.update(extra)
    return {"github": settings}


def read(root: Path, config: Config, sources: Sources | None = None) -> DemandReading:
    return read_demand(root, config, None, sources or Sources(default_cache_dir(), timeout=5))


def pair(reading: DemandReading, name: str) -> tuple[int, int]:
    demand = reading.demands[name]
    return demand.queued, demand.running


# -- the org poll -------------------------------------------------------------------------------
def test_org_poll_counts_each_sets_matching_jobs(github: FakeGitHub, tmp_path: Path) -> None:
    fixture = populate_org(github, "acme", 12, busy_repo_runs=35, matrix_jobs=40)
    linux = ["self-hosted", "linux", "x64"]
    gpu = ["self-hosted", "linux", "gpu"]
    config = write_config(tmp_path, [
        {"name": "linux", "source": github_source(github, linux)},
        {"name": "gpu", "source": github_source(github, gpu)}])
    reading = read(tmp_path, config)
    assert reading.errors == {}
    assert pair(reading, "linux") == fixture.expected(linux)
    assert pair(reading, "gpu") == fixture.expected(gpu)
    assert fixture.expected(linux)[0] > 10 and fixture.expected(linux)[1] > 5
    # the two sets share one poll: every URL once; the archived repo is never asked about
    paths = [r.path for r in github.log]
    assert len(paths) == len(set(paths))
    assert not any("/old-" in p for p in paths)
    # pagination was followed everywhere it was offered
    assert any("service-000/actions/runs?status=queued" in p and "page=2" in p for p in paths)
    assert any("/jobs?" in p and "page=2" in p for p in paths)
    for request in github.log:
        assert request.status == 200
        assert request.authorization == f"Bearer {GH_TOKEN}" and GH_TOKEN not in request.path
    jobs = [r for r in github.log if r.route.endswith("/jobs")]
    assert jobs and all(r.query["filter"] == "latest" for r in jobs)


def test_a_list_of_repos_is_polled_without_listing_the_org(github: FakeGitHub,
                                                           tmp_path: Path) -> None:
    a, b = github.add_repo("acme", "a"), github.add_repo("acme", "b")
    github.add_repo("acme", "c")
    github.add_run(a, "queued", [("queued", ["self-hosted", "linux"])] * 2)
    github.add_run(b, "in_progress", [("in_progress", ["linux"]), ("completed", ["linux"])])
    github.add_run("acme/c", "queued", [("queued", ["linux"])])  # not in scope
    settings = github_source(github, ["self-hosted", "linux"])
    del settings["github"]["org"]
    settings["github"]["repos"] = [a, b]
    reading = read(tmp_path, write_config(tmp_path, [{"name": "linux", "source": settings}]))
    assert pair(reading, "linux") == (2, 1)
    assert not any(r.route.startswith("/orgs/") for r in github.log)
    assert not any("acme/c" in r.path for r in github.log)


def test_a_run_waiting_for_an_approval_still_counts_its_queued_jobs(github: FakeGitHub,
                                                                   tmp_path: Path) -> None:
    """A run is `waiting` while one job waits for an environment approval: its other jobs,
    queued for a runner, were never seen. The waiting job itself needs no runner yet."""
    repo = github.add_repo("acme", "app")
    github.add_run(repo, "waiting", [("queued", ["linux"]), ("waiting", ["linux"])])
    config = write_config(tmp_path, [{"name": "linux",
                                      "source": github_source(github, ["linux"])}])
    assert pair(read(tmp_path, config), "linux") == (1, 0)


def test_jobs_held_by_their_concurrency_group_need_no_runner_yet(github: FakeGitHub,
                                                                tmp_path: Path) -> None:
    """GitHub holds a job whose concurrency group runs another as `pending` (up to 100 of them
    with `queue: max`); only the one that runs needs a runner, and only when it ends is the
    next one queued. A runner started per pending job would sit idle for all that time."""
    repo = github.add_repo("acme", "deploy")
    github.add_run(repo, "in_progress", [("in_progress", ["linux"]), ("queued", ["linux"])])
    for _ in range(3):
        github.add_run(repo, "in_progress", [("completed", ["linux"]), ("pending", ["linux"])])
    config = write_config(tmp_path, [{"name": "linux",
                                      "source": github_source(github, ["linux"])}])
    reading = read(tmp_path, config)
    assert pair(reading, "linux") == (1, 1)
    assert len(reading.demands["linux"].jobs) == 2


def test_loop_passes_revalidate_and_see_a_job_start(github: FakeGitHub, tmp_path: Path) -> None:
    repo = github.add_repo("acme", "app")
    run = github.add_run(repo, "in_progress", [("queued", ["linux"]), ("in_progress", ["linux"]),
                                               ("queued", ["linux"])])
    config = write_config(tmp_path, [{"name": "linux",
                                      "source": github_source(github, ["linux"])}])
    sources = Sources(default_cache_dir(), timeout=5)  # what a loop keeps between passes
    try:
        assert pair(read(tmp_path, config, sources), "linux") == (2, 1)
        github.clear_log()
        assert pair(read(tmp_path, config, sources), "linux") == (2, 1)
        assert {r.status for r in github.log} == {304}
        github.clear_log()
        github.set_job_status(run.jobs[0]["id"], "in_progress")
        reading = read(tmp_path, config, sources)
        assert pair(reading, "linux") == (1, 2)
        changed = [r.route for r in github.log if r.status == 200]
        assert changed == [f"/repos/{repo}/actions/runs/{run.id}/jobs"]
    finally:
        sources.close()


def test_a_finished_runs_jobs_page_leaves_the_etag_cache_at_once(github: FakeGitHub,
                                                                 tmp_path: Path) -> None:
    """A run no longer queued, in progress or waiting is not asked for its jobs again: its
    page is dropped from the ETag cache (memory and file) by the next poll, not kept for the
    cache's day — a busy org's finished runs grew a loop by ≈ 35 KB each. The live run's page
    stays, and is revalidated (a 304)."""
    repo = github.add_repo("acme", "app")
    done = github.add_run(repo, "in_progress", [("in_progress", ["linux"])])
    live = github.add_run(repo, "queued", [("queued", ["linux"])])
    config = write_config(tmp_path, [{"name": "linux",
                                      "source": github_source(github, ["linux"])}])
    sources = Sources(default_cache_dir(), timeout=5)
    jobs = f"{github.url}/repos/{repo}/actions/runs/{{}}/jobs"

    def cached() -> set[str]:
        sources.save()
        (path,) = default_cache_dir().glob("etags-*.json")
        return {url.partition("?")[0] for url in json.loads(path.read_text())}

    try:
        assert pair(read(tmp_path, config, sources), "linux") == (1, 1)
        assert {jobs.format(done.id), jobs.format(live.id)} <= cached()
        done.status = "completed"
        github.set_job_status(done.jobs[0]["id"], "completed")
        github.clear_log()
        assert pair(read(tmp_path, config, sources), "linux") == (1, 0)
        assert jobs.format(done.id) not in cached()
        assert jobs.format(live.id) in cached()
        assert [r.status for r in github.log if r.route.endswith(f"/{live.id}/jobs")] == [304]
    finally:
        sources.close()


@pytest.mark.parametrize("loop", [True, False], ids=["run-loop", "cron-passes"])
def test_a_finished_run_of_150_jobs_leaves_no_page_in_the_etag_cache(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, loop: bool) -> None:
    """GitHub gives a run's jobs 100 a page, and its ``Link`` names the second page
    ``/repositories/ID/actions/runs/RUN/jobs?page=2``, not by the repo's name. When the run
    finishes, that page leaves the ETag cache with the first (it stayed for the cache's day);
    until then both are revalidated, and every pass counts all 150 jobs. Passes of one ``run``
    process (one Sources), or of cron jobs (a new one each, the cache read from its file)."""
    monkeypatch.setenv("GH_TOKEN", GH_TOKEN)
    with FakeGitHub(token=GH_TOKEN, max_per_page=100) as github:
        repo = github.add_repo("acme", "app")
        big = github.add_run(repo, "in_progress", [("in_progress" if n < 60 else "queued",
                                                    ["linux"]) for n in range(150)])
        small = github.add_run(repo, "queued", [("queued", ["linux"])])
        config = write_config(tmp_path, [{"name": "linux",
                                          "source": github_source(github, ["linux"])}])
        kept = Sources(default_cache_dir(), timeout=5)

        def poll() -> tuple[int, int]:
            github.clear_log()
            sources = kept if loop else Sources(default_cache_dir(), timeout=5)
            try:
                reading = read(tmp_path, config, sources)
                sources.save()
            finally:
                if not loop:
                    sources.close()
            assert reading.errors == {}
            return pair(reading, "linux")

        def cached() -> set[tuple[int, str | None]]:
            (path,) = default_cache_dir().glob("etags-*.json")
            pages = [jobs_page(url) for url in json.loads(path.read_text())]
            return {(page.run_id, page.repo) for page in pages if page is not None}

        def jobs_requests() -> list[tuple[str, str | None, int]]:
            return [(r.route, r.query.get("page"), r.status) for r in github.log
                    if r.route.endswith("/jobs")]

        big_pages = {(big.id, repo), (big.id, None)}
        try:
            assert poll() == (91, 60)
            second = f"/repositories/{repo_id(repo)}/actions/runs/{big.id}/jobs"
            assert (second, "2", 200) in jobs_requests()
            assert cached() == big_pages | {(small.id, repo)}
            assert poll() == (91, 60)  # nothing changed: 304s, the same pages
            assert {status for *_, status in jobs_requests()} == {304}
            assert cached() == big_pages | {(small.id, repo)}
            github.set_job_status(big.jobs[120]["id"], "in_progress")  # on the second page
            assert poll() == (90, 61)
            assert (second, "2", 200) in jobs_requests()
            assert cached() == big_pages | {(small.id, repo)}
            big.status = "completed"
            for job in big.jobs:
                github.set_job_status(job["id"], "completed")
            assert poll() == (1, 0)
            assert not any(f"/runs/{big.id}/" in route for route, *_ in jobs_requests())
            assert cached() == {(small.id, repo)}
            assert poll() == (1, 0)
            assert jobs_requests() == [(f"/repos/{repo}/actions/runs/{small.id}/jobs", None,
                                        304)]
            assert cached() == {(small.id, repo)}
        finally:
            kept.close()


def test_rate_limited_sets_get_an_error_naming_the_reset(github: FakeGitHub,
                                                         tmp_path: Path) -> None:
    populate_org(github, "acme", 3)
    github.reset = int(time.time()) + 900
    github.fail("ratelimit", match="/actions/runs")
    config = write_config(tmp_path, [
        {"name": "linux", "source": github_source(github, ["linux"])},
        {"name": "gpu", "source": github_source(github, ["gpu"])}])
    sources = Sources(default_cache_dir(), timeout=5)  # kept between passes, as in loop mode
    reading = read(tmp_path, config, sources)
    reset = datetime.fromtimestamp(github.reset, timezone.utc)
    assert reading.demands == {}
    assert reading.retry_at == reset
    for name in ("linux", "gpu"):
        assert f"rate limited until {format_time(reset)}" in reading.errors[name]
    statuses = [r.status for r in github.log]
    assert statuses[0] == 200 and set(statuses[1:]) == {403}  # the org list, then stop
    assert len(statuses) <= 1 + 3  # at most the requests already in flight (3 repos)
    again = read(tmp_path, config, sources)  # before the reset: not a single request is sent
    assert "rate limited until" in again.errors["linux"]
    assert len(github.log) == len(statuses)


def test_a_run_without_an_id_is_a_clear_error(github: FakeGitHub, tmp_path: Path) -> None:
    github.add_repo("acme", "app")
    github.fail("body", match="/actions/runs?status=queued",
                body=json.dumps({"total_count": 1, "workflow_runs": [{"name": "CI"}]}).encode())
    config = write_config(tmp_path, [{"name": "linux",
                                      "source": github_source(github, ["linux"])}])
    reading = read(tmp_path, config)
    assert "linux" not in reading.demands
    error = reading.errors["linux"]
    assert "acme/app" in error and "run" in error and "id" in error


def test_a_repo_without_a_name_is_a_clear_error(github: FakeGitHub, tmp_path: Path) -> None:
    github.add_repo("acme", "app")
    github.fail("body", match="/orgs/acme/repos", body=b'[{"id": 1}]')
    config = write_config(tmp_path, [{"name": "linux",
                                      "source": github_source(github, ["linux"])}])
    error = read(tmp_path, config).errors["linux"]
    assert "/orgs/acme/repos" in error and "full_name" in error


# -- credentials --------------------------------------------------------------------------------
def test_read_secret_from_env_and_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_TOKEN", "  value-from-env \n")
    assert read_secret({"env": "SOME_TOKEN"}, "x") == "value-from-env"
    path = tmp_path / "token"
    path.write_text("value-from-file\n")
    assert read_secret({"file": str(path)}, "x") == "value-from-file"


@pytest.mark.parametrize("ref,expected", [
    ({"env": "NOT_SET_ANYWHERE"}, "github token: environment variable NOT_SET_ANYWHERE is not set"),
    ({"env": "EMPTY_TOKEN"}, "github token: environment variable EMPTY_TOKEN is empty"),
    ({"file": "/nonexistent/token"}, "github token: cannot read /nonexistent/token: "
                                     "No such file or directory"),
])
def test_a_missing_secret_is_a_clear_error_that_leaks_nothing(
        ref: dict[str, str], expected: str, github: FakeGitHub, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMPTY_TOKEN", "   ")
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    populate_org(github, "acme", 2)
    config = write_config(tmp_path, [{"name": "linux", "source": github_source(
        github, ["linux"], token=ref)}])
    reading = read(tmp_path, config)
    # at the line of gitscale.yaml that names the variable or file, to fix a typo there
    ((kind, where),) = ref.items()
    lines = (tmp_path / "gitscale.yaml").read_text().splitlines()
    (number,) = [n for n, line in enumerate(lines, 1) if line.strip() == f"{kind}: {where}"]
    assert reading.errors == {"linux": f"gitscale.yaml:{number}: runner set 'linux': {expected}"}
    assert GH_TOKEN not in expected
    assert github.log == []  # nothing was sent without a credential


def test_a_default_token_that_is_not_set_is_blamed_on_the_source_line(
        github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    populate_org(github, "acme", 1)
    settings = github_source(github, ["linux"])
    del settings["github"]["token"]
    config = write_config(tmp_path, [{"name": "linux", "source": settings}])
    lines = (tmp_path / "gitscale.yaml").read_text().splitlines()
    (number,) = [n for n, line in enumerate(lines, 1) if line.strip() == "source:"]
    assert read(tmp_path, config).errors == {"linux": (
        f"gitscale.yaml:{number}: runner set 'linux': github token: environment variable "
        "GITHUB_TOKEN is not set (the default, {env: GITHUB_TOKEN})")}
    assert github.log == []


def test_a_token_from_a_file_is_sent_as_bearer(github: FakeGitHub, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GH_TOKEN")
    secret = tmp_path / "gh-token"
    secret.write_text(GH_TOKEN + "\n")
    repo = github.add_repo("acme", "app")
    github.add_run(repo, "queued", [("queued", ["linux"])])
    config = write_config(tmp_path / "repo", [{"name": "linux", "source": github_source(
        github, ["linux"], token={"file": str(secret)})}])
    assert pair(read(tmp_path / "repo", config), "linux") == (1, 0)
    assert {r.authorization for r in github.log} == {f"Bearer {GH_TOKEN}"}


# -- GitHub App ---------------------------------------------------------------------------------
def app_source(github: FakeGitHub, key: Path, installation: int | None = 77) -> dict[str, Any]:
    app: dict[str, Any] = {"appId": 4242, "privateKey": {"file": str(key)}}
    if installation is not None:
        app["installationId"] = installation
    return {"github": {"org": "acme", "labels": ["linux"], "apiUrl": github.url, "app": app}}


def test_without_an_installation_id_the_apps_installation_on_the_org_is_looked_up(
        app_github: FakeGitHub, tmp_path: Path) -> None:
    """``installationId`` left out: the App's installation on the org, asked for once with
    the App's JWT (GET /orgs/acme/installation), then its token as with the id given."""
    fixture = populate_org(app_github, "acme", 4)
    config = write_config(tmp_path / "repo", [
        {"name": "linux", "source": app_source(app_github, app_github.key_path,  # type: ignore[attr-defined]
                                               installation=None)}])
    reading = read(tmp_path / "repo", config)
    assert reading.errors == {}
    assert pair(reading, "linux") == fixture.expected(["linux"])
    assert app_github.looked_up == ["orgs/acme"]
    assert [(r.method, r.route) for r in app_github.log[:2]] == [
        ("GET", "/orgs/acme/installation"), ("POST", "/app/installations/77/access_tokens")]


def test_an_app_not_installed_on_the_org_says_so(app_github: FakeGitHub,
                                                 tmp_path: Path) -> None:
    assert app_github.app is not None
    app_github.app["owners"] = ("orgs/other",)
    config = write_config(tmp_path / "repo", [
        {"name": "linux", "source": app_source(app_github, app_github.key_path,  # type: ignore[attr-defined]
                                               installation=None)}])
    error = read(tmp_path / "repo", config).errors["linux"]
    assert "github app 4242" in error and "not installed on orgs/acme" in error, error
    assert [r.method for r in app_github.log] == ["GET"]


def test_the_key_of_another_app_on_the_look_up_is_not_said_to_be_not_installed(
        app_github: FakeGitHub, tmp_path: Path) -> None:
    """Without ``installationId`` the JWT is first sent to GET /orgs/acme/installation: a key
    GitHub cannot verify there is a 401, which says nothing of where the App is installed —
    the message names the key, not a missing installation (which is a 404)."""
    (tmp_path / "other").mkdir()
    other, _ = app_key(tmp_path / "other")
    config = write_config(tmp_path / "repo", [
        {"name": "linux", "source": app_source(app_github, other, installation=None)}])
    error = read(tmp_path / "repo", config).errors["linux"]
    assert "answered 401 (A JSON web token could not be decoded): could not look up its " \
        "installation on orgs/acme (GitHub could not verify the JWT: " in error, error
    assert "is not a private key of GitHub App 4242" in error
    assert "not installed" not in error
    assert [r.method for r in app_github.log] == ["GET"]


def test_github_app_jwt_is_exchanged_for_an_installation_token(app_github: FakeGitHub,
                                                               tmp_path: Path) -> None:
    fixture = populate_org(app_github, "acme", 4)
    config = write_config(tmp_path / "repo", [
        {"name": "linux", "source": app_source(app_github, app_github.key_path)}])  # type: ignore[attr-defined]
    reading = read(tmp_path / "repo", config)
    assert reading.errors == {}
    assert pair(reading, "linux") == fixture.expected(["linux"])
    first, *rest = app_github.log
    assert (first.method, first.route, first.status) == (
        "POST", "/app/installations/77/access_tokens", 201)
    assert first.authorization and first.authorization.startswith("Bearer ey")  # a JWT
    assert len(app_github.issued) == 1  # once per pass, not once per request
    assert app_github.issued[0]["claims"]["iss"] == "4242"
    token = app_github.issued[0]["token"]
    assert len(rest) > 5
    assert all(r.method == "GET" and r.status == 200 and r.authorization == f"Bearer {token}"
               and token not in r.path for r in rest)


def test_github_app_with_the_wrong_key_is_a_clear_error(app_github: FakeGitHub,
                                                        tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    other, _ = app_key(tmp_path / "other")  # a key, but not the app's
    config = write_config(tmp_path / "repo", [
        {"name": "linux", "source": app_source(app_github, other)}])
    error = read(tmp_path / "repo", config).errors["linux"]
    assert f"POST {app_github.url}/app/installations/77/access_tokens answered 401" in error
    assert (f"github app private key {{file: {other}}} (read again for each exchange) is not "
            "a private key of GitHub App 4242") in error
    assert "BEGIN" not in error and [r.method for r in app_github.log] == ["POST"]


def test_github_app_with_its_public_key_is_a_clear_error_not_a_crash(app_github: FakeGitHub,
                                                                     tmp_path: Path) -> None:
    """The public key pasted where the private one belongs: the JWT library raised an
    AttributeError, which ended the command as a crash ("please report")."""
    public = tmp_path / "public.pem"
    public.write_bytes(app_github.app["public_key"])  # type: ignore[index]
    config = write_config(tmp_path / "repo", [
        {"name": "linux", "source": app_source(app_github, public)}])
    error = read(tmp_path / "repo", config).errors["linux"]
    assert error.startswith(f"gitscale.yaml:13: runner set 'linux': github app private key "
                            f"{{file: {public}}} (read again for each exchange): cannot sign a "
                            "JWT: a public key, not the private key"), error
    assert app_github.log == []


def test_an_app_without_the_actions_permission_is_told_which_to_grant(
        app_github: FakeGitHub, tmp_path: Path) -> None:
    app_github.add_repo("acme", "app")
    app_github.fail("forbidden", "/actions/runs")
    config = write_config(tmp_path / "repo", [
        {"name": "linux", "source": app_source(app_github, app_github.key_path)}])  # type: ignore[attr-defined]
    error = read(tmp_path / "repo", config).errors["linux"]
    assert "answered 403: Resource not accessible by integration" in error, error
    assert "Actions: Read-only and Metadata: Read-only; GitHub asked for actions=read" in error
    assert sum(r.route.endswith("/actions/runs") for r in app_github.log) == 1  # not retried


def test_github_app_with_a_key_that_is_not_a_key_is_a_clear_error(app_github: FakeGitHub,
                                                                  tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.pem"
    bogus.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
    config = write_config(tmp_path / "repo", [
        {"name": "linux", "source": app_source(app_github, bogus)}])
    error = read(tmp_path / "repo", config).errors["linux"]
    assert error.startswith("gitscale.yaml:13: runner set 'linux': github app private key "
                            f"{{file: {bogus}}} (read again for each exchange): cannot sign a "
                            "JWT"), error
    assert "not a key" not in error and app_github.log == []


def test_github_app_token_endpoint_answering_html_is_a_clear_error(app_github: FakeGitHub,
                                                                   tmp_path: Path) -> None:
    app_github.fail("html", match="/access_tokens")
    config = write_config(tmp_path / "repo", [
        {"name": "linux", "source": app_source(app_github, app_github.key_path)}])  # type: ignore[attr-defined]
    error = read(tmp_path / "repo", config).errors["linux"]
    assert f"POST {app_github.url}/app/installations/77/access_tokens" in error
    assert "installation token" in error


def test_secret_error_type_names_where_not_what(tmp_path: Path) -> None:
    with pytest.raises(SecretError) as caught:
        read_secret({"file": str(tmp_path)}, "buildkite agent token")
    assert str(caught.value) == f"buildkite agent token: cannot read {tmp_path}: " \
                                "Is a directory"


@pytest.mark.parametrize(("body", "says"), [
    (b"{not json", "with a body that is not JSON"),
    (b'{"expires_at": "2030-01-01T00:00:00Z"}', "with JSON without token"),
    (b'["ghs_x"]', "with JSON that is not an object (a list)"),
])
def test_github_app_token_answer_without_a_token_is_a_clear_error(
        body: bytes, says: str, app_github: FakeGitHub, tmp_path: Path) -> None:
    """Not GitHub's answer (a proxy's, say): GitHub not answering properly, as a 5xx — not
    blamed on the App key's config line."""
    app_github.fail("body", match="/access_tokens", status=201, body=body)
    config = write_config(tmp_path / "repo", [
        {"name": "linux", "source": app_source(app_github, app_github.key_path)}])  # type: ignore[attr-defined]
    error = read(tmp_path / "repo", config).errors["linux"]
    assert f"POST {app_github.url}/app/installations/77/access_tokens answered 201 " \
        f"(application/json; charset=utf-8) {says}, not GitHub's answer" in error, error
    assert error.endswith(f"({NOT_REFUSED})") and "gitscale.yaml" not in error, error


@pytest.mark.parametrize("installation", ["CHANGE-ME", "abc", "77a"])
def test_github_app_installation_id_that_is_not_a_number_is_refused_before_any_request(
        app_github: FakeGitHub, tmp_path: Path, installation: str) -> None:
    """Named where it was written, not a 404 from GitHub's token endpoint."""
    source = app_source(app_github, app_github.key_path)  # type: ignore[attr-defined]
    source["github"]["app"]["installationId"] = installation
    config = write_config(tmp_path / "repo", [{"name": "linux", "source": source}])
    error = read(tmp_path / "repo", config).errors["linux"]
    assert error.startswith("gitscale.yaml:4: runner set 'linux': "
                            f"source.github.app.installationId is {installation!r}, not a "
                            "number"), error
    assert app_github.log == []


def test_every_request_of_the_source_is_in_the_credentials_table(app_github: FakeGitHub,
                                                                 tmp_path: Path) -> None:
    """docs/credentials.md lists the requests the polling source sends, from which its
    permissions follow: each one sent (an App without installationId: the lookup too) is
    there, its names replaced by the table's placeholders; a run of 40 jobs is read in two
    pages, the second by the ``/repositories/ID/…`` URL GitHub's ``Link`` names."""
    populate_org(app_github, "acme", 4, matrix_jobs=40)
    config = write_config(tmp_path / "repo", [
        {"name": "linux", "source": app_source(app_github, app_github.key_path,  # type: ignore[attr-defined]
                                               installation=None)}])
    assert read(tmp_path / "repo", config).errors == {}
    docs = (Path(__file__).resolve().parents[2] / "docs/credentials.md").read_text()
    table = docs.split("## Polling source: GitHub")[1].split("Requests are conditional")[0]
    placeholders = [(r"^/orgs/[^/]+/", "/orgs/{org}/"),
                    (r"^/repos/[^/]+/[^/]+/", "/repos/{owner}/{repo}/"),
                    (r"^/repositories/\d+/", "/repositories/{repository_id}/"),
                    (r"/actions/runs/\d+/", "/actions/runs/{run_id}/"),
                    (r"^/app/installations/\d+/", "/app/installations/{installationId}/")]
    sent = set()
    for request in app_github.log:
        route = request.route
        for pattern, placeholder in placeholders:
            route = re.sub(pattern, placeholder, route)
        sent.add(f"{request.method} {route}")
    # the lookup, the token, the repos, their runs, the runs' jobs and a run's second page
    assert len(sent) == 6, sent
    missing = {r for r in sent if f"`{r}`" not in table and f"`{r}?" not in table}
    assert not missing, missing


# -- runs GitHub counts but does not list ---------------------------------------------------------
def test_runs_past_githubs_listing_limit_count_as_a_job_each_for_the_sets_they_ask_for(
        github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """GitHub lists at most 1,000 runs of a status (here 4, the fake's cut) and counts them all
    in total_count: the runs past the cut were dropped without a word, and a flooded repo's
    sets were scaled for a thousand runs of many more. Each unlisted queued run now counts as
    one queued job (in_progress: one running) for the sets the listed runs' jobs match, with
    no job ids, and a warning says so; a set no job of the repo asks for is not charged."""
    github.max_runs_listed = 4
    busy, quiet = github.add_repo("acme", "busy"), github.add_repo("acme", "quiet")
    for _ in range(7):
        github.add_run(busy, "queued", [("queued", ["self-hosted", "linux"])] * 2)
    for _ in range(5):
        github.add_run(busy, "in_progress", [("in_progress", ["linux"])])
    for _ in range(6):  # held for an approval: not counted, listed or not
        github.add_run(busy, "waiting", [("waiting", ["linux"])])
    github.add_run(quiet, "queued", [("queued", ["self-hosted", "gpu"])])
    config = write_config(tmp_path, [
        {"name": "linux", "source": github_source(github, ["self-hosted", "linux"])},
        {"name": "gpu", "source": github_source(github, ["self-hosted", "gpu"])}])
    reading = read(tmp_path, config)
    assert reading.errors == {}
    # 4 runs of 2 jobs listed + 3 unlisted runs; 4 running listed + 1 unlisted
    assert pair(reading, "linux") == (4 * 2 + 3, 4 + 1)
    assert reading.demands["linux"].jobs is None  # counts only: unlisted jobs have no ids
    assert pair(reading, "gpu") == (1, 0) and reading.demands["gpu"].jobs is not None
    warnings = capsys.readouterr().err.splitlines()
    assert warnings == [
        f"warning: github: {github.url}: acme/busy: GitHub counts 7 queued runs and lists 4 "
        "(at most 1,000 a status): the 3 unlisted counted as one queued job each for set(s) "
        "linux (a lower bound: each run has a job; the jobs of the listed runs match their "
        "labels)",
        f"warning: github: {github.url}: acme/busy: GitHub counts 5 in_progress runs and lists "
        "4 (at most 1,000 a status): the 1 unlisted counted as one running job each for set(s) "
        "linux (a lower bound: each run has a job; the jobs of the listed runs match their "
        "labels)",
        f"warning: github: {github.url}: acme/busy: GitHub counts 6 waiting runs and lists 4 "
        "(at most 1,000 a status): the 2 unlisted are not counted (a waiting run may hold no "
        "job a runner can take)"]
    assert GH_TOKEN not in "\n".join(warnings)


def test_a_poll_that_lists_every_run_says_nothing(github: FakeGitHub, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    github.max_runs_listed = 4
    repo = github.add_repo("acme", "app")
    for _ in range(4):
        github.add_run(repo, "queued", [("queued", ["linux"])])
    config = write_config(tmp_path, [{"name": "linux",
                                      "source": github_source(github, ["linux"])}])
    reading = read(tmp_path, config)
    assert pair(reading, "linux") == (4, 0) and reading.demands["linux"].jobs is not None
    assert capsys.readouterr().err == ""
