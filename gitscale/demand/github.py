"""GitHub Actions demand by polling the REST API: queued and in-progress jobs per runner set.

For the repos in scope (a list, or every repo of an org), list queued and in-progress workflow
runs, then their jobs (``filter=latest``), following pagination to the end. A job counts for a
set when every job label other than ``self-hosted`` is among the set's labels. Sets that share an
API, scope and credential share one poll.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from gitscale.config import RunnerSetConfig
from gitscale.core.model import Demand
from gitscale.demand import DemandReading
from gitscale.demand.http import JsonClient, RateLimited, SourceError
from gitscale.demand.secrets import SecretError, read_secret
from gitscale.github_app import InstallationToken

DEFAULT_API = "https://api.github.com"
KEY_NAME = "github app private key"
QUEUED = frozenset({"queued", "requested", "pending"})
RUNNING = frozenset({"in_progress"})
# A run is `waiting` while any of its jobs waits for an environment approval; its other jobs
# may be queued for a runner all the same. A job that is itself `waiting` is not counted: a job
# waiting for a person needs no runner yet (webhook mode follows the same rule).
RUN_STATUSES = ("queued", "in_progress", "waiting")


@dataclass(frozen=True)
class Job:
    id: int
    status: str
    labels: tuple[str, ...]


def matches(job_labels: Iterable[str], runner_labels: Iterable[str]) -> bool:
    """PRODUCT §3: every job label other than ``self-hosted`` is among the runner's labels."""
    have = {label.lower() for label in runner_labels}
    return all(label.lower() in have for label in job_labels if label.lower() != "self-hosted")


def count(jobs: Iterable[Job], labels: Sequence[str]) -> Demand:
    queued = running = 0
    ids = []
    for job in jobs:
        if not matches(job.labels, labels):
            continue
        if job.status in QUEUED:
            queued += 1
        elif job.status in RUNNING:
            running += 1
        else:
            continue
        ids.append(str(job.id))
    return Demand(queued, running, frozenset(ids))


class GitHubAuth:
    """A token, or a GitHub App's installation token (``gitscale.github_app``)."""

    def __init__(self, settings: dict[str, Any], api: str) -> None:
        self.settings = settings
        self.api = api
        self._token: str | None = None
        self._lock = threading.Lock()
        app = settings.get("app")
        self._app = None if app is None else InstallationToken(
            api, str(app["appId"]), lambda: read_secret(app["privateKey"], KEY_NAME),
            installation=str(app["installationId"]), error=SecretError, key_name=KEY_NAME)

    def header(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token()}",
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28"}

    def token(self) -> str:
        if self._app is not None:
            return self._app.get()
        with self._lock:
            if self._token is None:
                self._token = read_secret(
                    self.settings.get("token", {"env": "GITHUB_TOKEN"}), "github token")
            return self._token


class GitHubPoller:
    """One API + scope + credential: every relevant job, once per pass."""

    def __init__(self, client: JsonClient, api: str, settings: dict[str, Any]) -> None:
        self.client = client
        self.api = api.rstrip("/")
        self.settings = settings

    def repos(self) -> list[str]:
        if "repos" in self.settings:
            return list(self.settings["repos"])
        org = self.settings["org"]
        listed = self.client.paginate(f"{self.api}/orgs/{org}/repos",
                                      {"per_page": 100, "type": "all"}, "")
        names = []
        for repo in listed:
            if not isinstance(repo, dict) or not isinstance(repo.get("full_name"), str):
                raise SourceError(f"github: GET {self.api}/orgs/{org}/repos: "
                                  "a repo without a full_name")
            if not repo.get("archived"):
                names.append(repo["full_name"])
        return names

    def jobs(self) -> list[Job]:
        """Every queued or in-progress job in scope. Requests run on a few threads, first the
        runs of every repo, then the jobs of every run: at real API latency a sequential poll
        of 100 repos takes half a minute, and one busy repo must not serialise the rest."""
        found: dict[int, Job] = {}
        repos = self.repos()
        workers = max(1, int(self.settings.get("concurrency", 8)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="github") as pool:
            runs = [run for listed in pool.map(self._runs, repos) for run in listed]
            for jobs in pool.map(self._run_jobs, runs):
                for job in jobs:
                    found[job.id] = job
        return list(found.values())

    def _runs(self, repo: str) -> list[tuple[str, int]]:
        found = []
        for status in RUN_STATUSES:
            for run in self.client.paginate(f"{self.api}/repos/{repo}/actions/runs",
                                            {"status": status, "per_page": 100},
                                            "workflow_runs"):
                run_id = run.get("id") if isinstance(run, dict) else None
                if not isinstance(run_id, int) or isinstance(run_id, bool):
                    raise SourceError(f"github: GET {self.api}/repos/{repo}/actions/runs"
                                      f"?status={status}: a workflow run without a "
                                      "numeric id")
                found.append((repo, run_id))
        return found

    def _run_jobs(self, run: tuple[str, int]) -> list[Job]:
        repo, run_id = run
        return [_job(raw, f"{repo} run {run_id}") for raw in self.client.paginate(
            f"{self.api}/repos/{repo}/actions/runs/{run_id}/jobs",
            {"filter": "latest", "per_page": 100}, "jobs")]


def _job(raw: Any, where: str) -> Job:
    if not isinstance(raw, dict) or not isinstance(raw.get("id"), int):
        raise SourceError(f"github: a job of {where} has no numeric id")
    labels = raw.get("labels") or []
    return Job(raw["id"], str(raw.get("status", "")), tuple(str(label) for label in labels))


def read_github(sets: Sequence[RunnerSetConfig], pollers: dict[tuple[str, str], GitHubPoller],
                make_poller: Any) -> DemandReading:
    """Demand for ``sets`` (all with a github source), polling each distinct scope once."""
    reading = DemandReading()
    groups: dict[tuple[str, str], list[RunnerSetConfig]] = defaultdict(list)
    for runner_set in sets:
        settings = runner_set.source.settings
        groups[scope_key(settings)].append(runner_set)
    for key, members in groups.items():
        settings = members[0].source.settings
        try:
            poller = pollers.get(key) or make_poller(settings)
            pollers[key] = poller
            jobs = poller.jobs()
        except RateLimited as exc:
            reading.merge(DemandReading(retry_at=exc.until))
            for runner_set in members:
                reading.errors[runner_set.name] = str(exc)
            continue
        except (SourceError, SecretError) as exc:
            for runner_set in members:
                reading.errors[runner_set.name] = str(exc)
            continue
        for runner_set in members:
            reading.demands[runner_set.name] = count(jobs, runner_set.source.settings["labels"])
    return reading


def scope_key(settings: dict[str, Any]) -> tuple[str, str]:
    api = str(settings.get("apiUrl", DEFAULT_API)).rstrip("/")
    scope = f"org:{settings['org']}" if "org" in settings else \
        "repos:" + ",".join(sorted(settings.get("repos", [])))
    auth = repr(sorted((settings.get("app") or settings.get("token") or {}).items()))
    return api, f"{scope}|{auth}"
