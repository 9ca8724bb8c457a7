"""The GitHub client against GitHub-shaped servers on loopback: the source's calls on the fake
of tests/demand, the controller's on the fake of tests/controller; every list read to its end
by ``Link`` headers, whatever its length."""
from __future__ import annotations

from typing import Iterator
from urllib.parse import parse_qs

import pytest

from gitscale.clients.errors import ApiError, RateLimited
from gitscale.clients.github import RUNS_LISTED, GitHub, JobsPage, jobs_page
from tests.controller.github_fake import FakeGitHub as FakeRunnersAPI
from tests.demand.conftest import GH_TOKEN
from tests.demand.fake_github import FakeGitHub, repo_id

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
    assert len(client.workflow_runs("acme/r00", "queued").listed) == 40
    assert len(client.run_jobs("acme/r01", matrix.id)) == 65
    # the server caps pages at 30: 2 + 2 + 3 pages, each asked for 100
    assert len(github.log) == 7
    assert all(r.query["per_page"] == "100" for r in github.log)
    assert all(r.authorization == f"Bearer {GH_TOKEN}" for r in github.log)


def test_a_status_query_lists_1000_runs_and_says_how_many_there_are(github: FakeGitHub) -> None:
    """GitHub lists at most 1,000 runs for a query filtered by status, whatever the pages
    asked for; its total_count counts them all. The client gives both: the poll cannot tell
    how many runs it missed from the list alone."""
    github.max_per_page = 100
    repo = github.add_repo("acme", "busy")
    for _ in range(1003):
        github.add_run(repo, "queued", [])
    github.add_run(repo, "in_progress", [])
    client = GitHub(github.url, lambda: GH_TOKEN)
    queued = client.workflow_runs(repo, "queued")
    assert (len(queued.listed), queued.total, queued.unlisted) == (RUNS_LISTED, 1003, 3)
    assert [r.query.get("page", "1") for r in github.log] == [str(n) for n in range(1, 11)]
    running = client.workflow_runs(repo, "in_progress")
    assert (len(running.listed), running.total, running.unlisted) == (1, 1, 0)


def test_runs_that_leave_a_status_while_its_pages_are_read_are_not_unlisted(
        github: FakeGitHub) -> None:
    """150 queued runs, the 3 oldest picked up between the first page and the second: GitHub
    listed every queued run there was (its count fell to 147), none past its 1,000. Counted as
    unlisted they were 3 queued jobs that do not exist — and the same runs, now in progress,
    were counted again from that list."""
    github.max_per_page = 100
    repo = github.add_repo("acme", "busy")
    oldest = [github.add_run(repo, "queued", []) for _ in range(3)]
    for _ in range(147):
        github.add_run(repo, "queued", [])
    route = github.route

    def picked_up_between_pages(path: str, query: dict[str, str]) -> object:
        if query.get("page") == "2":
            for run in oldest:
                run.status = "in_progress"
        return route(path, query)

    github.route = picked_up_between_pages  # type: ignore[method-assign]
    queued = GitHub(github.url, lambda: GH_TOKEN).workflow_runs(repo, "queued")
    assert (len(queued.listed), queued.unlisted) == (147, 0)


def test_a_matrix_of_256_jobs_is_read_over_three_pages(github: FakeGitHub) -> None:
    """A matrix expands to at most 256 jobs a run; GitHub pages a run's jobs 100 at a time and
    names the pages after the first by the repo's id: all 256 are read."""
    github.max_per_page = 100
    repo = github.add_repo("acme", "matrix")
    run = github.add_run(repo, "in_progress", [("queued", ["self-hosted"])] * 256)
    client = GitHub(github.url, lambda: GH_TOKEN)
    jobs = client.run_jobs(repo, run.id)
    assert len({job["id"] for job in jobs}) == 256
    assert [(r.route, r.query.get("page")) for r in github.log] == [
        (f"/repos/{repo}/actions/runs/{run.id}/jobs", None),
        (f"/repositories/{repo_id(repo)}/actions/runs/{run.id}/jobs", "2"),
        (f"/repositories/{repo_id(repo)}/actions/runs/{run.id}/jobs", "3")]


JOBS_URLS = [
    pytest.param("https://api.github.com/repos/acme/app/actions/runs/42/jobs?filter=latest"
                 "&per_page=100", JobsPage(42, "acme/app"), id="first-page"),
    pytest.param("https://api.github.com/repositories/1296269/actions/runs/42/jobs?filter="
                 "latest&per_page=100&page=2", JobsPage(42, None), id="link-page"),
    pytest.param("https://ghe.example/api/v3/repos/acme/app/actions/runs/7/jobs",
                 JobsPage(7, "acme/app"), id="enterprise-server-base"),
    pytest.param("https://ghe.example/api/v3/repositories/9/actions/runs/7/jobs?page=3",
                 JobsPage(7, None), id="enterprise-server-link"),
    pytest.param("https://api.github.com/repos/acme/app/actions/runs?status=queued", None,
                 id="runs-list"),
    pytest.param("https://api.github.com/repositories/9/actions/runs?status=queued&page=2",
                 None, id="runs-list-link"),
    pytest.param("https://api.github.com/repos/acme/app/actions/runs/42", None, id="one-run"),
    pytest.param("https://api.github.com/repos/acme/app/actions/runs/42/jobs/1", None,
                 id="below-jobs"),
    pytest.param("https://api.github.com/repos/acme/app/actions/runs/x42/jobs", None,
                 id="run-id-not-a-number"),
    pytest.param("https://api.github.com/orgs/acme/repos?page=2", None, id="org-repos"),
]


@pytest.mark.parametrize("url,expected", JOBS_URLS)
def test_a_jobs_page_is_known_by_its_run_in_both_forms(url: str,
                                                       expected: JobsPage | None) -> None:
    assert jobs_page(url) == expected


def test_a_finished_runs_every_jobs_page_is_forgotten_and_only_its(github: FakeGitHub) -> None:
    """A run of 150 jobs is read in two pages, the second by the ``/repositories/ID/…`` URL
    GitHub's ``Link`` names; once the run is not listed, both leave the cache. The pages of a
    live run of the same repo, and those of a run of a repo outside the scope (another poll
    sharing the client) stay."""
    github.max_per_page = 100
    app, other = github.add_repo("acme", "app"), github.add_repo("acme", "other")
    done, live, elsewhere = (github.add_run(repo, "in_progress",
                                            [("queued", ["self-hosted"])] * 150)
                             for repo in (app, app, other))
    client = GitHub(github.url, lambda: GH_TOKEN)
    for repo, run in ((app, done), (app, live), (other, elsewhere)):
        assert len(client.run_jobs(repo, run.id)) == 150
    assert [r.route for r in github.log if r.query.get("page") == "2"] == [
        f"/repositories/{repo_id(repo)}/actions/runs/{run.id}/jobs"
        for repo, run in ((app, done), (app, live), (other, elsewhere))]

    def pages() -> set[JobsPage]:
        cached = [jobs_page(url) for url in client.http.cached()]
        assert None not in cached and len(set(cached)) == len(cached)  # one URL a page
        return set(cached)  # type: ignore[arg-type]

    kept = {JobsPage(run.id, name) for run in (live, elsewhere) for name in (run.repo, None)}
    assert pages() == kept | {JobsPage(done.id, app), JobsPage(done.id, None)}
    client.forget_finished_runs([app], [(app, live.id)])
    assert pages() == kept
    client.forget_finished_runs([app, other], [])  # nothing listed any more: all go
    assert pages() == set()


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
