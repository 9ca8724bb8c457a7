"""`serve`'s last batch at a stop: the events still queued and the reservations serve holds,
landed within the stop deadline (``--shutdown-timeout``), or named in one line.

On SIGTERM (a rollout) Kubernetes gives the pod its grace period, then kills it. The last batch
was tried 3 times, each try a fetch and a push bounded by the git timeout (120 s): against a
hung git server some 6 minutes, and the kill came mid-push. Now the tries fit in
``--shutdown-timeout`` from the stop (the batch in flight at the stop included: git's remote
commands end at the deadline, ``repo.deadline.StopDeadline``); what has not landed by then is
said in one line — the reservations of which sets, and what recovers them — and serve stops.
Nothing is left half-written: the reservations file is only ever written whole
(``write_atomic``), and a push ended at the deadline takes its commit back
(``plan.landing``), so the next start finds the repo as the last landed batch left it.
"""
from __future__ import annotations

import time
from collections import Counter
from typing import Callable

from gitscale.core.reservations import Book
from gitscale.errors import GitStopped, PushRejected
from gitscale.logline import log
from gitscale.repo.deadline import StopDeadline
from gitscale.timeutil import format_time
from gitscale.webhooks.batch_loop import Batch
from gitscale.webhooks.batcher import Batcher
from gitscale.webhooks.delivery import JobEvent, route
from gitscale.webhooks.hold import Held
from gitscale.webhooks.reservations_file import ReservationsError, parse_state

TRIES = 3
PAUSE = 1.0  # seconds before the second try, doubled before each next one
SHOWN = 20  # jobs named per set in the line


def write_last_batch(batch: Batch, batcher: Batcher, deadline: StopDeadline | None = None, *,
                     tries: int = TRIES, sleep: Callable[[float], None] = time.sleep) -> bool:
    """Land what is left, tried up to ``tries`` times while ``deadline`` allows; True when it
    landed (or nothing was left). Else one line says what was not committed and what
    recovers it, and False."""
    tried, out_of_time = 0, False
    for attempt in range(tries):
        if deadline is not None and deadline.passed():
            out_of_time = True
            break
        events = batcher.take()
        tried += 1
        # (renewals alone are not committed at a stop: ``gitscale.webhooks.hold``)
        if (not events and batch.hold.waiting() is None) or batch.run(events, None, final=True):
            return True
        pause = PAUSE * 2 ** attempt
        left = deadline.left() if deadline is not None else None
        if left is not None and left <= pause:  # (another try would be cut at the deadline)
            out_of_time = True
            break
        if attempt + 1 < tries:
            sleep(pause)
    out_of_time = out_of_time or isinstance(batch.failure, GitStopped)
    log(_not_landed(batch, batcher.take(), deadline if out_of_time else None, tried),
        level="error")
    return False


def _not_landed(batch: Batch, lost: list[JobEvent], deadline: StopDeadline | None,
                tried: int) -> str:
    """The stop's line: why the last batch did not land (``deadline``: it ran out of time),
    what it leaves uncommitted (by set) and what recovers it."""
    failure = batch.failure
    cause = "" if failure is None else _last_line(
        failure.retried() if isinstance(failure, PushRejected) else str(failure)).rstrip(".")
    if deadline is not None:
        why = f" within {deadline.said()}"
        if isinstance(failure, GitStopped):  # "git push was stopped at the deadline"
            why += f" ({cause.split(':', 1)[0]} at the deadline)"
        elif failure is not None:
            why += f" (the last try: {cause})"
    else:
        why = f" after {tried} tr{'y' if tried == 1 else 'ies'} ({cause})" if failure else ""
    said = [_events(batch, lost)] if lost else []
    held = batch.hold.held
    if held is not None and held.since is not None:
        said.append(f"the reservations held since {format_time(held.since)}"
                    + _held_sets(held, batch.state_file))
    recovers = ("the resync at the next start recovers them from GitHub's list of queued and "
                "running jobs" if batch.resync_on else
                "with --resync 0 nothing recovers them: start serve once with a resync (--resync "
                "5m), or they stay as they are until they expire")
    if deadline is not None and isinstance(failure, GitStopped) and failure.may_have_landed():
        # (the push reached the remote, whose answer did not come: it may hold the commit,
        # and the resync at the next start finds the reservations there, none twice)
        return (f"stopping: the last batch may have landed: git push was stopped at the "
                f"deadline ({deadline.said()}) before the remote answered; if it did not "
                f"land, not committed: {' and '.join(said) or 'nothing'}; {recovers}")
    return (f"stopping: the last batch did not land{why}; not committed: "
            f"{' and '.join(said) or 'nothing'}; {recovers}")


def _events(batch: Batch, lost: list[JobEvent]) -> str:
    """``3 accepted events (linux: queued jobs 1, 2; gpu: completed job 3)``: by the set each
    goes to (the sets of the last batch that read gitscale.yaml)."""
    picked = batch.serving.picked
    by_set: dict[str, dict[str, list[int]]] = {}
    for event in lost:
        name = route(event, picked.sets) if picked is not None else "sets unknown"
        by_set.setdefault(name or "no served set", {}).setdefault(
            event.action.value, []).append(event.job)
    parts = []
    for name, actions in sorted(by_set.items()):
        parts.append(f"{name}: " + ", ".join(
            f"{action} job{'s' if len(jobs) > 1 else ''} {_jobs(jobs)}"
            for action, jobs in actions.items()))
    count = len(lost)
    return f"{count} accepted event{'' if count == 1 else 's'} ({'; '.join(parts)})"


def _held_sets(held: Held, path: str) -> str:
    """`` (linux: jobs 4, 5)``: the jobs whose reservation the held text changes, by set."""
    try:
        before, after = parse_state(held.base, path).books, parse_state(held.text, path).books
    except ReservationsError:  # (serve wrote it: not expected)
        return ""
    changed = []
    for name in sorted(set(before) | set(after)):
        was, now = (Counter((r.job, r.running) for r in books.get(name, Book()).reservations)
                    for books in (before, after))
        jobs = sorted({job for job, _ in (was - now) + (now - was)})
        if jobs:
            changed.append(f"{name}: job{'s' if len(jobs) > 1 else ''} {_jobs(jobs)}")
    return f" ({'; '.join(changed)})" if changed else ""


def _jobs(jobs: list[int]) -> str:
    return ", ".join(map(str, jobs[:SHOWN])) + (", …" if len(jobs) > SHOWN else "")


def _last_line(text: str) -> str:
    """A git error's cause (its last line), not the whole command and output."""
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), text)
