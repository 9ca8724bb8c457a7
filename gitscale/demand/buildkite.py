"""Buildkite demand from the agent metrics API: scheduled + running jobs per queue.

``GET {apiUrl}/metrics/queue?name=QUEUE`` with ``Authorization: Token <agent token>`` (the
metrics client of ``gitscale.clients.buildkite``). Missing
keys count as 0 (the API omits them for idle queues). ``waiting`` jobs (blocked behind others)
count only when the source opts in with ``countWaiting: true``. The response's
``Buildkite-Agent-Metrics-Poll-Duration`` header is the fastest the loop may poll.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from gitscale.clients.buildkite import Metrics
from gitscale.clients.etags import EtagCache, cache_file
from gitscale.config.load import RunnerSetConfig
from gitscale.config.secrets import read_secret
from gitscale.config.sources import BuildkiteSettings
from gitscale.core.model import Demand
from gitscale.demand import DemandReading, SourceError
from gitscale.timeutil import parse_duration

if TYPE_CHECKING:
    from gitscale.demand.registry import Where

POLL_HEADER = "Buildkite-Agent-Metrics-Poll-Duration"
MAX_POLL_INTERVAL = 3600.0  # seconds


def queue_demand(body: Any, count_waiting: bool, where: str) -> Demand:
    jobs = body.get("jobs") if isinstance(body, dict) else None
    if jobs is None:
        jobs = {}
    if not isinstance(jobs, dict):
        raise SourceError(f"buildkite: {where}: 'jobs' is not an object")

    def number(key: str) -> int:
        value = jobs.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SourceError(f"buildkite: {where}: jobs.{key} is not a count: {value!r}")
        return int(value)

    queued = number("scheduled") + (number("waiting") if count_waiting else 0)
    return Demand(queued=queued, running=number("running"))


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

    def __init__(self, client: Metrics, settings: BuildkiteSettings) -> None:
        self.client = client
        self.settings = settings

    def read(self, sets: Sequence[RunnerSetConfig]) -> DemandReading:
        queue = self.settings.queue
        answer = self.client.queue(queue)
        body = answer.body
        reading = DemandReading(min_interval=poll_interval(answer.headers.get(POLL_HEADER)))
        for runner_set in sets:
            reading.demands[runner_set.name] = queue_demand(
                body, runner_set.source.settings.count_waiting, f"queue {queue}")
        return reading


def source(where: Where, settings: BuildkiteSettings) -> QueueSource:
    """The registry's client factory: one client per API and agent token, kept across passes."""
    sources, api = where.sources, settings.api_url

    def make() -> Metrics:
        token = read_secret(settings.token, "buildkite agent token")
        cache = EtagCache.load(cache_file(sources.cache_dir, api, settings.credential))
        return Metrics(api, token, cache=cache, timeout=sources.timeout,
                       transport=sources.transport)

    return QueueSource(sources.client(("buildkite", api, settings.credential), make), settings)
