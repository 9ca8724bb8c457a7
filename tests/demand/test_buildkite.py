"""The Buildkite source against a fake agent metrics API on loopback, fed the reference bodies
of buildkite-agent-metrics' own tests."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitscale.files import default_cache_dir
from gitscale.config.load import Config, load_config
from gitscale.demand import DemandReading
from gitscale.demand.buildkite import poll_interval
from gitscale.demand.resolve import Sources, read_demand

from tests.demand.conftest import BK_TOKEN
from tests.demand.fake_buildkite import FakeBuildkite, metrics
from tests.helpers import RUNNERSET, git, make_repo, run

SOME_JOBS = metrics("TestCollectorWithSomeJobsAndAgentsForAQueue")  # scheduled 3, running 1
EMPTY = metrics("TestCollectorWithEmptyResponseForAllQueues")  # "jobs": {}
NO_JOBS = metrics("TestCollectorWithNoJobsForAllQueues")  # every count 0


def with_waiting(body: bytes, waiting: int) -> bytes:
    """The reference body plus the ``waiting`` count the collector also reads."""
    data = json.loads(body)
    data["jobs"]["waiting"] = waiting
    return json.dumps(data).encode()


def config_for(root: Path, queues: dict[str, dict[str, Any]]) -> Config:
    root.mkdir(parents=True, exist_ok=True)
    doc = {"runnerSets": [
        {"name": name, "manifest": f"sets/{name}.yaml", "source": {"buildkite": settings},
         "policy": {"minReplicas": 0, "maxReplicas": 50}} for name, settings in queues.items()]}
    (root / "gitscale.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_config(root)


def source(buildkite: FakeBuildkite, queue: str, **extra: Any) -> dict[str, Any]:
    return {"queue": queue, "apiUrl": buildkite.url, "token": {"env": "BK_TOKEN"}, **extra}


def read(root: Path, config: Config) -> DemandReading:
    return read_demand(root, config, None, Sources(default_cache_dir(), timeout=5))


def pair(reading: DemandReading, name: str) -> tuple[int, int]:
    return reading.demands[name].queued, reading.demands[name].running


def test_scheduled_and_running_per_queue(buildkite: FakeBuildkite, tmp_path: Path) -> None:
    buildkite.queues.update({"deploy": SOME_JOBS, "idle": NO_JOBS, "new": EMPTY})
    config = config_for(tmp_path, {"deploy": source(buildkite, "deploy"),
                                   "idle": source(buildkite, "idle"),
                                   "new": source(buildkite, "new")})
    reading = read(tmp_path, config)
    assert reading.errors == {}
    assert pair(reading, "deploy") == (3, 1)
    assert pair(reading, "idle") == (0, 0)
    assert pair(reading, "new") == (0, 0)  # missing keys are 0
    assert reading.min_interval == 15.0  # Buildkite-Agent-Metrics-Poll-Duration: 15s
    assert [r.path for r in buildkite.log] == [
        "/v3/metrics/queue?name=deploy", "/v3/metrics/queue?name=idle",
        "/v3/metrics/queue?name=new"]
    assert {r.authorization for r in buildkite.log} == {f"Token {BK_TOKEN}"}
    assert not any(BK_TOKEN in r.path for r in buildkite.log)


@pytest.mark.parametrize("count_waiting,expected", [(None, (3, 1)), (False, (3, 1)),
                                                    (True, (5, 1))])
def test_waiting_jobs_count_only_with_count_waiting(count_waiting: bool | None,
                                                    expected: tuple[int, int],
                                                    buildkite: FakeBuildkite,
                                                    tmp_path: Path) -> None:
    buildkite.queues["deploy"] = with_waiting(SOME_JOBS, 2)
    extra = {} if count_waiting is None else {"countWaiting": count_waiting}
    config = config_for(tmp_path, {"deploy": source(buildkite, "deploy", **extra)})
    assert pair(read(tmp_path, config), "deploy") == expected


def test_a_queue_name_is_url_encoded(buildkite: FakeBuildkite, tmp_path: Path) -> None:
    buildkite.queues["linux arm64/large&fast"] = SOME_JOBS
    config = config_for(tmp_path, {"q": source(buildkite, "linux arm64/large&fast")})
    assert pair(read(tmp_path, config), "q") == (3, 1)
    assert buildkite.log[0].path == "/v3/metrics/queue?name=linux+arm64%2Flarge%26fast"


def test_a_wrong_token_is_a_clear_error_without_the_token(buildkite: FakeBuildkite,
                                                          tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BK_TOKEN", "bkua_NotTheRightOne0000")
    buildkite.queues["deploy"] = SOME_JOBS
    config = config_for(tmp_path, {"deploy": source(buildkite, "deploy")})
    reading = read(tmp_path, config)
    assert reading.demands == {}
    error = reading.errors["deploy"]
    lines = (tmp_path / "gitscale.yaml").read_text().splitlines()
    (number,) = [n for n, line in enumerate(lines, 1) if line.strip() == "env: BK_TOKEN"]
    # the line of gitscale.yaml that names the token, and what the metrics API takes: a
    # Buildkite user's API access token (bkua_…) here is the usual mistake
    assert error == (f"gitscale.yaml:{number}: runner set 'deploy': Buildkite refused the agent "
                     "token from {env: BK_TOKEN} (an environment variable: not read again, a new "
                     f"value needs a restart): GET {buildkite.url}/metrics/queue?name=deploy "
                     "answered 401: Invalid or missing agent token; the metrics API takes an "
                     "agent token of the queue's organization (Agents > Agent Tokens; for a "
                     "queue in a cluster, one of that cluster's agent tokens), not an API access "
                     "token, and refuses a revoked one")
    assert "bkua_NotTheRightOne0000" not in error
    assert [r.status for r in buildkite.log] == [401]


def test_a_token_from_a_file(buildkite: FakeBuildkite, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BK_TOKEN")
    token = tmp_path / "bk-token"
    token.write_text(BK_TOKEN + "\n")
    buildkite.queues["deploy"] = SOME_JOBS
    config = config_for(tmp_path / "repo", {"deploy": source(buildkite, "deploy",
                                                             token={"file": str(token)})})
    assert pair(read(tmp_path / "repo", config), "deploy") == (3, 1)


def test_a_missing_token_is_a_clear_error_and_nothing_is_sent(buildkite: FakeBuildkite,
                                                              tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    monkeypatch.delenv("BK_TOKEN")
    buildkite.queues["deploy"] = SOME_JOBS
    config = config_for(tmp_path, {"deploy": source(buildkite, "deploy")})
    lines = (tmp_path / "gitscale.yaml").read_text().splitlines()
    (number,) = [n for n, line in enumerate(lines, 1) if line.strip() == "env: BK_TOKEN"]
    assert read(tmp_path, config).errors == {"deploy": f"gitscale.yaml:{number}: runner set "
                                             "'deploy': buildkite agent token: environment "
                                             "variable BK_TOKEN is not set"}
    assert buildkite.log == []


@pytest.mark.parametrize("body,problem", [
    (b'{"jobs": {"scheduled": "3"}}', "jobs.scheduled is not a count: '3'"),
    (b'{"jobs": {"running": -1}}', "jobs.running is not a count: -1"),
    (b'{"jobs": []}', "'jobs' is not an object"),
    (b'{"jobs": {"scheduled": 1000000000000000000000000000000}}',
     "jobs.scheduled is more than 1,000,000 jobs, gitscale's bound for a count (a demand "
     "file's too): not a count to scale by"),
    (b'{"jobs": {"scheduled": 1, "running": 1000001}}',
     "jobs.running is more than 1,000,000 jobs, gitscale's bound for a count (a demand "
     "file's too): not a count to scale by"),
])
def test_a_bad_count_is_a_clear_error(body: bytes, problem: str, buildkite: FakeBuildkite,
                                      tmp_path: Path) -> None:
    buildkite.queues["deploy"] = body
    config = config_for(tmp_path, {"deploy": source(buildkite, "deploy")})
    assert read(tmp_path, config).errors == {"deploy": (
        f"buildkite: queue deploy (GET {buildkite.url}/metrics/queue?name=deploy): {problem}")}


@pytest.mark.parametrize("header,seconds", [("15s", 15.0), ("10", 10.0), ("1m30s", 90.0),
                                            ("", None), (None, None), ("soon", None),
                                            # would stop the loop, or crash its wait
                                            ("inf", None), ("nan", None), ("1e308", None),
                                            ("-5", None), ("0", None), ("48h", None),
                                            ("99999999999999999h", None)])
def test_poll_duration_header(header: str | None, seconds: float | None) -> None:
    assert poll_interval(header) == seconds


def test_no_poll_duration_header_sets_no_interval(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BK_TOKEN", BK_TOKEN)
    with FakeBuildkite(token=BK_TOKEN, poll_duration=None) as fake:
        fake.queues["deploy"] = SOME_JOBS
        config = config_for(tmp_path, {"deploy": source(fake, "deploy")})
        reading = read(tmp_path, config)
    assert pair(reading, "deploy") == (3, 1) and reading.min_interval is None


def test_reconcile_scales_a_buildkite_queue(buildkite: FakeBuildkite, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    buildkite.queues["deploy"] = with_waiting(SOME_JOBS, 4)
    config = (f"runnerSets:\n"
              f"  - name: deploy\n    manifest: sets/deploy.yaml\n"
              f"    source: {{buildkite: {{queue: deploy, apiUrl: '{buildkite.url}', "
              f"token: {{env: BK_TOKEN}}, countWaiting: true}}}}\n"
              f"    policy: {{minReplicas: 0, maxReplicas: 20, buffer: 1}}\n")
    checkout = make_repo(tmp_path, {"gitscale.yaml": config,
                                    "sets/deploy.yaml": RUNNERSET.format(name="deploy",
                                                                         replicas=0)})
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout),
                         "--now", "2026-11-21T09:00:00Z")
    assert code == 0, err
    spec = yaml.safe_load(git(tmp_path / "remote.git", "show", "main:sets/deploy.yaml"))["spec"]
    assert spec["replicas"] == 3 + 4 + 1 + 1  # scheduled + waiting + running + buffer
    assert BK_TOKEN not in out + err
    assert BK_TOKEN not in git(tmp_path / "remote.git", "log", "-1", "--format=%B", "main")


def test_the_bound_is_the_demand_files_and_applies_to_the_sum_with_waiting(
        buildkite: FakeBuildkite, tmp_path: Path) -> None:
    from gitscale.runnerset_api import JOB_LIMIT

    buildkite.queues["at"] = json.dumps({"jobs": {"scheduled": JOB_LIMIT}}).encode()
    buildkite.queues["sum"] = json.dumps({"jobs": {"scheduled": JOB_LIMIT,
                                                   "waiting": 1}}).encode()
    config = config_for(tmp_path, {"at": source(buildkite, "at"),
                                   "sum": source(buildkite, "sum", countWaiting=True)})
    reading = read(tmp_path, config)
    assert pair(reading, "at") == (JOB_LIMIT, 0)
    assert reading.errors == {"sum": (
        f"buildkite: queue sum (GET {buildkite.url}/metrics/queue?name=sum): jobs.scheduled + "
        "jobs.waiting is more than 1,000,000 jobs, gitscale's bound for a count (a demand "
        "file's too): not a count to scale by")}
