"""The GitHub and Buildkite sources against answers and credentials that are not what they
should be, on the fakes on loopback: each is a reading error naming the source (the URL, or the
config line of the credential), the set is left untouched, and no credential is shown."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitscale.redact import secret_forms

from tests.demand.conftest import BK_TOKEN, GH_TOKEN
from tests.demand.fake_buildkite import FakeBuildkite
from tests.demand.fake_github import FakeGitHub
from tests.demand.test_buildkite import SOME_JOBS, config_for
from tests.demand.test_buildkite import read as read_buildkite
from tests.demand.test_buildkite import source as buildkite_source
from tests.demand.test_github import app_source, github_source, pair, read, write_config
from tests.helpers import RUNNERSET, git, make_repo, run

BAD_TOKENS = [
    pytest.param(GH_TOKEN[:20] + "\n" + GH_TOKEN[20:], "contains a newline", id="newline"),
    pytest.param("ghp_SECRETé" + GH_TOKEN[10:], "is not ASCII", id="non-ascii"),
    pytest.param("ghp_SECRET\udcff" + GH_TOKEN[10:], "is not ASCII", id="a-0xff-byte"),
    pytest.param("ghp_SECRET\tTAB" + GH_TOKEN[10:], "contains whitespace", id="a-tab"),
]


def line_of(root: Path, text: str) -> int:
    lines = (root / "gitscale.yaml").read_text().splitlines()
    (number,) = [n for n, line in enumerate(lines, 1) if line.strip() == text]
    return number


def assert_not_shown(text: str, secret: str) -> None:
    for form in secret_forms(secret):
        assert form not in text, form


# -- tokens that cannot be a header: refused before any request, by the variable's name ----------
@pytest.mark.parametrize(("token", "problem"), BAD_TOKENS)
def test_a_github_token_that_cannot_be_a_header_is_refused_by_its_config_line(
        github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, token: str,
        problem: str) -> None:
    monkeypatch.setenv("GH_TOKEN", token)
    github.add_repo("acme", "app")
    config = write_config(tmp_path, [{"name": "linux",
                                      "source": github_source(github, ["linux"])}])
    reading = read(tmp_path, config)
    number = line_of(tmp_path, "env: GH_TOKEN")
    assert reading.errors == {"linux": f"gitscale.yaml:{number}: runner set 'linux': github "
                                       f"token: environment variable GH_TOKEN {problem}"}
    assert reading.demands == {} and github.log == []


def test_a_github_token_file_with_a_line_break_inside_names_the_file(
        github: FakeGitHub, tmp_path: Path) -> None:
    secret = tmp_path / "gh-token"
    secret.write_text(f"{GH_TOKEN[:20]}\n{GH_TOKEN[20:]}\n")  # the last newline is fine
    config = write_config(tmp_path / "repo", [{"name": "linux", "source": github_source(
        github, ["linux"], token={"file": str(secret)})}])
    error = read(tmp_path / "repo", config).errors["linux"]
    assert error == (f"gitscale.yaml:{line_of(tmp_path / 'repo', f'file: {secret}')}: runner "
                     f"set 'linux': github token: {secret} contains a newline")
    assert github.log == []


@pytest.mark.parametrize(("token", "problem"), BAD_TOKENS)
def test_a_buildkite_token_that_cannot_be_a_header_is_refused_by_its_config_line(
        buildkite: FakeBuildkite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, token: str,
        problem: str) -> None:
    monkeypatch.setenv("BK_TOKEN", token)
    buildkite.queues["deploy"] = SOME_JOBS
    config = config_for(tmp_path, {"deploy": buildkite_source(buildkite, "deploy")})
    assert read_buildkite(tmp_path, config).errors == {"deploy": (
        f"gitscale.yaml:{line_of(tmp_path, 'env: BK_TOKEN')}: runner set 'deploy': buildkite "
        f"agent token: environment variable BK_TOKEN {problem}")}
    assert buildkite.log == []


def test_a_reconcile_with_a_broken_token_exits_1_and_shows_it_nowhere(
        github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The auditor's case: a newline in GITHUB_TOKEN was quoted (escaped) by httpx, printed,
    and tried three times."""
    token = GH_TOKEN[:20] + "\n" + GH_TOKEN[20:]
    monkeypatch.setenv("GH_TOKEN", token)
    checkout = one_set_repo(tmp_path, github, replicas=5)
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1 and "Traceback" not in err
    assert "github token: environment variable GH_TOKEN contains a newline" in err
    assert_not_shown(out + err, token)
    assert github.log == []
    assert replicas(tmp_path) == 5


