"""GitHub Actions demand by polling the REST API: queued and in-progress jobs per runner set.

For the repos in scope (a list, or every repo of an org), list queued and in-progress workflow
runs, then their jobs (``filter=latest``), through the GitHub client (``gitscale.clients``:
every page, ETags, rate limits). A job counts for a set when every job label other than
``self-hosted`` is among the set's labels and a runner could take it now (``QUEUED``,
``RUNNING``): one held for an approval or by its concurrency group does not. Sets that share
an API, scope and credential share one poll, and one client kept across passes (its ETag
cache and token: a token file rotated is read again, ``config/rotating.py``).

GitHub lists at most 1,000 runs of a repo for a status (``clients.github.RUNS_LISTED``), and
says in ``total_count`` how many there are. The jobs of runs past that cannot be read, but
each run has at least one: each unlisted ``queued`` run counts as one queued job, each
unlisted ``in_progress`` run as one running job (a lower bound, not a guess downward), for
each set that a job of the repo's listed runs of that status matches (the runs GitHub did
not list are older runs of the same repo: the newest thousand say which sets its workflows
ask for; charging every set would scale up sets no job of the repo asks for). An unlisted
``waiting`` run is not counted: it may hold no job a runner can take. Such a set's demand is
counts only (no job ids: the unlisted jobs have none), and the poll says so as a warning.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from gitscale.clients.errors import ApiError
from gitscale.clients.etags import EtagCache, cache_file
from gitscale.clients.github import RUNS_LISTED, GitHub
from gitscale.clients.github_app import InstallationToken
from gitscale.config.load import RunnerSetConfig
from gitscale.config.rotating import Rotating
from gitscale.config.secrets import SecretError, declared, read_secret, read_token, via
from gitscale.config.sources import GitHubSettings
from gitscale.core.model import Demand
from gitscale.core.reservations import MAX_JOB_ID, is_job_id
from gitscale.demand import DemandReading, SourceError, warner
from gitscale.demand.refused import CredentialRefused, is_refusal, refusal
from gitscale.runnerset_api import JOB_LIMIT

if TYPE_CHECKING:
    from gitscale.demand.registry import Where
    from gitscale.demand.resolve import Sources

KEY_NAME = "github app private key"
# What to check of a refused credential: the permissions of the README's credentials table.
PERMISSIONS = "the repository permissions Actions: Read-only and Metadata: Read-only"
TOKEN_CHECK = (f"check that it is not revoked or expired and that it has {PERMISSIONS} (a "
               "classic token: repo, for private repositories; docs/credentials.md)")
APP_CHECK = (f"check that the App is installed on the repositories polled, with {PERMISSIONS}, "
             "and that its installation is not suspended (docs/credentials.md)")
QUEUED = frozenset({"queued", "requested"})
RUNNING = frozenset({"in_progress"})
# Not counted, the jobs GitHub holds, which need no runner yet: `waiting` for an environment's
# approval, `pending` while their concurrency group runs another job or run ("Control the
# concurrency of workflows and jobs": one at a time in a group; with `queue: max`, up to 100
# wait in it). Each is `queued` once released, and counted then.
# A job's statuses, as GitHub documents them (REST "workflow jobs" and the workflow_job event)
JOB_STATUSES = ("queued", "in_progress", "completed", "waiting", "requested", "pending")
# A run is `waiting` while any of its jobs waits for an environment approval; its other jobs
# may be queued for a runner all the same. A job that is itself `waiting` is not counted: a job
# waiting for a person needs no runner yet (webhook mode follows the same rule).
RUN_STATUSES = ("queued", "in_progress", "waiting")


@dataclass(frozen=True)
class Job:
    id: int
    status: str
    labels: tuple[str, ...]


@dataclass(frozen=True)
class Unlisted:
    """Runs of ``repo`` in ``status`` that GitHub counts (``total``) but did not list, and the
    labels of the jobs of the runs of that status it did list."""

    repo: str
    status: str
    total: int
    listed: int
    labels: tuple[tuple[str, ...], ...] = ()

    @property
    def count(self) -> int:
        return self.total - self.listed

    def counts_as(self) -> str | None:
        """What each unlisted run counts as: "queued", "running", or None (not counted)."""
        return {"queued": "queued", "in_progress": "running"}.get(self.status)

    def charges(self, labels: Sequence[str]) -> bool:
        """Whether a set with ``labels`` is given the unlisted runs: a listed job matches."""
        return self.counts_as() is not None and any(matches(job, labels)
                                                    for job in self.labels)

    def note(self, api: str, charged: Sequence[str]) -> str:
        """The warning: what GitHub did not list, and what was counted for it."""
        said = (f"github: {api}: {self.repo}: GitHub counts {self.total:,} {self.status} "
                f"runs and lists {self.listed:,} (at most {RUNS_LISTED:,} a status): ")
        kind = self.counts_as()
        if kind is None:
            return said + (f"the {self.count:,} unlisted are not counted (a {self.status} run "
                           "may hold no job a runner can take)")
        counted = f"the {self.count:,} unlisted counted as one {kind} job each "
        if not charged:
            return said + counted + ("for no set (no job of the listed runs matches one's "
                                     "labels)")
        return said + counted + (f"for set(s) {', '.join(charged)} (a lower bound: each run "
                                 "has a job; the jobs of the listed runs match their labels)")


@dataclass(frozen=True)
class Poll:
    """What one poll read: every listed job, and the runs GitHub counts but did not list."""

    jobs: list[Job]
    unlisted: tuple[Unlisted, ...] = ()


def with_unlisted(demand: Demand, unlisted: Iterable[Unlisted],
                  labels: Sequence[str]) -> Demand:
    """``demand`` with the unlisted runs its set is charged (counts only: they have no ids)."""
    queued, running = demand.queued, demand.running
    for runs in unlisted:
        if runs.charges(labels):
            if runs.counts_as() == "queued":
                queued += runs.count
            else:
                running += runs.count
    if (queued, running) == (demand.queued, demand.running):
        return demand
    return Demand(queued, running, None)


def matches(job_labels: Iterable[str], runner_labels: Iterable[str]) -> bool:
    """A runner can take the job when every job label other than ``self-hosted`` is among
    its labels (case-insensitive), as GitHub matches ``runs-on`` to self-hosted runners: a job
    asking for ``[self-hosted]`` only, or for nothing, can run on any runner."""
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
    """A token, or a GitHub App's installation token (``gitscale.clients.github_app``), from
    the source's settings. A token in a file is read again when the file changes, and when
    GitHub refuses it (``refused``: a 401 or 403); an App's private key is read at each
    exchange, and its installation token exchanged again after a 401."""

    def __init__(self, settings: GitHubSettings,
                 report: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self._token = None if settings.token is None or settings.app is not None else Rotating(
            settings.token, "github token", read=read_token, report=report)
        app = settings.app
        # without installationId, the App's installation on the org (or on the first repo's
        # owner: one installation covers the repos it may read) is looked up once
        owner = f"orgs/{settings.org}" if settings.org else f"repos/{settings.repos[0]}"
        self._app = None if app is None else InstallationToken(
            settings.api_url, app.app_id, lambda: read_secret(app.private_key, KEY_NAME),
            installation=app.installation_id, error=SecretError,
            key_name=f"{KEY_NAME} {declared(app.private_key)}{via(app.private_key)} (read "
                     "again for each exchange)",
            installation_name="source.github.app.installationId", owner=owner)

    def token(self) -> str:
        if self._app is not None:
            try:
                return self._app.get()
            except SecretError as exc:  # the key refused or unusable: blamed on its line
                if exc.ref is None and KEY_NAME in str(exc) and self.settings.app is not None:
                    raise SecretError(str(exc), self.settings.app.private_key) from None
                raise
        if self._token is None:  # (settings always name one or the other)
            raise SecretError("github token: the source names neither a token nor an app")
        return self._token.get()

    def refused(self, status: int) -> None:
        """GitHub refused the credential: read it again (it may have been rotated)."""
        if self._app is not None:
            if status == 401:
                self._app.refused()
        elif self._token is not None:
            self._token.refresh()


def poller(sources: Sources, settings: GitHubSettings) -> GitHubPoller:
    """A poller of ``settings``' scope, on the client ``sources`` keeps for its API and
    credential (its ETag cache and token outlive the pass in loop mode)."""

    def make() -> GitHub:
        api = settings.api_url
        cache = EtagCache.load(cache_file(sources.cache_dir, api, settings.credential))
        auth = GitHubAuth(settings, sources.report)
        return GitHub(api, auth.token, cache=cache, timeout=sources.timeout,
                      transport=sources.transport, refused=auth.refused)

    client = sources.client(("github", settings.api_url, settings.credential), make)
    return GitHubPoller(client, settings, warner(sources.report, sources.warned))


def source(where: Where, settings: GitHubSettings) -> GitHubPoller:
    """The registry's client factory."""
    return poller(where.sources, settings)


