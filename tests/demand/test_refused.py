"""A credential a demand source's API refuses (401, a 403 that is no rate limit, a GitHub
App's JWT or installation token) is named as gitscale.yaml declares it — ``{env: NAME}``,
``{file: PATH}``, an App's ``privateKey`` — at its line, with whether it was read again after
the refusal and what to check; never its value, even when the server echoes it. Fake GitHub
and Buildkite APIs on loopback."""
from __future__ import annotations

from pathlib import Path

import pytest

from gitscale.config.load import Config
from gitscale.demand.resolve import Sources, read_demand
from gitscale.files import default_cache_dir
from gitscale.webhooks.resync import list_jobs
from gitscale.timeutil import utcnow

from tests.demand.conftest import BK_TOKEN, GH_TOKEN, NEW, OLD, app_key
from tests.demand.fake_buildkite import FakeBuildkite
from tests.demand.fake_github import FakeGitHub
from tests.demand.test_buildkite import SOME_JOBS, config_for, source
from tests.demand.test_github import app_source, github_source, write_config
from tests.demand.test_rotation import github_config, statuses

GITHUB_CHECK = ("check that it is not revoked or expired and that it has the repository "
                "permissions Actions: Read-only and Metadata: Read-only (a classic token: "
                "repo, for private repositories; docs/credentials.md)")


def line_of(root: Path, text: str) -> int:
    """The line of gitscale.yaml whose stripped text is ``text``."""
    lines = (root / "gitscale.yaml").read_text().splitlines()
    (number,) = [n for n, line in enumerate(lines, 1) if line.strip() == text]
    return number


def error_of(root: Path, config: Config, name: str = "linux") -> str:
    sources = Sources(default_cache_dir(), timeout=5)
    try:
        return read_demand(root, config, None, sources).errors[name]
    finally:
        sources.close()


def test_a_refused_token_file_is_named_as_declared_and_said_read_again(
        gh: FakeGitHub, tmp_path: Path) -> None:
    token = tmp_path / "github-token"
    token.write_text(OLD)
    root = tmp_path / "repo"
    config = github_config(root, gh, token)
    gh.tokens = {NEW}  # revoked; the file, read again after the 401, holds the same token
    error = error_of(root, config)
    assert error == (
        f"gitscale.yaml:{line_of(root, f'file: {token}')}: runner set 'linux': GitHub refused "
        f"the token from {{file: {token}}} (read again after the refusal: still refused): GET "
        f"{gh.url}/orgs/acme/repos?per_page=100&type=all answered 401: Bad credentials; "
        f"{GITHUB_CHECK}")
    assert statuses(gh) == [401]  # the same value read again: not sent twice
    assert OLD not in error and NEW not in error


