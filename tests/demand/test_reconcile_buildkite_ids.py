"""`gitscale reconcile` on a saturated Buildkite queue, against the fake metrics and GraphQL
APIs and a local git repo: with ``jobIds`` a pass whose jobs changed without using up the
backlog makes no commit, where the counts alone (no ``jobIds``) must re-affirm."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.demand.conftest import BK_TOKEN
from tests.demand.fake_buildkite import FakeBuildkite, Job
from tests.demand.test_buildkite import SOME_JOBS
from tests.helpers import RUNNERSET, git, make_repo, run

API_TOKEN = "bkua_S3cr3tApiAccessToken0123456789"


def counts(scheduled: int, running: int) -> bytes:
    body = json.loads(SOME_JOBS)  # organization "test"
    body["jobs"] = {"scheduled": scheduled, "running": running, "total": scheduled + running}
    return json.dumps(body).encode()


def checkout_for(tmp_path: Path, buildkite: FakeBuildkite, ids: bool) -> Path:
    job_ids = (f", jobIds: {{token: {{env: BK_API_TOKEN}}, graphqlUrl: '{buildkite.graphql_url}'}}"
               if ids else "")
    config = ("runnerSets:\n"
              "  - name: deploy\n    manifest: sets/deploy.yaml\n"
              f"    source: {{buildkite: {{queue: deploy, apiUrl: '{buildkite.url}', "
              f"token: {{env: BK_TOKEN}}{job_ids}}}}}\n"
              "    policy: {minReplicas: 0, maxReplicas: 3, scaleDownDelay: 5m}\n")
    return make_repo(tmp_path, {"gitscale.yaml": config,
                                "sets/deploy.yaml": RUNNERSET.format(name="deploy", replicas=0)})


def reconcile(capsys: pytest.CaptureFixture[str], checkout: Path, clock: str) -> str:
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout),
                         "--now", f"2026-11-23T{clock}Z")
    assert code == 0, out + err
    assert BK_TOKEN not in out + err and API_TOKEN not in out + err
    return err


def spec(tmp_path: Path) -> dict:  # type: ignore[type-arg]
    return yaml.safe_load(git(tmp_path / "remote.git", "show",  # type: ignore[no-any-return]
                              "main:sets/deploy.yaml"))["spec"]


def commits(tmp_path: Path) -> int:
    return int(git(tmp_path / "remote.git", "rev-list", "--count", "main"))


@pytest.mark.parametrize(("ids", "commits_after"), [
    pytest.param(True, 0, id="with-job-ids"),
    pytest.param(False, 1, id="counts-only"),
])
def test_jobs_that_change_without_using_up_the_backlog_need_no_commit_with_ids(
        ids: bool, commits_after: int, buildkite: FakeBuildkite, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("BK_API_TOKEN", API_TOKEN)
    buildkite.api_token = API_TOKEN
    checkout = checkout_for(tmp_path, buildkite, ids)

    # 09:00 six jobs on a queue of at most three runners: three run, three wait
    buildkite.queues["deploy"] = counts(3, 3)
    buildkite.jobs["deploy"] = [Job(f"r{n}", "RUNNING") for n in (1, 2, 3)] + [
        Job(f"s{n}", "SCHEDULED") for n in (1, 2, 3)]
    reconcile(capsys, checkout, "09:00:00")
    first = spec(tmp_path)
    assert (first["replicas"], first["patchID"], first["backlog"]) == (3, 0, 3)
    before = commits(tmp_path)

    # 09:01 r1 finished and s1 took its runner (a refill of the backlog); n1 and n2 came:
    # the counts changed (4 scheduled, 3 running), two of the three refills are left
    buildkite.queues["deploy"] = counts(4, 3)
    buildkite.jobs["deploy"] = [Job(n, "RUNNING") for n in ("s1", "r2", "r3")] + [
        Job(n, "SCHEDULED") for n in ("s2", "s3", "n1", "n2")]
    err = reconcile(capsys, checkout, "09:01:00")
    assert "warning" not in err
    assert commits(tmp_path) - before == commits_after
    if not ids:  # the counts alone cannot tell the arrivals from the refill: re-affirm
        assert (spec(tmp_path)["replicas"], spec(tmp_path)["patchID"]) == (3, 1)
        assert not any(r.method == "POST" for r in buildkite.log)
    else:
        assert sum(r.method == "POST" for r in buildkite.log) == 2


def test_an_unreadable_api_token_exits_1_and_writes_nothing(
        buildkite: FakeBuildkite, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkout = checkout_for(tmp_path, buildkite, ids=True)  # BK_API_TOKEN is not set
    buildkite.queues["deploy"] = counts(3, 3)
    before = commits(tmp_path)
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout),
                         "--now", "2026-11-23T09:00:00Z")
    assert code == 1
    assert "gitscale.yaml:4" in err and "environment variable BK_API_TOKEN is not set" in err
    assert "Traceback" not in err and BK_TOKEN not in out + err
    assert commits(tmp_path) == before and buildkite.log == []
