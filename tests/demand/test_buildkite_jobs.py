"""The Buildkite source's job ids (``jobIds``) from a fake GraphQL API on loopback, beside the
metrics API's counts: which jobs count, paging, and every way the ids can be unusable (the
pass then decides on the counts alone and says so, never naming the token)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gitscale.clients import buildkite as client
from gitscale.demand import DemandReading
from gitscale.demand.resolve import Sources, read_demand
from gitscale.files import default_cache_dir
from gitscale.errors import ConfigError

from tests.demand.conftest import BK_TOKEN
from tests.demand.fake_buildkite import FakeBuildkite, Job
from tests.demand.test_buildkite import SOME_JOBS, config_for, pair, read, source

API_TOKEN = "bkua_S3cr3tApiAccessToken0123456789"
CLUSTER = "0190c3a5-7e36-4f1e-9a58-1c2d3e4f5a6b"
RUNNING_STATES = ["SCHEDULED", "ASSIGNED", "ACCEPTED", "RUNNING", "CANCELING", "TIMING_OUT"]


@pytest.fixture(autouse=True)
def _api_token(buildkite: FakeBuildkite, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BK_API_TOKEN", API_TOKEN)
    buildkite.api_token = API_TOKEN


def counts(scheduled: int, running: int, waiting: int = 0) -> bytes:
    """A metrics answer shaped like the reference body, with these counts."""
    body = json.loads(SOME_JOBS)
    body["jobs"] = {"scheduled": scheduled, "running": running, "waiting": waiting,
                    "total": scheduled + running + waiting}
    return json.dumps(body).encode()


def with_ids(buildkite: FakeBuildkite, queue: str, **ids: Any) -> dict[str, Any]:
    return source(buildkite, queue, jobIds={"token": {"env": "BK_API_TOKEN"},
                                            "graphqlUrl": buildkite.graphql_url, **ids})


def posts(buildkite: FakeBuildkite) -> list[Any]:
    return [r for r in buildkite.log if r.method == "POST"]


def ids(reading: DemandReading, name: str) -> frozenset[str] | None:
    return reading.demands[name].jobs


def deploy_jobs() -> list[Job]:
    """Scheduled 3, running 1 (as SOME_JOBS counts), and jobs no count counts."""
    return [Job("s1", "SCHEDULED"), Job("s2", "SCHEDULED"), Job("s3", "SCHEDULED"),
            Job("r1", "RUNNING"), Job("w1", "WAITING"), Job("f1", "FINISHED"),
            Job("b1", "BLOCKED")]


def test_the_ids_of_the_counted_jobs_fill_the_demand(buildkite: FakeBuildkite, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    buildkite.queues["deploy"] = SOME_JOBS  # scheduled 3, running 1; organization "test"
    buildkite.jobs["deploy"] = deploy_jobs()
    buildkite.jobs["other"] = [Job("o1", "SCHEDULED")]
    config = config_for(tmp_path, {"deploy": with_ids(buildkite, "deploy")})
    reading = read(tmp_path, config)
    assert pair(reading, "deploy") == (3, 1)  # the counts stay the metrics API's
    assert ids(reading, "deploy") == {"s1", "s2", "s3", "r1"}
    (post,) = posts(buildkite)
    assert post.authorization == f"Bearer {API_TOKEN}" and post.path == "/graphql/v1"
    variables = post.body["variables"]
    assert (variables["slug"], variables["rules"], variables["states"], variables["first"]) == (
        "test", ["queue=deploy"], RUNNING_STATES, client.JOB_PAGE)
    assert "clustered: false" in post.body["query"]  # an unclustered agent token's jobs
    assert capsys.readouterr().err == ""


def test_waiting_jobs_are_ids_only_for_a_set_that_counts_them(
        buildkite: FakeBuildkite, tmp_path: Path) -> None:
    buildkite.queues["deploy"] = counts(3, 1, waiting=1)
    buildkite.jobs["deploy"] = deploy_jobs()
    config = config_for(tmp_path, {"plain": with_ids(buildkite, "deploy"),
                                   "eager": with_ids(buildkite, "deploy") | {
                                       "countWaiting": True}})
    reading = read(tmp_path, config)
    assert ids(reading, "plain") == {"s1", "s2", "s3", "r1"}
    assert ids(reading, "eager") == {"s1", "s2", "s3", "r1", "w1"}
    (post,) = posts(buildkite)  # one query serves both sets
    assert post.body["variables"]["states"] == RUNNING_STATES + ["WAITING"]


def test_every_page_is_read(buildkite: FakeBuildkite, tmp_path: Path) -> None:
    buildkite.queues["deploy"] = counts(230, 20)
    buildkite.jobs["deploy"] = ([Job(f"s{n}", "SCHEDULED") for n in range(230)]
                                + [Job(f"r{n}", "ASSIGNED") for n in range(20)])
    reading = read(tmp_path, config_for(tmp_path, {"deploy": with_ids(buildkite, "deploy")}))
    found = ids(reading, "deploy")
    assert found is not None and len(found) == 250
    afters = [p.body["variables"]["after"] for p in posts(buildkite)]
    assert afters == [None, "cursor-100", "cursor-200"]


def test_a_cluster_asks_for_that_cluster_s_jobs(buildkite: FakeBuildkite, tmp_path: Path) -> None:
    buildkite.queues["deploy"] = counts(1, 0)
    buildkite.jobs["deploy"] = [Job("mine", "SCHEDULED", CLUSTER), Job("unclustered", "SCHEDULED")]
    reading = read(tmp_path, config_for(tmp_path, {
        "deploy": with_ids(buildkite, "deploy", cluster=CLUSTER)}))
    assert ids(reading, "deploy") == {"mine"}


def test_without_job_ids_nothing_more_is_sent(buildkite: FakeBuildkite, tmp_path: Path) -> None:
    buildkite.queues["deploy"] = SOME_JOBS
    buildkite.jobs["deploy"] = deploy_jobs()
    reading = read(tmp_path, config_for(tmp_path, {"deploy": source(buildkite, "deploy")}))
    assert pair(reading, "deploy") == (3, 1) and ids(reading, "deploy") is None
    assert posts(buildkite) == []


def unusable(buildkite: FakeBuildkite, tmp_path: Path, capsys: pytest.CaptureFixture[str],
             **ids_settings: Any) -> str:
    """Read a queue whose ids cannot be used: the counts alone are the demand, and stderr says
    why, naming the source and never a token. Returns what stderr said."""
    reading = read(tmp_path, config_for(tmp_path, {
        "deploy": with_ids(buildkite, "deploy", **ids_settings)}))
    assert reading.errors == {}
    assert pair(reading, "deploy") == (3, 1) and ids(reading, "deploy") is None
    err = capsys.readouterr().err
    assert "warning: buildkite: queue deploy (jobIds): job ids not used this pass" in err
    assert "decided on the metrics API's counts alone" in err
    assert API_TOKEN not in err and BK_TOKEN not in err
    return err


@pytest.mark.parametrize(("answer", "said"), [
    pytest.param((200, b'{"data":null,"errors":[{"message":"Field \'jobs\' is missing '
                       b'required arguments"},{"message":"and another"}]}',
                  "application/json"),
                 "2 GraphQL error(s): Field 'jobs' is missing required arguments",
                 id="errors-on-200"),
    pytest.param((200, f'{{"errors":[{{"message":"bad token {API_TOKEN}"}}]}}'.encode(),
                  "application/json"), "1 GraphQL error(s): bad token ***", id="echoed-token"),
    pytest.param((200, b"<html><body>Sign in</body></html>", "text/html"),
                 "returned an HTML page", id="html"),
    pytest.param((200, b'{"data":{"organization":{"jobs":{"edges":[{"node":{}}],'
                       b'"pageInfo":{"hasNextPage":false}}}}}', "application/json"),
                 "a job without a uuid and a state", id="job-without-uuid"),
    pytest.param((200, b'{"data":{"organization":{"jobs":{"edges":[]}}}}', "application/json"),
                 "no pageInfo.hasNextPage", id="no-page-info"),
    pytest.param((200, json.dumps({"data": {"organization": {"jobs": {
        "edges": [{"node": {"uuid": f"{i:08x}-0000-4000-8000-000000000000", "state": "SCHEDULED"}}
                  for i in range(client.JOB_PAGE + 1)],
        "pageInfo": {"hasNextPage": False}}}}}).encode(), "application/json"),
                 f"a page of {client.JOB_PAGE + 1} jobs; asked for {client.JOB_PAGE}",
                 id="more-edges-than-asked"),
    pytest.param((200, json.dumps({"data": {"organization": {"jobs": {
        "edges": [{"node": {"uuid": "a" * 65, "state": "SCHEDULED"}}],
        "pageInfo": {"hasNextPage": False}}}}}).encode(), "application/json"),
                 "a job uuid of 65 characters (Buildkite's have 36)", id="uuid-too-long"),
    pytest.param((502, b"bad gateway", "text/plain"), "answered 502", id="bad-gateway"),
    pytest.param((429, b"{}", "application/json"), "rate limited until", id="rate-limited"),
])
def test_an_answer_without_usable_ids_leaves_the_counts(
        answer: tuple[int, bytes, str], said: str, buildkite: FakeBuildkite, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    buildkite.queues["deploy"] = SOME_JOBS
    buildkite.graphql_answer = answer
    err = unusable(buildkite, tmp_path, capsys)
    assert said in err and f"buildkite GraphQL ({buildkite.graphql_url})" in err


def test_a_refused_token_leaves_the_counts(buildkite: FakeBuildkite, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    buildkite.queues["deploy"] = SOME_JOBS
    monkeypatch.setenv("BK_API_TOKEN", "bkua_NotTheRightToken000000")
    err = unusable(buildkite, tmp_path, capsys)
    assert "answered 401" in err and "bkua_NotTheRightToken000000" not in err
    # which of a Buildkite setup's three tokens was refused, and what it must be
    assert "Buildkite refused jobIds.token" in err, err
    assert "API access token with GraphQL API access" in err and "not an agent token" in err


def test_an_organization_the_token_cannot_see_leaves_the_counts(
        buildkite: FakeBuildkite, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    buildkite.queues["deploy"] = SOME_JOBS
    buildkite.organization = "another-org"
    err = unusable(buildkite, tmp_path, capsys)
    assert "(organization test, queue deploy): no such organization" in err


def test_more_pages_than_the_bound_leave_the_counts(
        buildkite: FakeBuildkite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(client, "JOB_PAGE", 2)
    monkeypatch.setattr(client, "JOB_PAGES_MAX", 2)
    buildkite.queues["deploy"] = SOME_JOBS
    buildkite.jobs["deploy"] = deploy_jobs() + [Job("s4", "SCHEDULED")]
    err = unusable(buildkite, tmp_path, capsys)
    assert "more than 2 pages of 2 jobs" in err and len(posts(buildkite)) == 2


def test_fewer_ids_than_counted_jobs_leave_the_counts(
        buildkite: FakeBuildkite, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    buildkite.queues["deploy"] = SOME_JOBS  # 4 jobs counted
    buildkite.jobs["deploy"] = [Job("s1", "SCHEDULED", CLUSTER), Job("s2", "SCHEDULED"),
                                Job("s3", "SCHEDULED"), Job("r1", "RUNNING")]  # 3 unclustered
    err = unusable(buildkite, tmp_path, capsys)
    assert "the GraphQL API lists 3 job(s)" in err and "the metrics API counts 4" in err


def test_a_metrics_answer_without_the_organization_leaves_the_counts(
        buildkite: FakeBuildkite, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = json.loads(SOME_JOBS)
    del body["organization"]
    buildkite.queues["deploy"] = json.dumps(body).encode()
    buildkite.jobs["deploy"] = deploy_jobs()
    err = unusable(buildkite, tmp_path, capsys)
    assert "names no organization.slug" in err and posts(buildkite) == []


def test_an_unreadable_api_token_fails_the_reading_at_its_line(
        buildkite: FakeBuildkite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BK_API_TOKEN")
    buildkite.queues["deploy"] = SOME_JOBS
    reading = read(tmp_path, config_for(tmp_path, {"deploy": with_ids(buildkite, "deploy")}))
    assert reading.demands == {}
    message = reading.errors["deploy"]
    assert "gitscale.yaml" in message and "environment variable BK_API_TOKEN is not set" in message
    assert "jobIds" in message and buildkite.log == []  # nothing was sent


@pytest.mark.parametrize(("job_ids", "said"), [
    pytest.param({}, "jobIds: 'token' is required", id="no-token"),
    pytest.param({"token": {"env": "BK_API_TOKEN"}, "cluster": "my-cluster"},
                 "cluster", id="cluster-not-a-uuid"),
    pytest.param({"token": {"env": "BK_API_TOKEN"}, "graphqlUrl": "graphql.buildkite.com"},
                 "graphqlUrl", id="url-without-scheme"),
    pytest.param({"token": {"env": "BK_API_TOKEN"}, "org": "acme"}, "org", id="unknown-key"),
])
def test_a_bad_job_ids_mapping_is_refused_at_its_line(
        job_ids: dict[str, Any], said: str, buildkite: FakeBuildkite, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        config_for(tmp_path, {"deploy": source(buildkite, "deploy", jobIds=job_ids)})
    message = str(caught.value)
    assert message.startswith("gitscale.yaml:") and said in message, message


def test_the_readme_states_the_cost_and_the_bound_of_job_ids() -> None:
    """The README's figures for `jobIds` are the client's: a request per page of JOB_PAGE jobs,
    at most JOB_PAGES_MAX a pass, and what happens past that bound."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    text = " ".join(readme.split("**What `jobIds` costs**", 1)[1].split("\n\n", 1)[0].split())
    bound = client.JOB_PAGE * client.JOB_PAGES_MAX
    assert f"one GraphQL request per {client.JOB_PAGE} of the queue's jobs" in text
    assert f"at most {client.JOB_PAGES_MAX}:" in text
    assert f"a backlog of {bound:,} jobs costs {client.JOB_PAGES_MAX} requests" in text
    assert f"more than {bound:,} jobs in those states" in text
    assert f"more than {client.JOB_PAGES_MAX} pages of {client.JOB_PAGE} jobs" in text
    assert "decides on the counts alone for that pass" in text


