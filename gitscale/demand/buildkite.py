"""Buildkite demand from the agent metrics API: scheduled + running jobs per queue.

``GET {apiUrl}/metrics/queue?name=QUEUE`` with ``Authorization: Token <agent token>`` (the
metrics client of ``gitscale.clients.buildkite``). The answer is an object with a ``jobs``
object; missing counts in it are 0 (the API omits them for idle queues), and an answer of
another shape is an error, never zero demand. ``waiting`` jobs (blocked behind others)
count only when the source opts in with ``countWaiting: true``. The response's
``Buildkite-Agent-Metrics-Poll-Duration`` header is the fastest the loop may poll.

With ``jobIds:`` the sets also get the ids of the queue's jobs from the GraphQL API
(``buildkite_jobs.py``); without it nothing else is sent or read.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence
from urllib.parse import urlencode

from gitscale.clients.buildkite import Metrics, QueueJobs
from gitscale.clients.errors import ApiError
from gitscale.clients.etags import EtagCache, cache_file
from gitscale.config.load import RunnerSetConfig
from gitscale.config.rotating import Rotating
from gitscale.config.secrets import read_token
from gitscale.config.sources import BuildkiteSettings
from gitscale.core.model import Demand
from gitscale.demand import DemandReading, SourceError, warner
from gitscale.demand.buildkite_jobs import JobIdReader
from gitscale.demand.refused import is_refusal, refusal
from gitscale.runnerset_api import JOB_LIMIT
from gitscale.timeutil import parse_duration

if TYPE_CHECKING:
    from gitscale.demand.registry import Where

POLL_HEADER = "Buildkite-Agent-Metrics-Poll-Duration"
# What to check of a refused agent token: a setup has three Buildkite tokens (agent, REST,
# GraphQL), and an API access token given here is the likely mistake.
REFUSED = ("the metrics API takes an agent token of the queue's organization (Agents > Agent "
           "Tokens; for a queue in a cluster, one of that cluster's agent tokens), not an API "
           "access token, and refuses a revoked one")
MAX_POLL_INTERVAL = 3600.0  # seconds


def queue_demand(body: Any, count_waiting: bool, where: str) -> Demand:
    """The queue's demand from its metrics: an object whose ``jobs`` object holds the counts
    (an idle queue's is ``{}``). Anything else (``null``, a list, an object without ``jobs``)
    is not an answer about the queue: an error, never zero demand (that would scale down)."""
    if not isinstance(body, dict):
        raise SourceError(f"buildkite: {where}: the answer is {_kind(body)}, not the "
                          "metrics object")
    if "jobs" not in body:
        raise SourceError(f"buildkite: {where}: the answer has no 'jobs' object")
    jobs = body["jobs"]
    if not isinstance(jobs, dict):
        raise SourceError(f"buildkite: {where}: 'jobs' is not an object")

    def number(key: str) -> int:
        value = jobs.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SourceError(f"buildkite: {where}: jobs.{key} is not a count: {value!r}")
        if value > JOB_LIMIT:  # (its digits are not shown: there may be thousands)
            raise SourceError(past_bound(where, f"jobs.{key}"))
        return int(value)

    queued = number("scheduled") + (number("waiting") if count_waiting else 0)
    if queued > JOB_LIMIT:
        raise SourceError(past_bound(where, "jobs.scheduled + jobs.waiting"))
    return Demand(queued=queued, running=number("running"))


def past_bound(where: str, what: str) -> str:
    return (f"buildkite: {where}: {what} is more than {JOB_LIMIT:,} jobs, gitscale's bound for "
            "a count (a demand file's too): not a count to scale by")


def _kind(value: Any) -> str:
    """What a JSON value is, in words (never the value: it may be anything)."""
    if value is None:
        return "null (or empty)"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list"}.get(type(value), type(value).__name__)


def poll_interval(header: str | None) -> float | None:
    """``10s`` (a Go duration) or a bare number of seconds → seconds."""
    if not header:
        return None
    text = header.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            seconds = parse_duration(text).total_seconds()
        except ValueError:
            return None
    # "inf", "nan" or a day would stop the loop (an infinite wait even crashes it): ignored
    return seconds if 0 < seconds <= MAX_POLL_INTERVAL else None


class QueueSource:
    """One queue's metrics, for the sets that scale on it (each counts waiting jobs or not)."""

    def __init__(self, client: Metrics, settings: BuildkiteSettings,
                 ids: JobIdReader | None = None) -> None:
        self.client = client
        self.settings = settings
        self.ids = ids

    def read(self, sets: Sequence[RunnerSetConfig]) -> DemandReading:
        queue = self.settings.queue
        try:
            answer = self.client.queue(queue)
        except ApiError as exc:
            if not is_refusal(exc):
                raise
            # the credential's line of gitscale.yaml is to blame (``resolve.secret_error``)
            raise refusal("Buildkite", "agent token", self.settings.token, exc,
                          self.client.http.name, REFUSED) from None
        body = answer.body
        url = f"{self.client.api}/metrics/queue?{urlencode({'name': queue})}"
        where = f"queue {queue} (GET {url})"
        reading = DemandReading(min_interval=poll_interval(answer.headers.get(POLL_HEADER)))
        for runner_set in sets:
            reading.demands[runner_set.name] = queue_demand(
                body, runner_set.source.settings.count_waiting, where)
        if self.ids is not None:
            self.ids.add(body, list(sets), reading.demands)
        return reading


def source(where: Where, settings: BuildkiteSettings) -> QueueSource:
    """The registry's client factory: one client per API and agent token, and one per GraphQL
    API and API access token (``jobIds``), kept across passes; a token file is read again when
    it changes or its token is refused (``config/rotating.py``)."""
    sources, api, job_ids = where.sources, settings.api_url, settings.job_ids

    def make() -> Metrics:
        token = Rotating(settings.token, "buildkite agent token", read=read_token,
                         report=sources.report)
        token.get()  # (one that cannot be read is said now, not at the first request)
        cache = EtagCache.load(cache_file(sources.cache_dir, api, settings.credential))
        return Metrics(api, token.get, cache=cache, timeout=sources.timeout,
                       transport=sources.transport, refused=lambda _status: token.refresh())

    ids = None
    if job_ids is not None:
        def make_ids() -> QueueJobs:
            token = Rotating(job_ids.token, "buildkite API access token (jobIds)",
                             read=read_token, report=sources.report)
            token.get()
            return QueueJobs(job_ids.graphql_url, token.get, timeout=sources.timeout,
                             transport=sources.transport,
                             refused=lambda _status: token.refresh())

        client = sources.client(("buildkite-graphql", job_ids.graphql_url, job_ids.credential),
                                make_ids)
        ids = sources.client(("buildkite-job-ids", job_ids.graphql_url, job_ids.credential,
                              str(job_ids.cluster), settings.queue),
                             lambda: JobIdReader(client, job_ids, settings.queue,
                                                 warner(sources.report, sources.warned)))
    return QueueSource(sources.client(("buildkite", api, settings.credential), make), settings,
                       ids)

