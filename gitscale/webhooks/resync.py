"""What GitHub lists for the webhook-fed sets, for `gitscale serve --resync`.

Webhooks get lost (a delivery GitHub gave up on, a server that was down): a lost `completed`
holds a runner, a lost `queued` never gets one. Every ``--resync`` the server reads the sets'
jobs through the polling source (``gitscale/demand/github.py``, with the same clients and ETag
cache as `plan` and `reconcile`), and the batch corrects the reservations from it
(``gitscale.core.reservations.resync``).

Each job goes to the first set, in ``gitscale.yaml`` order, whose scope lists it and whose
labels can take it, as webhook routing does: a job is one runner, not one per matching set.
When GitHub did not list every run of a scope (past its 1,000 a status), a job it does not list
may be of a run it left out: the sets of that scope get what it lists, and lose nothing
(``partial``).
"""
from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Sequence

from gitscale.config.load import Config, RunnerSetConfig
from gitscale.config.secrets import SecretError
from gitscale.demand.resolve import Sources, secret_error
from gitscale.errors import GitscaleError
from gitscale.config.sources import SOURCES


@dataclass(frozen=True)
class Listing:
    """Jobs GitHub lists per set (job id → running), and when the poll started."""

    started: datetime
    jobs: dict[str, dict[int, bool]] = field(default_factory=dict)
    error: str | None = None  # set when any scope could not be read: then nothing is corrected
    # set → why its listing is incomplete (runs GitHub counts but did not list): then none of
    # its reservations is removed
    partial: dict[str, str] = field(default_factory=dict)


def list_jobs(sets: Sequence[RunnerSetConfig], sources: Sources, started: datetime,
              config: Config | None = None) -> Listing:
    """One poll per scope and credential. All or nothing: a job of a scope that could not be
    read might belong to an earlier set, so a partial list could move it to the wrong one. A
    credential that could not be read or was refused is said at the line of ``config`` (the
    sets') that declares it, as a pass says it."""
    from gitscale.demand.github import QUEUED, RUNNING, Poll, matches, poller

    github = [s for s in sets if SOURCES[s.source.kind].webhooks]
    polled: dict[Hashable, Poll] = {}
    try:
        for runner_set in github:
            settings = runner_set.source.settings
            key = settings.group()
            if key in polled:
                continue
            try:
                polled[key] = poller(sources, settings).poll()
            except SecretError as exc:
                said = str(exc) if config is None else secret_error(config, runner_set, exc)
                return Listing(started, error=f"{runner_set.name}: {said}")
            except GitscaleError as exc:
                return Listing(started, error=f"{runner_set.name}: {exc}")
    finally:
        sources.save()
    claimed: set[int] = set()
    jobs: dict[str, dict[int, bool]] = {}
    partial: dict[str, str] = {}
    for runner_set in github:
        labels = runner_set.source.settings.labels
        mine: dict[int, bool] = {}
        poll = polled[runner_set.source.settings.group()]
        if poll.unlisted:
            partial[runner_set.name] = "GitHub did not list every run (" + ", ".join(
                f"{runs.repo}: {runs.listed:,} of {runs.total:,} {runs.status}"
                for runs in poll.unlisted) + "): reservations of jobs it does not list are kept"
        for job in poll.jobs:
            if job.id in claimed or not matches(job.labels, labels):
                continue
            # A job held by its concurrency group (`pending`) is listed as queued, unlike the
            # count of a pass: whether GitHub delivers its `queued` while it is held is not
            # documented, and a reservation a resync removes is tombstoned — it would not
            # come back when the job is released.
            if job.status in QUEUED or job.status in RUNNING or job.status == "pending":
                mine[job.id] = job.status in RUNNING
                claimed.add(job.id)
        jobs[runner_set.name] = mine
    return Listing(started, jobs, partial=partial)
