"""Jobs that still wait with runners counted for them: when a RunnerSet is re-affirmed for
them (README, "Scaling semantics", "Jobs that still wait"). Pure: no I/O, the clock passed in.

The controller holds the slot of a runner that finished after a write's ``effectiveTime``. A
write that counted a job as gone whose runner's pod exited seconds later (or on a cluster clock
ahead of the scaler's) leaves a queued job waiting with its slot held, in a quiet set for ever:
``still_waiting`` re-affirms for it. A job a re-affirm cannot start (pods that cannot start, a
job GitHub never routes to these runners) would cost a commit every 10 minutes for as long as
it waits; so each still-waiting re-affirm in a row for the same jobs doubles the wait before
the next, up to ``STILL_WAITING_MAX``. The count lives in the manifest
(``gitscale.dev/still-waiting``, ``Current.reaffirms``) beside the write's time
(``spec.effectiveTime``) and jobs (``gitscale.dev/jobs``): a CI job's fresh clone reads it, and
any other write removes it.
"""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from gitscale.core.model import Current, Demand

# Jobs that still wait this long after a RunnerSet's last write, its count covering them, are
# re-affirmed for (``still_waiting``): more than a pass, a 3-minute GitOps poll, a new node and
# a pod start of a large runner image together
STILL_WAITING = timedelta(minutes=10)
# ... and again while the same jobs wait, each time twice as long after the last re-affirm, up
# to this (``reaffirm_interval``): jobs a re-affirm cannot start (pods that cannot start, jobs
# GitHub routes elsewhere) cost 12 commits a day once at it, not 144
STILL_WAITING_MAX = timedelta(hours=2)
# The most still-waiting re-affirms in a row counted: the largest count the annotation is read
# as (18 digits, ``manifest.target.is_digits``; reached only by a hand edit), so that the count
# written is always one the next pass reads
REAFFIRMS_MAX = 10**18 - 1

def still_waiting(current: Current, demand: Demand, have: int, now: datetime) -> bool:
    """Do jobs still wait long after the last write of a RunnerSet, its count covering them
    (queued + running ≤ replicas: not a saturation, which the backlog serves)?

    The controller holds the slot of a runner that finished after the write's
    ``effectiveTime`` (the write counted its job as running). A runner whose job GitHub marked
    completed before the pass read the demand but whose pod exited a few seconds later (the
    runner deregisters and stops), or one on a cluster whose clock runs ahead of the scaler's,
    looks finished after it: the write counted its job as gone and a queued one in its place,
    and that one waits with the slot held — until another job starts or ends; in a quiet set,
    for ever (``simulate --scaler-clock-offset``, README "Outcomes"). A re-affirm with a new
    time frees such slots.

    Long: ``reaffirm_interval`` after the last write (``reaffirm_due``), at first
    ``STILL_WAITING``, more than a pass, a GitOps poll, a new node and a pod start together,
    so that no job on its way is re-affirmed for."""
    due = reaffirm_due(replace(current, replicas=have), demand)
    return due is not None and now >= due


def reaffirm_due(current: Current, demand: Demand) -> datetime | None:
    """When ``still_waiting`` re-affirms for ``demand`` if it does not change: the last write
    plus ``reaffirm_interval`` of the re-affirms in a row before it for these jobs
    (``reaffirms_before``). None when it does not at any time: nothing is queued, the jobs are
    more than the count (a saturation), or the set is not a RunnerSet written by gitscale."""
    if current.backlog is None or current.written_at is None or current.replicas is None \
            or demand.queued == 0 or demand.assigned > current.replicas:
        return None
    return current.written_at + reaffirm_interval(reaffirms_before(current, demand))


def reaffirms_before(current: Current, demand: Demand) -> int:
    """The still-waiting re-affirms in a row that the last write ends, for the jobs of
    ``demand``: those of the manifest (``gitscale.dev/still-waiting``) when its jobs are these
    (``gitscale.dev/jobs``), else none. A change of the jobs begins a new wait: a job that
    completed, its pod exiting after the next write, would hold a slot again, and that write
    must be followed 10 minutes later, not 2 hours."""
    return current.reaffirms if current.fingerprint == demand.fingerprint else 0


def reaffirms_after(current: Current, demand: Demand) -> int:
    """What a still-waiting re-affirm for ``demand`` writes in ``gitscale.dev/still-waiting``:
    one more than before when its jobs are those of the last write; 0 (no annotation) when
    they changed, so the next comes ``STILL_WAITING`` after it, as after any other write."""
    if current.fingerprint != demand.fingerprint:
        return 0
    return min(current.reaffirms + 1, REAFFIRMS_MAX)


def reaffirm_interval(reaffirms: int) -> timedelta:
    """How long after a write of a RunnerSet jobs must still wait, its count covering them, to
    be re-affirmed for: ``STILL_WAITING`` after a write that was not a still-waiting re-affirm,
    twice as long after each still-waiting re-affirm in a row for the same jobs (10, 20, 40,
    80 minutes...), at most ``STILL_WAITING_MAX``. A re-affirm that did not start the jobs
    will likely not start them the next time either (pods that cannot start, a job GitHub
    never routes to these runners): 12 commits a day then, not 144; each says when the next
    comes, and ``validate`` and the controller's conditions say why the jobs wait."""
    if reaffirms >= 16:  # (2¹⁶ × 10 minutes is past any maximum)
        return STILL_WAITING_MAX
    return min(STILL_WAITING * (1 << reaffirms), STILL_WAITING_MAX)


def span(length: timedelta) -> str:
    """``10m``, ``1h20m``, ``2h``: a length in whole minutes, as a commit's reason says it."""
    hours, minutes = divmod(int(length.total_seconds() // 60), 60)
    return (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes or not hours else "")
