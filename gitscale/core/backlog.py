"""The backlog: refilling finished slots under saturation without a commit per job. Pure.

When more jobs wait than ``replicas`` can take, a write also says how many of its jobs its
replicas could not cover (``spec.backlog``). The controller then refills, itself and without a
new write, up to that many slots of runners that finished after the write, and counts them
(``status.refilled``); the scaler writes again only when that allowance is about to run out
while new jobs wait, or when it covers more than waits. README, "The controller", says the
rule; these functions are the arithmetic both sides share, so that the decision's estimate of
the controller and the controller itself cannot drift.
"""
from __future__ import annotations

from gitscale.runnerset_api import BACKLOG_MAX


def backlog_of(assigned: int, replicas: int) -> int:
    """Jobs (queued + running) that ``replicas`` runners cannot take at once: what a write of
    ``replicas`` lets the controller refill beyond them, one finished slot per job."""
    return min(max(assigned - replicas, 0), BACKLOG_MAX)


def refills_left(backlog: int, refilled: int) -> int:
    """How many more finished slots a write of ``backlog`` lets the controller refill, after
    ``refilled`` of them (the controller's count; the scaler estimates it by the jobs of the
    write that completed since)."""
    return max(backlog - refilled, 0)


def uncovered(jobs_at_write: int, arrived: int, replicas: int, backlog: int) -> int:
    """Jobs that the last write gives no runner: it covers ``replicas`` runners at once plus
    ``backlog`` refills, one job each, the oldest first; jobs that arrived since come last."""
    return max(jobs_at_write + arrived - replicas - backlog, 0)