def test_a_miss_right_after_a_match_is_a_race_said_only_when_it_repeats(
        buildkite: FakeBuildkite, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """In a loop (one ``Sources`` kept), a job that came between the metrics read and the
    GraphQL read makes one pass fall back to the counts: silently after a pass whose ids
    matched; a second miss in a row (a wrong cluster every pass) is said."""
    buildkite.queues["deploy"] = SOME_JOBS  # 3 scheduled, 1 running
    buildkite.jobs["deploy"] = deploy_jobs()
    config = config_for(tmp_path, {"deploy": with_ids(buildkite, "deploy")})
    sources = Sources(default_cache_dir(), timeout=5)

    def one_pass() -> tuple[frozenset[str] | None, str]:
        reading = read_demand(tmp_path, config, None, sources)
        assert reading.errors == {} and pair(reading, "deploy") == (3, 1)
        return ids(reading, "deploy"), capsys.readouterr().err

    assert one_pass() == (frozenset({"s1", "s2", "s3", "r1"}), "")
    buildkite.jobs["deploy"] = [j for j in deploy_jobs() if j.uuid != "s3"]  # s3 finished
    assert one_pass() == (None, "")  # counts alone, nothing said: a race
    said = one_pass()
    assert said[0] is None and "the GraphQL API lists 3 job(s)" in said[1]
    buildkite.jobs["deploy"] = deploy_jobs()
    assert one_pass()[0] == frozenset({"s1", "s2", "s3", "r1"})
    sources.close()


def test_in_a_loop_the_warning_goes_through_its_timestamped_log(
        buildkite: FakeBuildkite, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`run` and `serve` hand their log to ``Sources``: the fallback's warning is one of their
    timestamped lines, not a bare line on stderr."""
    buildkite.queues["deploy"] = SOME_JOBS
    buildkite.graphql_answer = (502, b"bad gateway", "text/plain")
    said: list[str] = []
    sources = Sources(default_cache_dir(), timeout=5, report=said.append)
    config = config_for(tmp_path, {"deploy": with_ids(buildkite, "deploy")})
    assert read_demand(tmp_path, config, None, sources).errors == {}
    sources.close()
    (line,) = said
    assert line.startswith("warning: buildkite: queue deploy (jobIds): job ids not used")
    assert "answered 502" in line and capsys.readouterr().err == ""