# -- GitHub: every job is GitHub's shape, or the answer is refused -------------------------------
def one_set_repo(tmp_path: Path, github: FakeGitHub, *, replicas: int) -> Path:
    source = yaml.safe_dump(github_source(github, ["self-hosted", "linux"]),
                            default_flow_style=True).strip()
    config = (f"runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
              f"    source: {source}\n    policy: {{minReplicas: 0, maxReplicas: 20}}\n")
    return make_repo(tmp_path, {"gitscale.yaml": config,
                                "sets/linux.yaml": RUNNERSET.format(name="linux",
                                                                    replicas=replicas)})


def replicas(tmp_path: Path) -> int:
    text = git(tmp_path / "remote.git", "show", "main:sets/linux.yaml")
    return int(yaml.safe_load(text)["spec"]["replicas"])


def serve_jobs(github: FakeGitHub, jobs: list[dict[str, Any]]) -> tuple[str, list[int]]:
    """One queued run whose jobs GitHub answers as ``jobs`` (over a real job's fields): the
    jobs URL and the jobs' ids."""
    repo = github.add_repo("acme", "app")
    run_ = github.add_run(repo, "queued", [("queued", ["linux"])])
    template = run_.jobs[0]
    served = [{**template, "id": template["id"] + n, **job} for n, job in enumerate(jobs)]
    github.fail("body", match=f"/runs/{run_.id}/jobs", body=json.dumps({
        "total_count": len(jobs), "jobs": served}).encode())
    return f"{github.url}/repos/{repo}/actions/runs/{run_.id}/jobs", [j["id"] for j in served]


@pytest.mark.parametrize(("job", "said"), [
    pytest.param({"labels": [None, {"a": 1}]}, "labels that are not a list of strings",
                 id="labels-not-strings"),
    pytest.param({"labels": "linux"}, "labels that are not a list of strings",
                 id="labels-a-string"),
    pytest.param({"labels": None}, "no labels", id="labels-null"),
    pytest.param({"status": "bogus"}, "a status GitHub does not document", id="unknown-status"),
    pytest.param({"status": 3}, "a status GitHub does not document", id="status-a-number"),
    pytest.param({"status": None}, "no status", id="status-null"),
])
def test_a_job_of_another_shape_is_an_error_naming_the_url_and_the_field(
        github: FakeGitHub, tmp_path: Path, job: dict[str, Any], said: str) -> None:
    url, (_, job_id) = serve_jobs(github, [{"status": "queued", "labels": ["linux"]}, job])
    config = write_config(tmp_path, [{"name": "linux",
                                      "source": github_source(github, ["linux"])}])
    reading = read(tmp_path, config)
    assert reading.demands == {}
    error = reading.errors["linux"]
    assert error.startswith(f"github: GET {url}: job {job_id} has {said}"), error
    if "status" in said:
        assert error.endswith("(GitHub's: queued, in_progress, completed, waiting, requested, "
                              "pending)")
        assert "bogus" not in error  # what a server wrote there is not repeated


@pytest.mark.parametrize("job_id", [0, -7, 2 ** 63, 10 ** 30])
def test_a_job_id_github_never_gives_is_an_error(github: FakeGitHub, tmp_path: Path,
                                                  job_id: int) -> None:
    url, _ = serve_jobs(github, [{"status": "queued", "labels": ["linux"]}, {"id": job_id}])
    config = write_config(tmp_path, [{"name": "linux",
                                      "source": github_source(github, ["linux"])}])
    reading = read(tmp_path, config)
    assert reading.demands == {}
    assert reading.errors["linux"] == (f"github: GET {url}: a job whose id is not between 1 "
                                       f"and {2 ** 63 - 1}")