def test_a_refused_token_variable_is_said_not_read_again(github: FakeGitHub, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    github.add_repo("acme", "app")
    monkeypatch.setenv("GH_TOKEN", "tok_Revoked000000000000000000000")
    config = write_config(tmp_path, [{"name": "linux",
                                      "source": github_source(github, ["linux"])}])
    error = error_of(tmp_path, config)
    assert error.startswith(
        f"gitscale.yaml:{line_of(tmp_path, 'env: GH_TOKEN')}: runner set 'linux': GitHub "
        "refused the token from {env: GH_TOKEN} (an environment variable: not read again, "
        "a new value needs a restart): GET "), error
    assert error.endswith(f"answered 401: Bad credentials; {GITHUB_CHECK}"), error
    assert "tok_Revoked" not in error


def test_the_default_token_refused_is_said_to_be_the_default(
        github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    github.add_repo("acme", "app")
    monkeypatch.setenv("GITHUB_TOKEN", "tok_Revoked000000000000000000000")
    settings = github_source(github, ["linux"])
    del settings["github"]["token"]
    config = write_config(tmp_path, [{"name": "linux", "source": settings}])
    error = error_of(tmp_path, config)
    assert error.startswith(
        f"gitscale.yaml:{line_of(tmp_path, 'source:')}: runner set 'linux': GitHub refused "
        "the token from {env: GITHUB_TOKEN} (the default: the source names no token; an "
        "environment variable: not read again, a new value needs a restart): GET "), error


def test_a_token_from_name_file_says_the_file_and_that_it_was_read_again(
        github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    github.add_repo("acme", "app")
    monkeypatch.delenv("GH_TOKEN")
    token = tmp_path / "gh_token"
    token.write_text("tok_Revoked000000000000000000000\n")
    monkeypatch.setenv("GH_TOKEN_FILE", str(token))
    config = write_config(tmp_path / "repo", [{"name": "linux",
                                               "source": github_source(github, ["linux"])}])
    error = error_of(tmp_path / "repo", config)
    assert (f"GitHub refused the token from {{env: GH_TOKEN}} (GH_TOKEN_FILE={token}; read "
            "again after the refusal: still refused): GET ") in error, error


def test_a_permission_refused_names_the_token_and_what_github_asked_for(
        github: FakeGitHub, tmp_path: Path) -> None:
    github.add_repo("acme", "app")
    github.fail("forbidden", "/actions/runs")
    config = write_config(tmp_path, [{"name": "linux",
                                      "source": github_source(github, ["linux"])}])
    error = error_of(tmp_path, config)
    assert error.startswith(f"gitscale.yaml:{line_of(tmp_path, 'env: GH_TOKEN')}: runner set "
                            "'linux': GitHub refused the token from {env: GH_TOKEN}"), error
    assert "answered 403: Resource not accessible by integration" in error
    assert "Actions: Read-only and Metadata: Read-only; GitHub asked for actions=read" in error


def test_a_token_echoed_by_the_server_never_appears(gh: FakeGitHub, tmp_path: Path) -> None:
    """A server (or a proxy) that quotes the Authorization header in its 401: masked."""
    token = tmp_path / "github-token"
    token.write_text(OLD)
    gh.fail("echo")
    error = error_of(tmp_path / "repo", github_config(tmp_path / "repo", gh, token))
    assert "GitHub refused the token from {file: " in error and "Bad credentials" in error
    assert OLD not in error and OLD[4:20] not in error


def test_a_refused_agent_token_file_is_named_as_declared(buildkite: FakeBuildkite,
                                                         tmp_path: Path) -> None:
    token = tmp_path / "bk-token"
    token.write_text("bkua_NotTheRightOne0000\n")
    buildkite.queues["deploy"] = SOME_JOBS
    root = tmp_path / "repo"
    config = config_for(root, {"deploy": source(buildkite, "deploy",
                                                token={"file": str(token)})})
    error = error_of(root, config, "deploy")
    assert error.startswith(
        f"gitscale.yaml:{line_of(root, f'file: {token}')}: runner set 'deploy': Buildkite "
        f"refused the agent token from {{file: {token}}} (read again after the refusal: "
        f"still refused): GET {buildkite.url}/metrics/queue?name=deploy answered 401: Invalid "
        "or missing agent token; the metrics API takes an agent token"), error
    assert "bkua_NotTheRightOne0000" not in error and BK_TOKEN not in error


def test_a_refused_job_ids_token_is_named_as_declared(
        buildkite: FakeBuildkite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    buildkite.queues["deploy"] = SOME_JOBS
    buildkite.api_token = "bkua_TheRightApiToken000000"
    monkeypatch.setenv("BK_API_TOKEN", "bkua_NotTheRightToken000000")
    config = config_for(tmp_path, {"deploy": source(
        buildkite, "deploy", jobIds={"graphqlUrl": buildkite.graphql_url,
                                     "token": {"env": "BK_API_TOKEN"}})})
    reading = read_demand(tmp_path, config, None, Sources(default_cache_dir(), timeout=5))
    assert reading.errors == {}
    err = capsys.readouterr().err
    assert ("Buildkite refused jobIds.token from {env: BK_API_TOKEN} (an environment "
            "variable: not read again, a new value needs a restart): POST ") in err, err
    assert "bkua_NotTheRightToken000000" not in err


def test_a_refused_app_key_is_named_at_its_line(app_github: FakeGitHub, tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    other, _ = app_key(tmp_path / "other")
    root = tmp_path / "repo"
    config = write_config(root, [{"name": "linux", "source": app_source(app_github, other)}])
    error = error_of(root, config)
    assert error.startswith(f"gitscale.yaml:{line_of(root, f'file: {other}')}: runner set "
                            "'linux': github app 4242: POST "), error
    assert (f"(GitHub could not verify the JWT: github app private key {{file: {other}}} "
            "(read again for each exchange) is not a private key of GitHub App 4242") in error
    assert "BEGIN" not in error


def test_a_refused_installation_token_names_the_app_and_its_key(
        app_github: FakeGitHub, tmp_path: Path) -> None:
    """GitHub takes the App's JWT but refuses its installation token (echoing it): the
    message names the App and the key it was minted with, never the token."""
    app_github.fail("echo", "/orgs/acme/repos")
    root = tmp_path / "repo"
    key = app_github.key_path  # type: ignore[attr-defined]
    config = write_config(root, [{"name": "linux", "source": app_source(app_github, key)}])
    error = error_of(root, config)
    assert error.startswith(
        f"gitscale.yaml:{line_of(root, f'file: {key}')}: runner set 'linux': GitHub refused "
        f"the installation token of GitHub App 4242 (minted with the key from {{file: {key}}}, "
        "exchanged again after a refusal unless it is less than 30 s old): GET "), error
    assert app_github.issued and all(t["token"] not in error for t in app_github.issued)


def test_serves_resync_names_the_refused_credential_at_its_line(gh: FakeGitHub,
                                                               tmp_path: Path) -> None:
    token = tmp_path / "github-token"
    token.write_text(OLD)
    root = tmp_path / "repo"
    config = github_config(root, gh, token)
    gh.tokens = {GH_TOKEN}
    sources = Sources(default_cache_dir(), timeout=5)
    try:
        listing = list_jobs(config.sets, sources, utcnow(), config)
    finally:
        sources.close()
    assert listing.error == (
        f"linux: gitscale.yaml:{line_of(root, f'file: {token}')}: runner set 'linux': GitHub "
        f"refused the token from {{file: {token}}} (read again after the refusal: still "
        f"refused): GET {gh.url}/orgs/acme/repos?per_page=100&type=all answered 401: Bad "
        f"credentials; {GITHUB_CHECK}")


def test_a_permission_refused_to_an_app_is_not_said_to_exchange_its_token_again(
        app_github: FakeGitHub, tmp_path: Path) -> None:
    """A 403 refuses a permission, not the token: the App's token is not exchanged again for
    it (only a 401 does that), and the message said it was."""
    app_github.fail("forbidden", "/orgs/acme/repos")
    root = tmp_path / "repo"
    key = app_github.key_path  # type: ignore[attr-defined]
    config = write_config(root, [{"name": "linux", "source": app_source(app_github, key)}])
    error = error_of(root, config)
    assert error.startswith(
        f"gitscale.yaml:{line_of(root, f'file: {key}')}: runner set 'linux': GitHub refused "
        f"the installation token of GitHub App 4242 (minted with the key from {{file: {key}}}; "
        "a 403 refuses a permission: not exchanged again): GET "), error
    assert "answered 403: Resource not accessible by integration; it lacks" in error
    assert len(app_github.issued) == 1
