"""The GitHub client against GitHub-shaped servers on loopback: the source's calls on the fake
of tests/demand, the controller's on the fake of tests/controller; every list read to its end
by ``Link`` headers, whatever its length."""
from __future__ import annotations

from typing import Iterator
from urllib.parse import parse_qs

import pytest

from gitscale.clients.errors import ApiError, RateLimited
from gitscale.clients.github import GitHub
from tests.controller.github_fake import FakeGitHub as FakeRunnersAPI
from tests.demand.conftest import GH_TOKEN
from tests.demand.fake_github import FakeGitHub

TOKEN = "ghp-test-token"


@pytest.fixture
def runners_api() -> Iterator[FakeRunnersAPI]:
    server = FakeRunnersAPI(TOKEN).start()
    yield server
    server.stop()


def controller_client(server: FakeRunnersAPI, **options: float) -> GitHub:
    return GitHub(f"{server.url}/api/v3", lambda: TOKEN, retries=0, **options)  # type: ignore[arg-type]


def test_the_sources_calls_read_every_page(github: FakeGitHub) -> None:
    for n in range(35):
        github.add_repo("acme", f"r{n:02d}")
    for _ in range(40):
        github.add_run("acme/r00", "queued", [("queued", ["self-hosted"])])
    matrix = github.add_run("acme/r01", "in_progress",
                            [("queued", ["self-hosted"]) for _ in range(65)])
    client = GitHub(github.url, lambda: GH_TOKEN)
    assert len(client.org_repos("acme")) == 35
    assert len(client.workflow_runs("acme/r00", "queued")) == 40
    assert len(client.run_jobs("acme/r01", matrix.id)) == 65
    # the server caps pages at 30: 2 + 2 + 3 pages, each asked for 100
    assert len(github.log) == 7
    assert all(r.query["per_page"] == "100" for r in github.log)
    assert all(r.authorization == f"Bearer {GH_TOKEN}" for r in github.log)


def test_250_runners_are_read_over_3_pages(runners_api: FakeRunnersAPI) -> None:
    client = controller_client(runners_api)
    for n in range(250):
        client.generate_jitconfig("orgs/acme", {"name": f"r-{n:03d}", "runner_group_id": 1,
                                                "labels": ["linux"]})
    runners = client.runners("orgs/acme")
    assert sorted(r["name"] for r in runners) == [f"r-{n:03d}" for n in range(250)]
    pages = [parse_qs(q).get("page", ["1"])[0] for (m, p), q in
             zip(runners_api.calls, runners_api.queries) if m == "GET"]
    assert pages == ["1", "2", "3"]


def test_150_runner_groups_are_read_over_2_pages(runners_api: FakeRunnersAPI) -> None:
    runners_api.groups = {f"group-{n:03d}": 10 + n for n in range(150)}
    groups = controller_client(runners_api).runner_groups("orgs/acme")
    assert {g["name"]: g["id"] for g in groups} == runners_api.groups
    assert runners_api.count("GET", "runner-groups") == 2


def test_deleting_a_runner(runners_api: FakeRunnersAPI) -> None:
    client = controller_client(runners_api)
    made = client.generate_jitconfig("orgs/acme", {"name": "r-1", "runner_group_id": 1,
                                                   "labels": ["linux"]})
    runner_id = made["runner"]["id"]
    runners_api.set_state("r-1", online=True, busy=True)
    with pytest.raises(ApiError) as busy:
        client.delete_runner("orgs/acme", runner_id)
    assert busy.value.status == 422 and "still running a job" in busy.value.detail
    runners_api.set_state("r-1", online=True, busy=False)
    assert client.delete_runner("orgs/acme", runner_id) is True
    assert client.delete_runner("orgs/acme", runner_id) is False  # already gone


def test_a_runner_list_refused_by_a_rate_limit(runners_api: FakeRunnersAPI) -> None:
    """A secondary limit of a second is waited for; a primary one an hour away is reported,
    and the API is not asked again before it lifts."""
    sleeps: list[float] = []
    client = GitHub(f"{runners_api.url}/api/v3", lambda: TOKEN, retries=0, max_wait=5,
                    sleep=sleeps.append)
    runners_api.limit(retry_after=1)
    assert client.runners("orgs/acme") == []
    assert len(sleeps) == 1 and 0 < sleeps[0] <= 1
    runners_api.limit(reset=4102444800)
    with pytest.raises(RateLimited) as caught:
        client.runners("orgs/acme")
    assert "rate limited until 2100-01-01T00:00:00Z" in str(caught.value)
    asked = len(runners_api.calls)
    with pytest.raises(RateLimited):
        client.runner_groups("orgs/acme")
    assert len(runners_api.calls) == asked