def test_more_jobs_than_a_count_holds_is_an_error_naming_the_source(
        github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound is the demand file's (1,000,000); lowered here so that a few jobs pass it."""
    import gitscale.demand.github

    monkeypatch.setattr(gitscale.demand.github, "JOB_LIMIT", 2)
    serve_jobs(github, [{"status": "queued", "labels": ["linux"]} for _ in range(3)])
    config = write_config(tmp_path, [
        {"name": "linux", "source": github_source(github, ["linux"])},
        {"name": "gpu", "source": github_source(github, ["gpu"])}])
    reading = read(tmp_path, config)
    assert reading.errors == {"linux": (f"github: {github.url} (org acme): more than 2 queued "
                                        "jobs for the set's labels, gitscale's bound for a "
                                        "count (a demand file's too): not a count to scale by")}
    assert pair(reading, "gpu") == (0, 0)


def test_an_absurd_buildkite_count_is_never_committed(
        buildkite: FakeBuildkite, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The auditor's case: scheduled 10**30 was committed as queued=1000…, a trailer `history`
    cannot read back."""
    buildkite.queues["deploy"] = b'{"jobs": {"scheduled": 1000000000000000000000000000000}}'
    source = yaml.safe_dump(buildkite_source(buildkite, "deploy"), default_flow_style=True)
    config = (f"runnerSets:\n  - name: deploy\n    manifest: sets/deploy.yaml\n"
              f"    source: {{buildkite: {source.strip()}}}\n"
              "    policy: {minReplicas: 0, maxReplicas: 20}\n")
    checkout = make_repo(tmp_path, {"gitscale.yaml": config, "sets/deploy.yaml":
                                    RUNNERSET.format(name="deploy", replicas=5)})
    before = git(checkout, "rev-parse", "HEAD")
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1 and "Traceback" not in err, err
    assert (f"buildkite: queue deploy (GET {buildkite.url}/metrics/queue?name=deploy): "
            "jobs.scheduled is more than 1,000,000 jobs") in err, err
    assert "1000000000000" not in out + err
    assert git(tmp_path / "remote.git", "rev-parse", "main") == before


def test_a_job_without_labels_counts_for_no_set(github: FakeGitHub, tmp_path: Path) -> None:
    """A job with no ``labels`` key counted for every set: now the answer is refused."""
    repo = github.add_repo("acme", "app")
    run_ = github.add_run(repo, "queued", [("queued", ["linux"])])
    job = {k: v for k, v in run_.jobs[0].items() if k != "labels"}
    github.fail("body", match="/jobs", body=json.dumps({"total_count": 1,
                                                        "jobs": [job]}).encode())
    config = write_config(tmp_path, [{"name": "gpu", "source": github_source(github, ["gpu"])}])
    reading = read(tmp_path, config)
    assert reading.demands == {} and "has no labels" in reading.errors["gpu"]


def test_fields_github_adds_are_welcome(github: FakeGitHub, tmp_path: Path) -> None:
    serve_jobs(github, [{"status": "queued", "labels": ["linux"], "new_field": {"x": [1]}},
                        {"status": "requested", "labels": [], "runner_id": 9}])
    config = write_config(tmp_path, [{"name": "linux",
                                      "source": github_source(github, ["linux"])}])
    assert pair(read(tmp_path, config), "linux") == (2, 0)


def test_a_malformed_job_leaves_the_set_untouched(github: FakeGitHub, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The auditor's case: unknown statuses were skipped, and the set was scaled 5 → 0."""
    serve_jobs(github, [{"status": "bogus", "labels": ["self-hosted", "linux"]}])
    checkout = one_set_repo(tmp_path, github, replicas=5)
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1 and "has a status GitHub does not document" in err
    assert replicas(tmp_path) == 5


def test_a_deeply_nested_answer_is_a_source_error_not_a_crash(
        github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    github.add_repo("acme", "app")
    github.fail("body", match="/orgs/acme/repos", body=b"[" * 100_000 + b"]" * 100_000)
    checkout = one_set_repo(tmp_path, github, replicas=5)
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1, err
    assert "Traceback" not in err and "please report" not in err
    assert f"GET {github.url}/orgs/acme/repos?per_page=100&type=all returned invalid or " \
           "truncated JSON" in err
    assert replicas(tmp_path) == 5


# -- GitHub App: the JWT and the installation token ------------------------------------------------
def test_an_endpoint_that_echoes_the_jwt_has_it_masked(app_github: FakeGitHub,
                                                       tmp_path: Path) -> None:
    """The token endpoint (or a proxy before it) repeats the Authorization header: the JWT
    (hundreds of characters) was shown, cut at 200 characters and so past the mask."""
    app_github.fail("echo", match="/access_tokens", status=401)
    config = write_config(tmp_path / "repo", [
        {"name": "linux", "source": app_source(app_github, app_github.key_path)}])  # type: ignore[attr-defined]
    error = read(tmp_path / "repo", config).errors["linux"]
    (sent,) = {r.authorization for r in app_github.log}
    jwt = (sent or "").removeprefix("Bearer ")
    assert jwt.startswith("eyJ") and len(jwt) > 200
    assert "answered 401 (Bad credentials: Authorization: ***)" in error, error
    assert "eyJ" not in error


def test_an_installation_token_that_cannot_be_a_header_is_refused(
        app_github: FakeGitHub, tmp_path: Path) -> None:
    token = "ghs_SECRET\nX-Injected: yes"
    app_github.fail("body", match="/access_tokens", status=201, body=json.dumps(
        {"token": token, "expires_at": "2100-01-01T00:00:00Z"}).encode())
    config = write_config(tmp_path / "repo", [
        {"name": "linux", "source": app_source(app_github, app_github.key_path)}])  # type: ignore[attr-defined]
    error = read(tmp_path / "repo", config).errors["linux"]
    assert f"POST {app_github.url}/app/installations/77/access_tokens answered 201 with a " \
           "token that contains a newline" in error
    assert_not_shown(error, token)
    assert [r.route for r in app_github.log] == ["/app/installations/77/access_tokens"]


# -- Buildkite: an answer that is not the metrics object is not zero demand ----------------------
@pytest.mark.parametrize(("body", "said"), [
    pytest.param(b"null", "the answer is null (or empty), not the metrics object", id="null"),
    pytest.param(b"[]", "the answer is a list, not the metrics object", id="a-list"),
    pytest.param(b'"x"', "the answer is a string, not the metrics object", id="a-string"),
    pytest.param(b"{}", "the answer has no 'jobs' object", id="no-jobs"),
    pytest.param(b'{"organization": {"slug": "test"}, "agents": {}}',
                 "the answer has no 'jobs' object", id="agents-only"),
    pytest.param(b'{"jobs": null}', "'jobs' is not an object", id="jobs-null"),
])
def test_a_buildkite_answer_of_another_shape_is_an_error(buildkite: FakeBuildkite,
                                                         tmp_path: Path, body: bytes,
                                                         said: str) -> None:
    buildkite.queues["deploy"] = body
    config = config_for(tmp_path, {"deploy": buildkite_source(buildkite, "deploy")})
    reading = read_buildkite(tmp_path, config)
    assert reading.demands == {}
    assert reading.errors == {"deploy": f"buildkite: queue deploy (GET {buildkite.url}/metrics/"
                                        f"queue?name=deploy): {said}"}


def test_a_buildkite_null_leaves_the_set_untouched(buildkite: FakeBuildkite, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The auditor's case: ``null`` was read as zero demand and committed 5 → 0, exit 0."""
    buildkite.queues["deploy"] = b"null"
    config = (f"runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
              f"    source: {{buildkite: {{queue: deploy, apiUrl: '{buildkite.url}', "
              f"token: {{env: BK_TOKEN}}}}}}\n    policy: {{minReplicas: 0, maxReplicas: 20}}\n")
    checkout = make_repo(tmp_path, {"gitscale.yaml": config,
                                    "sets/linux.yaml": RUNNERSET.format(name="linux",
                                                                        replicas=5)})
    before = git(tmp_path / "remote.git", "rev-parse", "main")
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1 and "not the metrics object" in err
    assert git(tmp_path / "remote.git", "rev-parse", "main") == before
    assert BK_TOKEN not in out + err
