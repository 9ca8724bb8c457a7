"""GitHub failing at a GitHub App's token exchange, for the scaler (`reconcile`, and `run` and
`serve`, which keep the source's client between passes): a 503 or a dropped connection at
``POST /app/installations/{id}/access_tokens`` is the source being down — the sets are left
untouched, the error says GitHub answered 503 (or did not answer) and that the credentials were
not refused, not at the config line of the App's key — and the next pass, GitHub back, reads
the demand. A rate-limited exchange is a rate limit. Against the fake GitHub on loopback."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gitscale.clients.github_app import NOT_REFUSED
from gitscale.demand.resolve import Sources
from gitscale.files import default_cache_dir

from tests.demand.fake_github import FakeGitHub, populate_org
from tests.demand.test_github import app_source, pair, read, write_config
from tests.demand.test_hostile import assert_not_shown
from tests.helpers import RUNNERSET, git, make_repo, run

EXCHANGE = "/app/installations/77/access_tokens"
LABELS = ["self-hosted", "linux", "x64"]
FAULTS = [
    pytest.param("error", {"status": 503}, "answered 503: could not get an installation token",
                 id="503"),
    pytest.param("drop", {}, "failed: the connection to 127.0.0.1", id="dropped"),
    # a proxy's or captive portal's page, or JSON that is not GitHub's: not a refusal either
    pytest.param("html", {}, "answered 200 (text/html; charset=utf-8) with an HTML page, not "
                 "GitHub's answer", id="captive-portal"),
    pytest.param("body", {"status": 201, "body": b'{"ok": true}'},
                 "answered 201 (application/json; charset=utf-8) with JSON without token or "
                 "expires_at", id="json-without-token"),
]


def secrets(github: FakeGitHub) -> list[str]:
    """What must never be shown: the App's private key (whole, and a line of it), every JWT
    sent and every installation token issued."""
    pem = github.key_path.read_text()  # type: ignore[attr-defined]
    sent = {(r.authorization or "").removeprefix("Bearer ") for r in github.log}
    return [pem, pem.splitlines()[1], *(s for s in sent if s),
            *(t["token"] for t in github.issued)]


def assert_no_secret(github: FakeGitHub, *texts: str) -> None:
    assert secrets(github)
    for text in texts:
        for secret in secrets(github):
            assert_not_shown(text, secret)


@pytest.mark.parametrize(("fault", "options", "said"), FAULTS)
def test_a_failing_exchange_is_the_source_down_and_the_next_pass_reads(
        app_github: FakeGitHub, tmp_path: Path, fault: str, options: dict[str, Any],
        said: str) -> None:
    """As `run` and `serve` read, with the clients kept between passes: the pass during the
    outage has an error for the set, which says GitHub failed and nothing about the key's
    config line; the pass after it, GitHub back, exchanges once and reads the demand."""
    fixture = populate_org(app_github, "acme", 3)
    config = write_config(tmp_path / "repo", [
        {"name": "linux", "source": app_source(app_github, app_github.key_path)}])  # type: ignore[attr-defined]
    sources = Sources(default_cache_dir(), timeout=5)
    try:
        app_github.fail(fault, match="/access_tokens", **options)
        reading = read(tmp_path / "repo", config, sources)
        assert reading.demands == {} and reading.retry_at is None
        error = reading.errors["linux"]
        assert error.startswith(f"github app 4242: POST {app_github.url}{EXCHANGE} "), error
        assert said in error and error.endswith(f"({NOT_REFUSED})"), error
        assert "gitscale.yaml" not in error  # not blamed on the line of the App's key
        assert [r.route for r in app_github.log] == [EXCHANGE]  # nothing listed without it

        app_github.clear_faults()
        reading = read(tmp_path / "repo", config, sources)
        assert reading.errors == {}
        labels = config.sets[0].source.settings.labels
        assert pair(reading, "linux") == fixture.expected(labels)
        assert len(app_github.issued) == 1
        assert_no_secret(app_github, error)
    finally:
        sources.close()


def test_a_rate_limited_exchange_is_a_rate_limit_not_a_refusal(app_github: FakeGitHub,
                                                               tmp_path: Path) -> None:
    """A secondary rate limit (429, retry-after) at the exchange: the pass says when to read
    again (the loop waits for it), and nothing is sent before then."""
    populate_org(app_github, "acme", 2)
    config = write_config(tmp_path / "repo", [
        {"name": "linux", "source": app_source(app_github, app_github.key_path)}])  # type: ignore[attr-defined]
    sources = Sources(default_cache_dir(), timeout=5)
    try:
        app_github.fail("secondary", match="/access_tokens", retry_after=120)
        reading = read(tmp_path / "repo", config, sources)
        error = reading.errors["linux"]
        assert reading.retry_at is not None and "rate limited until" in error, error
        assert "gitscale.yaml" not in error and NOT_REFUSED not in error
        again = read(tmp_path / "repo", config, sources)
        assert again.errors["linux"] and len(app_github.log) == 1  # not sent again
        assert_no_secret(app_github, error)
    finally:
        sources.close()


def config_repo(tmp_path: Path, github: FakeGitHub) -> Path:
    source = app_source(github, github.key_path)  # type: ignore[attr-defined]
    source["github"]["labels"] = LABELS
    config = {"runnerSets": [{"name": "linux", "manifest": "sets/linux.yaml", "source": source,
                              "policy": {"minReplicas": 0, "maxReplicas": 100}}]}
    return make_repo(tmp_path, {"gitscale.yaml": yaml.safe_dump(config, sort_keys=False),
                                "sets/linux.yaml": RUNNERSET.format(name="linux",
                                                                    replicas=1)})


def replicas(tmp_path: Path) -> int:
    spec = yaml.safe_load(git(tmp_path / "remote.git", "show", "main:sets/linux.yaml"))["spec"]
    return int(spec["replicas"])


@pytest.mark.parametrize(("fault", "options", "said"), FAULTS)
def test_reconcile_while_the_exchange_fails_leaves_the_set_and_lands_once_github_is_back(
        app_github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        fault: str, options: dict[str, Any], said: str) -> None:
    fixture = populate_org(app_github, "acme", 6)
    checkout = config_repo(tmp_path, app_github)
    commits = git(tmp_path / "remote.git", "rev-list", "--count", "main")
    app_github.fail(fault, match="/access_tokens", **options)

    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1
    (line,) = [line for line in err.splitlines() if line.startswith("error: linux: ")]
    assert line.startswith(f"error: linux: github app 4242: POST {app_github.url}{EXCHANGE} ")
    assert said in line and line.endswith(f"({NOT_REFUSED}) (left untouched)"), line
    assert "Traceback" not in err and "gitscale.yaml" not in line
    assert git(tmp_path / "remote.git", "rev-list", "--count", "main") == commits
    assert replicas(tmp_path) == 1

    app_github.clear_faults()
    code, out2, err2 = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, err2
    queued, running = fixture.expected(LABELS)
    assert replicas(tmp_path) == queued + running > 1
    assert_no_secret(app_github, out, err, out2, err2)
