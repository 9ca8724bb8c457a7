"""`serve`'s batch loop: each window's batch landed — the queued events applied, a resync's
listing, the expiry of reservations (``batch.batch_plan``), then one commit and push — a failed
one kept for the next try with backoff and said once per streak, the events no served set takes
counted and said. The last batch at a stop is ``webhooks.last_batch``'s.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gitscale import crash
from gitscale.core.reservations import Correction
from gitscale.errors import GitscaleError, GitStopped, PushRejected
from gitscale.logline import log
from gitscale.metrics import LoopMetrics
from gitscale.notify.failures import NotifyStreaks
from gitscale.plan.cache import StateCache
from gitscale.plan.forecasts import read_forecasts
from gitscale.plan.landing import Landed, describe_landing, land
from gitscale.redact import redact
from gitscale.repo.git_output import refused_push_remedy
from gitscale.repo.workspace import Workspace
from gitscale.timeutil import backoff, format_time, utcnow
from gitscale.webhooks.batch import batch_plan
from gitscale.webhooks.batcher import Batcher
from gitscale.webhooks.delivery import JobEvent
from gitscale.webhooks.hold import Hold
from gitscale.webhooks.resync import Listing
from gitscale.webhooks.served import Serving
from gitscale.streak import Dropped, Streak, duration, told, without_counts

# A failed batch is retried at least this often: its events are jobs waiting for runners, and
# a retry is a fetch (and a push) — cheap for the remote, and the events land within a minute
# of the remote coming back (at 5 minutes, a 10-minute outage cost every job 4 more minutes).
MAX_BACKOFF = 60.0
RETRY_FLOOR = 1.0  # seconds: a failed batch is retried after at least twice this, any window


def batch_delay(window_s: float, failures: int) -> float:
    """Seconds until the next batch: the window; after failed batches a backoff that doubles
    from at least ``2 * RETRY_FLOOR`` whatever the window, up to ``MAX_BACKOFF``."""
    if not failures:
        return window_s
    return backoff(max(window_s, RETRY_FLOOR), failures, MAX_BACKOFF)


@dataclass
class Batch:
    """Lands one batch: the events, a resync's listing, the expiry of reservations."""

    ws: Workspace
    config_path: str
    batcher: Batcher
    duration: timedelta
    state_file: str
    cache: StateCache
    metrics: LoopMetrics
    serving: Serving
    resync_on: bool = True
    hold: Hold = field(default_factory=Hold)  # the reservations held between commits
    told: dict[str, str] = field(default_factory=dict)  # --set names not served, said once
    streak: Streak = field(default_factory=Streak)  # failed batches in a row
    dropped: Dropped = field(default_factory=Dropped)  # events no served set takes
    notify: NotifyStreaks = field(default_factory=NotifyStreaks)  # failing notify targets
    started: datetime = field(default_factory=utcnow)
    resynced: bool = False  # a batch applied a resync's listing since the start
    # sets GitHub did not list every run for: said at the first listing, then every 30 minutes
    # while it lasts (by the words without their counts), not at every resync
    partial: dict[str, Streak] = field(default_factory=dict)
    failure: Exception | None = None  # why the last batch failed (None: it landed)

    def expire(self, now: datetime) -> bool:
        """Whether queued reservations expire in a batch without a listing: not at a start
        with a resync on until the first listing renewed those GitHub still lists (the file
        holds no renewal a resync alone made, ``gitscale.webhooks.hold``), nor for more than
        one ``--reservation`` after the start (a resync failing since the start)."""
        return not self.resync_on or self.resynced or now >= self.started + self.duration

    def run(self, events: list[JobEvent], listing: Listing | None, final: bool = False) -> bool:
        """True when it landed; a failed batch keeps its events for the next one. ``final``:
        the last batch at a stop, which holds nothing back."""
        self.batcher.watch.begin()
        self.hold.final = final
        try:
            return self._run(events, listing)
        finally:
            self.batcher.watch.end()

    def _run(self, events: list[JobEvent], listing: Listing | None) -> bool:
        now, started = utcnow(), time.monotonic()
        corrected: dict[str, Correction] = {}
        unrouted: list[JobEvent] = []
        ws = self.ws
        try:
            if ws.mode == "clone":
                ws.sync()
            landed = land(ws, lambda: batch_plan(
                ws.root, ws.base(), self.config_path, events, now, self.duration,
                self.state_file, self.cache, listing, corrected,
                lambda config: read_forecasts(ws, config, self.cache, now), self.serving,
                unrouted, self.hold, self.expire(now)), cache=self.cache, say=log,
                told=self.notify)
        except Exception as exc:  # noqa: BLE001 - a server must outlive one bad batch
            # Keep the events whatever went wrong (a full disk is not a GitscaleError) and
            # retry with backoff; an unexpected error is a bug and says so.
            self.metrics.failed(exc, time.monotonic() - started)
            self.batcher.give_back(events)
            bug = not isinstance(exc, GitscaleError)
            what = crash.summary(exc) if bug else redact(
                exc.retried() if isinstance(exc, PushRejected)  # (serve tries again: in
                else str(exc))                                  # /healthz as in the log)
            self.failure = exc
            with self.batcher.lock:
                self.batcher.failures += 1
                self.batcher.last_error = what
                waiting = len(self.batcher.pending)
            if isinstance(exc, GitStopped):  # stopping: the stop's last line says what is left
                return False
            if self.streak.failed(what):  # the same error again: said once per streak
                log(self._failure(what, waiting, exc) + (f"\n{crash.report()}" if bug else ""),
                    level="error")
            return False
        self.failure = None
        self.resynced = self.resynced or listing is not None
        hold = self.hold
        if hold.dropped is not None and hold.dropped.since is not None:  # (renewals: unsaid)
            log(f"the reservations held since {format_time(hold.dropped.since)} are dropped: "
                f"{self.state_file} changed in the repo meanwhile (serve went on from it)")
        carried = hold.carried() if landed.commit else None  # what this commit landed too
        carried_since = carried.since if carried is not None else None  # (renewals: unsaid)
        hold.landed()
        held_since = hold.waiting()
        ended = self.streak.ended()
        if ended is not None:
            log(f"batches land again, after {told(ended, 'try', 'tries')}")
        self.metrics.landed(landed, time.monotonic() - started)
        self._tell_dropped(unrouted)
        self._tell_served()
        with self.batcher.lock:
            self.batcher.writing = 0
            self.batcher.failures = 0
            self.batcher.last_error = None
            self.batcher.last_batch = format_time(now)
            self.batcher.commits += 1 if landed.commit else 0
            self.batcher.held_since = format_time(held_since) if held_since else None
        for name, correction in corrected.items():
            log(f"resync {name}: {correction.describe()}", runner_set=name)
        if listing is not None:
            self._tell_partial(listing)
        if listing is not None and not corrected:
            sets = f"{len(listing.jobs)} set{'' if len(listing.jobs) == 1 else 's'}"
            if listing.partial:  # (GitHub left runs out: a match of what it listed, no more)
                log(f"resync: reservations match what GitHub listed ({sets}; "
                    f"{len(listing.partial)} listed in part, their unlisted jobs' "
                    "reservations kept)")
            else:
                log(f"resync: reservations match GitHub ({sets})")
        # a commit (of events, of what was held, of expiry), events, or a resync's correction
        # (held or committed: said either way)
        if events or landed.commit or corrected:
            said = describe_landing(landed, ws)
            if landed.commit is None and held_since is not None:
                # the limit is checked when a batch runs (at least every minute): "by T" was
                # up to a minute early
                said = (f"reservations held (committed with the next scaling change, or in the "
                        f"first batch from {format_time(held_since + hold.limit)})")
            elif carried_since is not None and not events:  # (at the limit, the stop's batch)
                log(f"reservations held since {format_time(carried_since)}: {said}")
                return True
            elif carried_since is not None:
                said += f" (with the reservations held since {format_time(carried_since)})"
            log(f"{f'batch of {_events(len(events))}' if events else _why(landed, corrected)}"
                f": {said}")
        return True

    def _failure(self, what: str, waiting: int, exc: Exception) -> str:
        """The line of a failed batch: the first of a streak says how serve goes on, a
        remote's refusal what a person can do, a reminder how long it has lasted."""
        streak = self.streak
        if isinstance(exc, PushRejected):
            what += (f"\nserve keeps the events and tries again every {MAX_BACKOFF:g} s; to "
                     "land them, " + refused_push_remedy(
                         "serve", self.ws.remote_branch or self.ws.branch))
        if streak.count == 1:
            return (f"batch failed, {_events(waiting)} kept for the next try (retried with "
                    f"backoff up to {MAX_BACKOFF:g} s; /healthz says degraded; this error is "
                    f"logged again when it changes, and every {duration(streak.remind)} while "
                    f"it lasts): {what}")
        return (f"batch still failing, {streak.count} tries in a row for {streak.lasted()}, "
                f"{_events(waiting)} kept: {what}")

    def _tell_partial(self, listing: Listing) -> None:
        """The sets GitHub did not list every run for (past its 1,000 a status): said once
        and then every 30 minutes while it lasts, as the sources' warning is in `run` — GitHub
        can stay past that for hours, and its counts change at every resync."""
        self.partial = {name: streak for name, streak in self.partial.items()
                        if name in listing.partial}  # (a set listed whole again starts anew)
        for name, why in listing.partial.items():
            streak = self.partial.setdefault(name, Streak())
            if streak.failed(without_counts(why)):
                log(f"resync {name}: {why}" + (f" (said again every {duration(streak.remind)} "
                                               "while it lasts)" if streak.count == 1 else ""),
                    level="warning", runner_set=name)

    def _tell_dropped(self, unrouted: list[JobEvent]) -> None:
        """Events for jobs no served set takes: counted in /healthz, said at most every 10
        minutes with an example (the labels to compare with the sets')."""
        if not unrouted:
            return
        with self.batcher.lock:
            self.batcher.dropped += len(unrouted)
        self.metrics.dropped(len(unrouted))
        first = unrouted[0]
        example = f"job {first.job} of {first.repo}, labels [{', '.join(first.labels)}]"
        said = self.dropped.add(len(unrouted), example[:200])
        if said is not None:
            log(f"{_events(said.count)} for jobs no served set takes, not stored (e.g. "
                f"{said.example}): a set takes a job when its source's org/repos hold the "
                "repository and its labels hold every job label but self-hosted; said at most "
                f"every {duration(self.dropped.every)}, counted in /healthz dropped_events and "
                "gitscale_webhook_unrouted_events_total")

    def _tell_served(self) -> None:
        """After a landed batch: what it serves, once per change. A ``--set`` name that a
        reloaded gitscale.yaml lost (or feeds otherwise) is said once; the others are served."""
        serving, picked = self.serving, self.serving.picked
        if picked is None:
            return
        for name, why in picked.unservable.items():
            if self.told.get(name) != why:
                log(f"--set {name}: {why}: not served; serving "
                    f"{', '.join(picked.names) or 'no set'}")
        for name in sorted(self.told.keys() - picked.unservable.keys()):
            log(f"--set {name}: served again")
        self.told = dict(picked.unservable)
        if picked.names != serving.claimed:
            said = [f"served by webhooks: {', '.join(picked.names) or 'none'}"
                    + (f" ({self.config_path} has no set whose source takes webhooks, such as "
                       "github: every delivery is answered 202 and dropped until it has)"
                       if not picked.names and serving.names is None else "")]
            if picked.others:
                said.append(f"left to `gitscale run` and `reconcile`: {', '.join(picked.others)}")
            if picked.polled:  # a Buildkite queue, a demand file: serve never scales them
                said.append(f"polled, not served: {', '.join(picked.polled)} (their sources "
                            "take no webhooks: `gitscale run` or `reconcile` scales them, "
                            "beside serve)")
            # (a set's previousNames are not dropped: its reservations were kept)
            dropped = sorted(set(serving.found) - set(picked.names)
                             - {old for s in picked.sets for old in s.previous_names})
            if dropped:
                said.append(f"no longer served here: {', '.join(dropped)} (reservations dropped; "
                            "a `gitscale serve` that serves them needs its own --state-file)")
            log("; ".join(said))
        serving.claimed = picked.names


def _why(landed: Landed, corrected: dict[str, Correction]) -> str:
    """What a batch without events lands, for its line: the sets' reasons (a scale-down whose
    delay ran out while serve was down, a reservation expired, a quiet-reset), else a resync's
    correction, else the commit's note (the served sets, an expiry)."""
    plan = landed.plan
    if plan.changes:
        return "no event (" + ", ".join(f"{c.name} {c.decision.reason.value}"
                                        for c in plan.changes) + ")"
    if corrected:
        return "no event (the resync's correction)"
    if landed.commit is not None and plan.notes:
        return f"no event ({plan.notes[-1]})"
    return "no event"


def _events(count: int) -> str:
    return f"{count} event{'' if count == 1 else 's'}"
