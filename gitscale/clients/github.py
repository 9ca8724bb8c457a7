"""GitHub's REST API: the calls gitscale makes, on the one HTTP client (``http.py``).

One ``GitHub`` per API base URL and credential: a token, or a GitHub App's installation token
(``github_app.py``) — ``token`` is asked before every request, so an App's refreshed token, or
a token file rotated, is picked up; ``refused`` is told of a 401/403 (the credential is read
again, and a request refused with the old one sent once more with the new). Every list is read to its end by ``Link: rel="next"`` at 100 a page.

- the polling source and ``serve``'s resync: an org's repos, a repo's workflow runs by status,
  a run's jobs (``filter=latest``);
- the controller: a scope's runners (``orgs/NAME``, ``repos/OWNER/REPO`` or
  ``enterprises/NAME``), its runner groups, generate-jitconfig, and deleting a runner.

Answers come back as GitHub's JSON; what they mean is the caller's business. Errors are the
client's (``errors.py``): the callers translate them at their boundary.

https://docs.github.com/en/rest/actions/workflow-runs, …/workflow-jobs, …/self-hosted-runners,
…/self-hosted-runner-groups
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from gitscale.clients.errors import ApiError
from gitscale.clients.http import EtagCache, HttpClient

HEADERS = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
PER_PAGE = 100  # GitHub's largest page
# The most runs a query of the runs list filtered by status gives, however many pages are asked
# for ("List workflow runs for a repository": "up to 1,000 results for each search when using
# the following parameters: actor, branch, check_suite_id, created, event, head_sha, status");
# past it, pages are empty while ``total_count`` still counts every run.
RUNS_LISTED = 1000
# A run's jobs, as gitscale asks for them (``/repos/OWNER/REPO/…``) and as GitHub's ``Link``
# names the pages after the first (``/repositories/REPO_ID/…``), under any API base path
JOBS_PATH = re.compile(r"/(?:repos/(?P<repo>[^/?#]+/[^/?#]+)|repositories/\d+)"
                       r"/actions/runs/(?P<run>\d+)/jobs\Z")


@dataclass(frozen=True)
class Runs:
    """A repo's runs of one status as listed, and how many GitHub counts (``total_count``;
    None when no page said): more than listed when the list stopped at ``RUNS_LISTED``."""

    listed: list[Any]
    total: int | None

    @property
    def unlisted(self) -> int:
        """Runs GitHub counts but did not list (0 when it listed them all)."""
        return max(0, (self.total or 0) - len(self.listed))


@dataclass(frozen=True)
class JobsPage:
    """The run a jobs page belongs to: its id, and its repo when the URL names it (GitHub's
    ``Link`` names the repo by its numeric id only)."""

    run_id: int
    repo: str | None


def jobs_page(url: str) -> JobsPage | None:
    """The run whose jobs ``url`` lists (any page, any query), or None for any other URL."""
    path = url.split("?", 1)[0].split("#", 1)[0]
    found = JOBS_PATH.search(path)
    return None if found is None else JobsPage(int(found["run"]), found["repo"])


class GitHub:
    """One API (``https://api.github.com``, ``https://HOST/api/v3``…) and one credential."""

    def __init__(self, api: str, token: Callable[[], str], *, cache: EtagCache | None = None,
                 timeout: float = 10.0, retries: int = 2, max_wait: float = 0.0,
                 transport: Any = None, sleep: Callable[[float], None] = time.sleep,
                 refused: Callable[[int], Any] | None = None) -> None:
        self.api = api.rstrip("/")
        self._token = token
        self.http = HttpClient(name=f"github ({self.api})", headers=self._headers,
                               refused=refused, cache=cache,
                               timeout=timeout, retries=retries, max_wait=max_wait,
                               transport=transport, sleep=sleep)

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token()}", **HEADERS}

    def close(self) -> None:
        self.http.close()

    def save(self) -> None:
        self.http.save()

    # -- the polling source and serve's resync ------------------------------------------------
    def org_repos(self, org: str) -> list[Any]:
        return self.http.paginate(f"{self.api}/orgs/{org}/repos",
                                  {"per_page": PER_PAGE, "type": "all"}, "")

    def workflow_runs(self, repo: str, status: str) -> Runs:
        """``repo``'s runs of ``status``: at most ``RUNS_LISTED``, and GitHub's count of them
        (the smallest ``total_count`` of its pages: runs come and go while they are read, and
        a run that left the status between two pages — picked up, finished — is no run left
        unlisted: the largest would count it here and again under the status it went to)."""
        totals: list[int] = []

        def seen(body: Any) -> None:
            total = body.get("total_count") if isinstance(body, dict) else None
            if isinstance(total, int) and not isinstance(total, bool) and total >= 0:
                totals.append(total)

        listed = self.http.paginate(f"{self.api}/repos/{repo}/actions/runs",
                                    {"status": status, "per_page": PER_PAGE}, "workflow_runs",
                                    seen=seen)
        return Runs(listed, min(totals) if totals else None)

    def run_jobs(self, repo: str, run_id: int) -> list[Any]:
        return self.http.paginate(f"{self.api}/repos/{repo}/actions/runs/{run_id}/jobs",
                                  {"filter": "latest", "per_page": PER_PAGE}, "jobs")

    def forget_finished_runs(self, repos: Iterable[str], listed: Iterable[tuple[str, int]]
                             ) -> None:
        """The jobs pages of ``repos``' runs that are not ``listed`` (queued, in progress or
        waiting) any more are never asked again: drop their cached answers now. Kept for the
        ETag cache's day, a busy org's finished runs were most of a `run` process's memory
        (a run of 5 jobs is ≈ 12 KB of JSON, ≈ 35 KB once parsed) and of the file it saves.

        Pages are matched by the run id in their URL, not by its prefix: the first page is
        ``/repos/OWNER/REPO/actions/runs/ID/jobs``, but GitHub's ``Link`` names the next ones
        ``/repositories/REPO_ID/actions/runs/ID/jobs?page=N``. A run is of ``repos`` when its
        first page is cached under one of their names (run ids are unique across GitHub, so
        a run of another scope sharing this client is never taken for one of these)."""
        scope = {repo.lower() for repo in repos}
        live = {run_id for _, run_id in listed}
        finished = set()
        for url in self.http.cached():
            page = jobs_page(url)
            if page and page.repo is not None and page.repo.lower() in scope \
                    and page.run_id not in live:
                finished.add(page.run_id)
        if finished:
            self.http.forget(lambda url: (page := jobs_page(url)) is not None
                             and page.run_id in finished)

    # -- the controller -----------------------------------------------------------------------
    def runners(self, scope: str, name: str | None = None) -> list[Any]:
        """Every runner of ``scope`` (``orgs/acme``…), or those named ``name``."""
        return self.http.paginate(f"{self.api}/{scope}/actions/runners",
                                  {"per_page": PER_PAGE, "name": name}, "runners")

    def runner_groups(self, owner: str) -> list[Any]:
        """Every runner group of ``owner`` (``orgs/acme`` or ``enterprises/big``)."""
        return self.http.paginate(f"{self.api}/{owner}/actions/runner-groups",
                                  {"per_page": PER_PAGE}, "runner_groups")

    def generate_jitconfig(self, scope: str, body: dict[str, Any]) -> Any:
        """A just-in-time runner configuration: ``{"runner": {...}, "encoded_jit_config"}``.
        Sent once (a POST is not retried)."""
        return self.http.request("POST", f"{self.api}/{scope}/actions/runners/generate-jitconfig",
                                 json=body).body

    def delete_runner(self, scope: str, runner_id: int) -> bool:
        """Remove a runner's registration; False when it was already gone (404). GitHub
        answers 422 while it runs a job: an ``ApiError`` with that status."""
        try:
            self.http.request("DELETE", f"{self.api}/{scope}/actions/runners/{runner_id}")
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True
