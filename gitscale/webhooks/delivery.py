"""GitHub's side of `gitscale serve`: signature checks, delivery de-duplication, and turning a
``workflow_job`` payload into an event for the set whose runners can take the job."""
from __future__ import annotations

import hashlib
import hmac
import json
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Sequence
from urllib.parse import parse_qs

from gitscale.config.load import RunnerSetConfig
from gitscale.core.reservations import MAX_JOB_ID, Action, Event, is_job_id
from gitscale.demand.github import matches
from gitscale.config.sources import GitHubSettings
from gitscale.config.sources import SOURCES

MAX_BODY = 25 * 1024 * 1024  # GitHub caps payloads at 25 MB
NOT_A_JOB = "not a workflow_job payload"


class Rejected(Exception):
    """A delivery refused with an HTTP status; the message is safe to send back and to log
    (it never holds the body or the secret). ``reason`` is its kind, one of a few fixed texts:
    the log's rate limit counts by it."""

    def __init__(self, status: int, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason or message


def verify(secret: bytes, body: bytes, header: str | None) -> None:
    """``X-Hub-Signature-256: sha256=<hex>`` over the raw body, compared in constant time."""
    if not header:
        raise Rejected(401, "missing X-Hub-Signature-256")
    scheme, _, given = header.partition("=")
    expected = hmac.new(secret, body, hashlib.sha256).hexdigest()
    if scheme != "sha256" or not hmac.compare_digest(expected, given.strip()):
        raise Rejected(401, "bad signature")


REJECTION_LOG_EVERY = 60.0  # seconds: at most one log line per kind of rejection this often
_DELIVERY_ID = re.compile(r"[^A-Za-z0-9._-]")


class RejectionLog:
    """The log lines of rejected deliveries: the first of each kind (status and reason) at
    once, then at most one per ``every`` seconds, saying how many it stands for — so a secret
    mismatch shows in the log, and a flood of bad requests cannot fill it. ``flush`` says the
    rejections counted since a kind's last line, once ``every`` has passed (a flood that
    stopped is still told). Lines name the delivery id (as sent, cut and cleaned: a client
    writes it) and the reason; never the body, a header's value or the secret."""

    def __init__(self, every: float = REJECTION_LOG_EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self.clock = clock
        self._lock = threading.Lock()
        self._kinds: dict[tuple[int, str], _Kind] = {}  # a few fixed kinds: bounded

    def note(self, rejected: Rejected, delivery: str | None) -> str | None:
        """The line to log for this rejection, or None when its kind was logged too recently
        (it is counted, and told by a later line)."""
        now, key = self.clock(), (rejected.status, rejected.reason)
        with self._lock:
            kind = self._kinds.setdefault(key, _Kind())
            if kind.logged is not None and now - kind.logged < self.every:
                kind.unsaid += 1
                return None
            unsaid, kind.unsaid, kind.logged = kind.unsaid, 0, now
        line = (f"rejected webhook delivery {_delivery_id(delivery)}: {rejected.status} "
                f"{rejected}")
        return line + (f" (and {unsaid} more like it in the last {_seconds(self.every)}, "
                       "not logged one by one)" if unsaid else "")

    def flush(self, *, everything: bool = False) -> list[str]:
        """A line per kind with rejections not told yet, once ``every`` has passed since its
        last line (``everything``: at once, e.g. when the server stops)."""
        now, lines = self.clock(), []
        with self._lock:
            for (status, reason), kind in self._kinds.items():
                if kind.unsaid and kind.logged is not None and (
                        everything or now - kind.logged >= self.every):
                    lines.append(f"rejected {kind.unsaid} more webhook deliveries: {status} "
                                 f"{reason} (since {_seconds(now - kind.logged)} ago)")
                    kind.unsaid, kind.logged = 0, now
        return lines


@dataclass
class _Kind:
    logged: float | None = None  # clock() of its last line
    unsaid: int = 0  # rejections since, not logged one by one


def _delivery_id(delivery: str | None) -> str:
    """GitHub's ids are GUIDs; anything else a client sends is cut and cleaned for the log."""
    if not delivery:
        return "(no X-GitHub-Delivery)"
    return _DELIVERY_ID.sub("?", delivery[:64]) + ("…" if len(delivery) > 64 else "")


def _seconds(value: float) -> str:
    return f"{value:.0f} s"


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


FORM = "application/x-www-form-urlencoded"


def payload_of(body: bytes, content_type: str | None) -> bytes:
    """The JSON payload of a delivery whose signature was checked over ``body``: the body
    itself, or, for a webhook of GitHub's ``form`` content type (the default of one made in
    GitHub's settings or by its API), its ``payload`` field, as actions-runner-controller's
    server (go-github's ``ValidatePayload``) reads it. Any other content type is read as JSON,
    as before."""
    if (content_type or "").split(";")[0].strip().lower() != FORM:
        return body
    try:
        fields = parse_qs(body, keep_blank_values=True, strict_parsing=True, max_num_fields=16)
    except ValueError:  # its text would quote the body
        raise _malformed(f"a {FORM} body that is not a form") from None
    found = fields.get(b"payload")
    if not found:
        raise _malformed(f"a {FORM} body without a `payload` field (GitHub's form "
                         "deliveries hold the JSON payload there)")
    return found[0]


def parse(body: bytes, at: datetime) -> JobEvent | None:
    """A workflow_job payload → JobEvent; None for actions that need no runner bookkeeping.
    A body of another shape is a 400 naming what is wrong in the payload's terms
    (``workflow_job.labels is not a list of strings``), never a value of it: a client wrote it.
    A job whose labels are missing or not a list of strings is refused, as the polling source
    refuses it: taken as no labels, every set would match it and reserve a runner."""
    payload = _json(body)
    if not isinstance(payload, dict):
        raise _malformed("the body is not a JSON object")
    action = _member(payload, "action", "action")
    job = _member(payload, "workflow_job", "workflow_job")
    if not isinstance(job, dict):
        raise _malformed("workflow_job is not an object")
    job_id = _member(job, "id", "workflow_job.id")
    if not is_job_id(job_id):  # a bool, a string, 0, -1, 10**400: never written to the repo
        raise _malformed(f"workflow_job.id is not a job id: an integer from 1 to {MAX_JOB_ID}")
    labels = _member(job, "labels", "workflow_job.labels")
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise _malformed("workflow_job.labels is not a list of strings")
    repository = _member(payload, "repository", "repository")
    if not isinstance(repository, dict):
        raise _malformed("repository is not an object")
    repo = _member(repository, "full_name", "repository.full_name")
    if not isinstance(repo, str):
        raise _malformed("repository.full_name is not a string")
    if not isinstance(action, str):
        raise _malformed("action is not a string")
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
    return JobEvent(job_id, kind, tuple(labels), repo, str(owner), at)


class _TooLong:
    """A JSON integer of more digits than any job id has: parsed as this, not converted (an
    int of thousands of digits is slow to convert, and Python refuses past 4,300)."""


def _integer(text: str) -> int | _TooLong:
    return int(text) if len(text) <= 20 else _TooLong()


def _json(body: bytes) -> object:
    """The body's JSON value; a 400 saying why when it is not JSON. The JSON parser's message
    is cut at its colon: past it, it quotes the body (``Invalid \\escape: 'x'``)."""
    try:
        return json.loads(body, parse_int=_integer)
    except RecursionError:  # "[[[[…": nested deeper than the parser goes, not a payload
        raise _malformed("JSON nested too deep") from None
    except json.JSONDecodeError as exc:
        raise _malformed(f"the body is not JSON: {exc.msg.split(':')[0]} at line "
                         f"{exc.lineno} column {exc.colno}") from None
    except UnicodeDecodeError:  # its text would quote a byte of the body
        raise _malformed("the body is not JSON: not UTF-8 text") from None


def _member(container: dict[str, object], key: str, name: str) -> object:
    if key not in container:
        raise _malformed(f"{name} is missing")
    return container[key]


def _malformed(detail: str) -> Rejected:
    return Rejected(400, f"{NOT_A_JOB} ({detail})", NOT_A_JOB)


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
