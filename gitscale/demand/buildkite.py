"""Buildkite demand from the agent metrics API: scheduled + running jobs per queue.

``GET {apiUrl}/metrics/queue?name=QUEUE`` with ``Authorization: Token <agent token>``. Missing
keys count as 0 (the API omits them for idle queues). ``waiting`` jobs (blocked behind others)
count only when the source opts in with ``countWaiting: true``. The response's
``Buildkite-Agent-Metrics-Poll-Duration`` header is the fastest the loop may poll.
"""
from __future__ import annotations

from typing import Any, Sequence

from gitscale.config import RunnerSetConfig
from gitscale.core.model import Demand
from gitscale.demand import DemandReading
from gitscale.demand.http import JsonClient, RateLimited, SourceError
from gitscale.demand.secrets import SecretError
from gitscale.timeutil import parse_duration

DEFAULT_API = "https://agent.buildkite.com/v3"
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


def read_buildkite(sets: Sequence[RunnerSetConfig], client_for: Any) -> DemandReading:
    reading = DemandReading()
    for runner_set in sets:
        settings = runner_set.source.settings
        api = str(settings.get("apiUrl", DEFAULT_API)).rstrip("/")
        try:
            client: JsonClient = client_for(settings)
            body, headers = client.get(f"{api}/metrics/queue", {"name": settings["queue"]})
            reading.demands[runner_set.name] = queue_demand(
                body, bool(settings.get("countWaiting", False)), f"queue {settings['queue']}")
            interval = poll_interval(headers.get(POLL_HEADER))
            if interval:
                reading.merge(DemandReading(min_interval=interval))
        except RateLimited as exc:
            reading.merge(DemandReading(retry_at=exc.until))
            reading.errors[runner_set.name] = str(exc)
        except (SourceError, SecretError) as exc:
            reading.errors[runner_set.name] = str(exc)
    return reading