class GitHubPoller:
    """One API + scope + credential: every relevant job, once per pass."""

    def __init__(self, client: GitHub, settings: GitHubSettings,
                 warn: Callable[[str], None] | None = None) -> None:
        self.client = client
        self.api = settings.api_url
        self.settings = settings
        self.warn = warn or warner(None)

    def read(self, sets: Sequence[RunnerSetConfig]) -> DemandReading:
        """Demand for each of ``sets`` (of this scope), from one poll."""
        poll = self.poll()
        for runs in poll.unlisted:
            self.warn(runs.note(self.api, [s.name for s in sets
                                           if runs.charges(s.source.settings.labels)]))
        reading = DemandReading()
        for runner_set in sets:
            labels = runner_set.source.settings.labels
            demand = with_unlisted(count(poll.jobs, labels), poll.unlisted, labels)
            if max(demand.queued, demand.running) > JOB_LIMIT:
                reading.errors[runner_set.name] = (
                    f"github: {self.api} ({self._scope()}): more than {JOB_LIMIT:,} "
                    f"{'queued' if demand.queued > JOB_LIMIT else 'running'} jobs for "
                    "the set's labels, gitscale's bound for a count (a demand file's too): "
                    "not a count to scale by")
            else:
                reading.demands[runner_set.name] = demand
        return reading

    def _scope(self) -> str:
        if self.settings.org is not None:
            return f"org {self.settings.org}"
        return f"repos {', '.join(self.settings.repos)}"

    def repos(self) -> list[str]:
        if self.settings.org is None:
            return list(self.settings.repos)
        org = self.settings.org
        listed = self.client.org_repos(org)
        names = []
        for repo in listed:
            if not isinstance(repo, dict) or not isinstance(repo.get("full_name"), str):
                raise SourceError(f"github: GET {self.api}/orgs/{org}/repos: "
                                  "a repo without a full_name")
            if not repo.get("archived"):
                names.append(repo["full_name"])
        return names

    def jobs(self) -> list[Job]:
        """Every listed queued or in-progress job in scope (``poll`` says what was not)."""
        return self.poll().jobs

    def poll(self) -> Poll:
        """Every queued or in-progress job in scope, and the runs GitHub did not list; a
        credential GitHub refused is a ``CredentialRefused`` naming it as gitscale.yaml does."""
        try:
            return self._poll()
        except ApiError as exc:
            if not is_refusal(exc):
                raise
            raise self._refused(exc) from None

    def _refused(self, exc: ApiError) -> CredentialRefused:
        """``exc``, a refusal, said of the credential as the config declares it."""
        check = TOKEN_CHECK
        if exc.status == 403 and "not accessible by" in exc.detail:
            wanted = exc.headers.get("x-accepted-github-permissions")
            said = f"; GitHub asked for {wanted}" if wanted else ""
            check = (f"it lacks {PERMISSIONS}{said}: grant them — an App's new permissions "
                     "must be accepted on its installation; docs/credentials.md")
        app, name = self.settings.app, self.client.http.name
        if app is not None:
            # (``GitHubAuth.refused``: only a 401 drops the token for another exchange)
            again = (", exchanged again after a refusal unless it is less than 30 s old"
                     if exc.status == 401 else
                     "; a 403 refuses a permission: not exchanged again")
            return CredentialRefused(
                f"GitHub refused the installation token of GitHub App {app.app_id} (minted "
                f"with the key from {declared(app.private_key)}",
                f"{again}): {str(exc).removeprefix(name + ': ')}; "
                f"{APP_CHECK if check is TOKEN_CHECK else check}", app.private_key)
        assert self.settings.token is not None  # (settings name a token or an app)
        return refusal("GitHub", "token", self.settings.token, exc, name, check)

    def _poll(self) -> Poll:
        """(``poll``.) Requests run on a few threads, first the runs of every repo, then the jobs of every
        run: at real API latency a sequential poll of 100 repos takes half a minute, and one
        busy repo must not serialise the rest."""
        found: dict[int, Job] = {}
        repos = self.repos()
        workers = max(1, self.settings.concurrency)
        labels: dict[tuple[str, str], set[tuple[str, ...]]] = {}
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="github") as pool:
            listed = list(pool.map(self._runs, repos))
            runs = [(repo, run_id) for each, _ in listed for repo, run_id, _ in each]
            statuses = [status for each, _ in listed for _, _, status in each]
            for run, status, jobs in zip(runs, statuses, pool.map(self._run_jobs, runs)):
                for job in jobs:
                    found[job.id] = job
                    labels.setdefault((run[0], status), set()).add(job.labels)
        self.client.forget_finished_runs(repos, runs)  # (a poll that failed forgets nothing)
        unlisted = tuple(
            Unlisted(runs.repo, runs.status, runs.total, runs.listed,
                     tuple(sorted(labels.get((runs.repo, runs.status), ()))))
            for _, missed in listed for runs in missed)
        return Poll(list(found.values()), unlisted)

    def _runs(self, repo: str) -> tuple[list[tuple[str, int, str]], list[Unlisted]]:
        """``repo``'s listed runs (repo, id, status), and per status the runs not listed."""
        found = []
        missed = []
        for status in RUN_STATUSES:
            runs = self.client.workflow_runs(repo, status)
            for run in runs.listed:
                run_id = run.get("id") if isinstance(run, dict) else None
                if not isinstance(run_id, int) or isinstance(run_id, bool):
                    raise SourceError(f"github: GET {self.api}/repos/{repo}/actions/runs"
                                      f"?status={status}: a workflow run without a "
                                      "numeric id")
                found.append((repo, run_id, status))
            if runs.unlisted:
                missed.append(Unlisted(repo, status, len(runs.listed) + runs.unlisted,
                                       len(runs.listed)))
        return found, missed

    def _run_jobs(self, run: tuple[str, int]) -> list[Job]:
        repo, run_id = run
        url = f"{self.api}/repos/{repo}/actions/runs/{run_id}/jobs"
        return [_job(raw, url) for raw in self.client.run_jobs(repo, run_id)]


def _job(raw: Any, url: str) -> Job:
    """A job of GitHub's answer, checked: a numeric ``id``, ``labels`` a list of strings and
    ``status`` one GitHub documents (other fields are not read). A job of another shape makes
    the whole answer unusable — counted wrong, it would scale a set down."""
    where = f"github: GET {url}"
    job_id = raw.get("id") if isinstance(raw, dict) else None
    if not isinstance(job_id, int) or isinstance(job_id, bool):
        raise SourceError(f"{where}: a job without a numeric id")
    if not is_job_id(job_id):  # 0, -1, 10**400: not GitHub's (the webhooks refuse them too)
        raise SourceError(f"{where}: a job whose id is not between 1 and {MAX_JOB_ID}")
    labels = raw.get("labels")
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        said = "no labels" if labels is None else "labels that are not a list of strings"
        raise SourceError(f"{where}: job {job_id} has {said}")
    status = raw.get("status")
    if status not in JOB_STATUSES:  # its value is not shown: a server may write anything there
        said = "no status" if status is None else "a status GitHub does not document"
        raise SourceError(f"{where}: job {job_id} has {said} (GitHub's: "
                          f"{', '.join(JOB_STATUSES)})")
    return Job(job_id, status, tuple(labels))
