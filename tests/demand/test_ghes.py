"""The GitHub polling source (and serve's resync, which polls with it) against a GitHub
Enterprise Server: the fake GitHub serving its API under ``/api/v3`` only, with no
``x-ratelimit-*`` header (GHES's rate limiting is off by default). Every URL gitscale builds,
the ``Link`` pages it follows and a GitHub App's token exchange stay under that base; the
errors name it."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import pytest

from gitscale.files import default_cache_dir
from gitscale.demand.resolve import Sources
from gitscale.webhooks.resync import list_jobs

from tests.demand.conftest import GH_TOKEN, app_key
from tests.demand.fake_github import FakeGitHub, populate_org
from tests.demand.test_github import app_source, github_source, pair, read, write_config

API = "/api/v3"


@pytest.fixture
def ghes(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    monkeypatch.setenv("GH_TOKEN", GH_TOKEN)
    with FakeGitHub(token=GH_TOKEN, prefix=API, rate_limits=False) as fake:
        yield fake


def assert_under_the_api(fake: FakeGitHub) -> None:
    """Every request went to ``/api/v3/…`` once (never twice, never outside it) and was
    answered (no 404 of a path the server does not serve)."""
    assert fake.log
    for request in fake.log:
        assert request.route.startswith(f"{API}/"), request.path
        assert not request.route.startswith(f"{API}{API}/"), request.path
        assert request.status in (200, 201, 304), (request.path, request.status)


def test_a_poll_of_an_enterprise_server_stays_under_its_api_path(ghes: FakeGitHub,
                                                                  tmp_path: Path) -> None:
    fixture = populate_org(ghes, "acme", 6, busy_repo_runs=35, matrix_jobs=40)
    linux = ["self-hosted", "linux", "x64"]
    config = write_config(tmp_path, [{"name": "linux", "source": github_source(ghes, linux)}])
    assert ghes.url.endswith(API)
    sources = Sources(default_cache_dir(), timeout=5)  # kept between passes, as in loop mode
    try:
        reading = read(tmp_path, config, sources)
        assert reading.errors == {}
        assert pair(reading, "linux") == fixture.expected(linux)
        assert_under_the_api(ghes)
        # GitHub's Link pages (named by the repo's id for a run's jobs) were followed there
        assert any("/actions/runs?" in r.path and "page=2" in r.path for r in ghes.log)
        assert any(r.route.startswith(f"{API}/repositories/") and "page=2" in r.path
                   for r in ghes.log)
        assert reading.retry_at is None  # no rate-limit header: nothing to wait for
        # the next pass revalidates every page by its ETag, without any rate-limit header
        ghes.clear_log()
        again = read(tmp_path, config, sources)
        assert pair(again, "linux") == fixture.expected(linux)
        assert {r.status for r in ghes.log} == {304}
        assert_under_the_api(ghes)
    finally:
        sources.close()


def test_a_github_app_on_an_enterprise_server_exchanges_its_token_there(
        tmp_path: Path) -> None:
    key, public = app_key(tmp_path)
    app = {"id": 4242, "installation": 77, "public_key": public}
    with FakeGitHub(token=None, app=app, prefix=API, rate_limits=False) as ghes:
        fixture = populate_org(ghes, "acme", 3)
        config = write_config(tmp_path / "repo", [
            {"name": "linux", "source": app_source(ghes, key, installation=None)}])
        reading = read(tmp_path / "repo", config)
        assert reading.errors == {}
        assert pair(reading, "linux") == fixture.expected(["linux"])
        assert [(r.method, r.route) for r in ghes.log[:2]] == [
            ("GET", f"{API}/orgs/acme/installation"),
            ("POST", f"{API}/app/installations/77/access_tokens")]
        assert_under_the_api(ghes)


def test_serves_resync_lists_an_enterprise_servers_jobs(ghes: FakeGitHub,
                                                        tmp_path: Path) -> None:
    repo = ghes.add_repo("acme", "app")
    run = ghes.add_run(repo, "in_progress", [("in_progress", ["linux"]), ("queued", ["linux"])])
    config = write_config(tmp_path, [{"name": "linux",
                                      "source": github_source(ghes, ["linux"])}])
    sources = Sources(default_cache_dir(), timeout=5)
    try:
        listing = list_jobs(config.sets, sources, datetime.now(timezone.utc))
    finally:
        sources.close()
    assert listing.error is None
    assert listing.jobs == {"linux": {run.jobs[0]["id"]: True, run.jobs[1]["id"]: False}}
    assert_under_the_api(ghes)


def test_errors_name_the_enterprise_servers_url(ghes: FakeGitHub, tmp_path: Path) -> None:
    """An org the server does not have, and an apiUrl without ``/api/v3`` (the server's web
    side answers): each error names the URL asked, on the enterprise server."""
    config = write_config(tmp_path / "a", [
        {"name": "linux", "source": github_source(ghes, ["linux"], org="nope")}])
    error = read(tmp_path / "a", config).errors["linux"]
    assert f"GET {ghes.url}/orgs/nope/repos" in error and "404" in error, error
    assert "api.github.com" not in error
    web = github_source(ghes, ["linux"], apiUrl=ghes.origin)
    config = write_config(tmp_path / "b", [{"name": "linux", "source": web}])
    error = read(tmp_path / "b", config).errors["linux"]
    assert f"{ghes.origin}/orgs/acme/repos" in error and "404" in error, error
