"""GitHub's side of `gitscale serve`: signature checks, delivery de-duplication, and turning a
``workflow_job`` payload into an event for the set whose runners can take the job."""
from __future__ import annotations

import hashlib
import hmac
import json
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Sequence

from gitscale.config.load import RunnerSetConfig
from gitscale.core.reservations import Action, Event
from gitscale.demand.github import matches
from gitscale.config.sources import GitHubSettings
from gitscale.config.sources import SOURCES

MAX_BODY = 25 * 1024 * 1024  # GitHub caps payloads at 25 MB


class Rejected(Exception):
    """A delivery refused with an HTTP status; the message is safe to send back."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def verify(secret: bytes, body: bytes, header: str | None) -> None:
    """``X-Hub-Signature-256: sha256=<hex>`` over the raw body, compared in constant time."""
    if not header:
        raise Rejected(401, "missing X-Hub-Signature-256")
    scheme, _, given = header.partition("=")
    expected = hmac.new(secret, body, hashlib.sha256).hexdigest()
    if scheme != "sha256" or not hmac.compare_digest(expected, given.strip()):
        raise Rejected(401, "bad signature")


class Deliveries:
    """The most recent delivery ids, to drop GitHub's redeliveries and replays."""

    def __init__(self, limit: int = 10_000) -> None:
        self.seen: OrderedDict[str, None] = OrderedDict()
        self.limit = limit

    def first_time(self, delivery: str) -> bool:
        if delivery in self.seen:
            return False
        self.seen[delivery] = None
        if len(self.seen) > self.limit:
            self.seen.popitem(last=False)
        return True


@dataclass(frozen=True)
class JobEvent:
    """What we keep of one workflow_job delivery until the batch is written."""

    job: int
    action: Action
    labels: tuple[str, ...]
    repo: str  # owner/name
    owner: str
    at: datetime


def parse(body: bytes, at: datetime) -> JobEvent | None:
    """A workflow_job payload → JobEvent; None for actions that need no runner bookkeeping."""
    try:
        payload = json.loads(body)
        action = payload["action"]
        job = payload["workflow_job"]
        job_id = job["id"]
        labels = job.get("labels") or []
        repo = payload["repository"]["full_name"]
    except (ValueError, KeyError, TypeError) as exc:
        raise Rejected(400, f"not a workflow_job payload ({type(exc).__name__}: {exc})") from None
    if not isinstance(job_id, int) or not isinstance(labels, list) or not isinstance(repo, str):
        raise Rejected(400, "not a workflow_job payload (id, labels or repository malformed)")
    try:
        kind = Action(action)
    except ValueError:
        return None  # e.g. "requested": nothing to count yet
    if kind == Action.QUEUED and job.get("status") == "waiting":
        # A job of a protected environment is delivered as `queued` while it waits for its
        # approval, then as `queued` again once approved: only the second needs a runner.
        kind = Action.WAITING
    org = payload.get("organization")
    owner = (org.get("login") if isinstance(org, dict) else None) or repo.split("/")[0]
    return JobEvent(job_id, kind, tuple(str(label) for label in labels), repo, str(owner), at)


def route(event: JobEvent, sets: Sequence[RunnerSetConfig]) -> str | None:
    """The first set (in gitscale.yaml order) whose scope holds the repo and whose labels can
    take the job. One set per job: a reservation is one runner, not one per matching set."""
    for runner_set in sets:
        if not SOURCES[runner_set.source.kind].webhooks:
            continue
        settings: GitHubSettings = runner_set.source.settings
        if settings.org is not None and settings.org.lower() != event.owner.lower():
            continue
        if settings.repos and event.repo.lower() not in {r.lower() for r in settings.repos}:
            continue
        if matches(event.labels, settings.labels):
            return runner_set.name
    return None


def to_event(event: JobEvent, set_name: str) -> Event:
    return Event(set_name, event.job, event.action, event.at)
