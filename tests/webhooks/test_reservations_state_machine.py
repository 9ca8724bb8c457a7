"""Webhook mode's reservations as a state machine: ``batch_plan`` (the pure core, the
reservations file, the plan of the served sets) over a checkout in a tmp dir — no HTTP, no git —
and between batches what GitHub and the operator do: ``workflow_job`` deliveries in any order
(queued, in_progress, completed; duplicates; a ``completed`` whose ``queued`` was never seen;
jobs of labels no set takes), the clock moving (past expiries, by more than a reservation), a
set's max (and min) changed in gitscale.yaml, a restart (a new process reading the file back),
a resync listing (the jobs GitHub still lists as queued or in progress; or a poll that failed).

Checked after every batch; each line quotes the rule it checks (PRODUCT.md §3 "Webhook mode",
README "Webhook mode: `gitscale serve`"):

- "never below zero": the counts are those of the reservations, none negative, and replicas ≥ 0;
- "matched by job id": a job is counted at most once (one reservation, in one set: the one its
  labels route to) and a job no served set takes is never stored;
- "a queued event adds a capacity reservation ... expires after the reservation duration": a
  queued job not completed holds its reservation until it expires, and not longer; a replayed
  queued (a redelivery, the webhook of a job a resync reserved first) adds nothing, one after
  the expiry reserves again (``gitscale.core.reservations.apply``);
- "Reservations past max are starved: their expiry is extended on each batch so they do not
  expire while waiting": a queued reservation with ``max`` reservations ahead of it (the running
  ones, which hold runners, and the older queued ones) expires no sooner than a duration from
  this batch;
- "a running job holds its runner until its `completed` arrives, however long it runs";
- "each `completed` removes one": a completed job's reservation is gone, and "completed jobs are
  remembered for one --reservation": a late queued or in_progress does not bring it back;
- "The sets' replicas follow their reservations": replicas written = clamp(reservations, min,
  max) (a policy without a scale-down delay);
- "Events are batched per window and land as one commit": the batch's counts
  (``Gitscale-Events``) are those of the routed events;
- "the reservations file ... so they survive restarts": a restart changes nothing (the file
  read back is what was written, and the next batch is the same with or without a restart);
- resync: "a job GitHub lists but serve never heard of gets one (running or queued), a queued
  reservation of a running job is marked running, and a reservation of a job GitHub no longer
  lists is removed ... unless it is less than a minute older than the poll. A seen `completed`
  always wins over a lagging API": so a resync never removes a reservation of a job GitHub
  still lists, and "a poll that fails for any set corrects nothing".

With ``serve --hold`` (``HeldReservationsMachine``), a batch that changes only the file is held
in memory and the next one starts from it: the model's reservations are serve's (the held text
when something is held), and further: "a batch whose only change is the reservations file ... is
not committed" (nothing written, no RunnerSet changed, held less than the limit since its first
held batch), what is held "lands with the next commit", its events counted there, and "at a stop"
(the restart runs serve's last batch first).

``GITSCALE_STATEFUL_EXAMPLES`` (and ``GITSCALE_STATEFUL_STEPS``) run it longer, randomized:
``GITSCALE_STATEFUL_EXAMPLES=2000 pytest tests/webhooks/test_reservations_state_machine.py``.
"""
from __future__ import annotations

import difflib
import os
import shutil
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Mapping

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from gitscale.core.reservations import Action, Book, Correction, Reservation
from gitscale.plan.cache import StateCache
from gitscale.plan.engine import Plan
from gitscale.webhooks.batch import GRACE, batch_plan
from gitscale.webhooks.delivery import JobEvent
from gitscale.webhooks.hold import Hold
from gitscale.webhooks.reservations_file import parse_state, read_state, render
from gitscale.webhooks.resync import Listing
from gitscale.webhooks.served import Serving
from tests.helpers import RUNNERSET

HUNTING = "GITSCALE_STATEFUL_EXAMPLES" in os.environ  # (random; else derandomized)
EXAMPLES = int(os.environ.get("GITSCALE_STATEFUL_EXAMPLES", "120"))
HELD_EXAMPLES = int(os.environ.get("GITSCALE_STATEFUL_EXAMPLES", "80"))  # (the held variant's)
STEPS = int(os.environ.get("GITSCALE_STATEFUL_STEPS", "40"))

T0 = datetime(2026, 11, 21, 9, 0, tzinfo=timezone.utc)
DURATION = timedelta(minutes=10)
STATE = ".gitscale/reservations.yaml"
SETS = ("linux", "gpu")
LABELS = {"linux": ("self-hosted", "linux"), "gpu": ("self-hosted", "gpu"),
          None: ("ubuntu-latest",)}  # a GitHub-hosted job: no set takes it
# A few jobs per set, so that events for one job meet (duplicates, out of order)
JOBS: dict[int, str | None] = {**{j: "linux" for j in range(1, 6)},
                               **{j: "gpu" for j in range(6, 9)},
                               **{j: None for j in range(9, 11)}}
SET_JOBS = {name: [j for j, s in JOBS.items() if s == name] for name in SETS}
ACTIONS = (Action.QUEUED, Action.IN_PROGRESS, Action.COMPLETED)


def config(bounds: dict[str, tuple[int, int]]) -> str:
    lines = ["runnerSets:"]
    for name in SETS:
        lo, hi = bounds[name]
        labels = ", ".join(LABELS[name])
        lines += [f"  - name: {name}", f"    manifest: sets/{name}.yaml",
                  f"    source: {{github: {{org: octo-org, labels: [{labels}]}}}}",
                  f"    policy: {{minReplicas: {lo}, maxReplicas: {hi}, scaleDownDelay: 0s}}"]
    return "\n".join(lines) + "\n"


def replicas(root: Path, name: str) -> int:
    return int(yaml.safe_load((root / f"sets/{name}.yaml").read_text())["spec"]["replicas"])


class ReservationsMachine(RuleBasedStateMachine):
    LIMIT = timedelta(0)  # `serve --hold`: 0 commits every batch that changes the file

    def __init__(self) -> None:
        super().__init__()
        self._tmp = TemporaryDirectory()
        self.root = Path(self._tmp.name) / "config"
        self.cache_dir = Path(self._tmp.name) / "cache"  # serve's, outside the config repo
        self.bounds = {"linux": (0, 3), "gpu": (0, 1)}
        (self.root / "sets").mkdir(parents=True)
        for name in SETS:
            (self.root / f"sets/{name}.yaml").write_text(RUNNERSET.format(name=name, replicas=1))
        (self.root / "gitscale.yaml").write_text(config(self.bounds))
        self.now = T0
        self.pending: list[JobEvent] = []
        self.listing: Listing | None = None
        self.cache = StateCache.load(self.cache_dir)
        self.serving = Serving()
        self.hold = Hold(self.LIMIT)
        self.books: dict[str, Book] = {}  # serve's: the held ones when something is held
        # The model's own memory of completions (and of resync removals, "its completed was
        # lost"): job → until when a late event for it is not counted
        self.tombs: dict[int, datetime] = {}
        self.log: list[str] = []

    def teardown(self) -> None:
        self._tmp.cleanup()

    # -- what GitHub and the operator do -------------------------------------------------

    @rule(job=st.sampled_from(sorted(JOBS)), action=st.sampled_from(ACTIONS),
          times=st.sampled_from((1, 1, 1, 2)))
    def deliver(self, job: int, action: Action, times: int) -> None:
        """A delivery (``times`` 2: GitHub redelivered it), in whatever order GitHub sends."""
        event = JobEvent(job, action, LABELS[JOBS[job]], "octo-org/app", "octo-org", self.now)
        self.pending += [event] * times
        self.log.append(f"{self.now:%H:%M:%S} deliver {action.value} {job} x{times}")

    @rule(seconds=st.sampled_from((1, 10, 59, 60, 61, 299, 300, 599, 600, 601, 900, 3600)))
    def time_passes(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)
        self.log.append(f"time +{seconds}s → {self.now:%H:%M:%S}")

    @rule(name=st.sampled_from(SETS), lo=st.integers(0, 2), hi=st.integers(0, 4))
    def change_bounds(self, name: str, lo: int, hi: int) -> None:
        self.bounds[name] = (min(lo, hi), hi)
        (self.root / "gitscale.yaml").write_text(config(self.bounds))
        self.log.append(f"{name} bounds → {self.bounds[name]}")

    @rule(data=st.data(), ago=st.sampled_from((0, 30, 59, 60, 61, 120)),
          failed=st.sampled_from((False, False, False, True)))
    def resync_polls(self, data: st.DataObject, ago: int, failed: bool) -> None:
        """GitHub's list of each set's queued and in-progress jobs, for the next batch."""
        jobs = {name: data.draw(st.dictionaries(st.sampled_from(SET_JOBS[name]), st.booleans()),
                                label=f"listed {name}") for name in SETS}
        started = self.now - timedelta(seconds=ago)
        self.listing = Listing(started, error="linux: 502") if failed else Listing(started, jobs)
        self.log.append(f"resync poll at -{ago}s: {'failed' if failed else jobs}")

    @rule(cold=st.booleans())
    def restart(self, cold: bool) -> None:
        """serve restarts: a new process, the reservations from the file, the state cache
        from its directory (``cold``: lost with the pod). The next batch must be the same as
        without the restart; a cold cache no longer knows the job ids behind the manifest's
        fingerprint, so it may re-affirm the same count with the next patch ID (README, "The
        controller": "any change of the jobs counts"), but writes the same replicas and the
        same reservations."""
        self.stopping()
        text = (self.root / STATE).read_text() if (self.root / STATE).exists() else ""
        state = read_state(self.root, STATE)
        assert state.books == self.books, self.history()
        if text:
            assert render(state.books, list(state.served)) == text, self.history()
        before = self._plan(self.cache, self.serving, [], None)
        self.cache.save()
        if cold:
            shutil.rmtree(self.cache_dir, ignore_errors=True)
        self.cache = StateCache.load(self.cache_dir)
        self.serving = Serving()
        self.hold = Hold(self.LIMIT)
        after = self._plan(self.cache, self.serving, [], None)
        self.log.append(f"restart ({'cold' if cold else 'warm'} cache)")
        if cold:
            def outcome(files: dict[str, tuple[str, str]]) -> tuple[object, ...]:
                """The reservations and the replicas this batch would leave."""
                return (files[STATE][1] if STATE in files else text, *(
                    yaml.safe_load(files[f"sets/{name}.yaml"][1])["spec"]["replicas"]
                    if f"sets/{name}.yaml" in files else replicas(self.root, name)
                    for name in SETS))
            same = outcome(after.files) == outcome(before.files)
        else:
            same = after.files == before.files
        if not same:
            diff = [f"{rel}:\n" + "".join(difflib.unified_diff(
                before.files.get(rel, ("", ""))[1].splitlines(True),
                after.files.get(rel, ("", ""))[1].splitlines(True)))
                for rel in sorted(set(before.files) | set(after.files))]
            raise AssertionError("restart changed the next batch:\n" + "\n".join(diff)
                                 + self.history())

    def stopping(self) -> None:
        """Before a restart: serve's last batch (nothing is held without a hold)."""

    @rule()
    def batch(self) -> None:
        """A window ends: its events (and a due listing) land as one commit."""
        self.land(self.listing)
        self.listing = None

    def land(self, listing: Listing | None, final: bool = False) -> None:
        """A batch of the pending events and ``listing``, landed as `Batch` lands it
        (``final``: the last one at a stop)."""
        events = self.pending
        old = self.books
        before = (self.root / STATE).read_text() if (self.root / STATE).exists() else ""
        corrected: dict[str, Correction] = {}
        unrouted: list[JobEvent] = []
        self.hold.final = final
        plan = self._plan(self.cache, self.serving, events, listing, corrected, unrouted)
        for rel, (_, new) in plan.files.items():
            (self.root / rel).parent.mkdir(exist_ok=True)
            (self.root / rel).write_text(new)
        self.cache.apply(plan.cache_writes)
        self.serving.claimed = self.serving.picked.names if self.serving.picked else None
        self.pending = []
        hold, problems = self.hold, []
        if hold.dropped is not None:  # nothing but this serve writes the file here
            problems.append(f"held since {hold.dropped.since:%H:%M:%S}, dropped")
        carried = hold.carried()
        held = hold.next
        own = Counter(e.action.value for e in events if JOBS[e.job] is not None)
        if held is not None:
            # "a batch whose only change is the reservations file ... is not committed"
            if plan.files or final:
                problems.append(f"held, and wrote {sorted(plan.files)} (final: {final})")
            if held.base != before:
                problems.append("held from another file than the repo's")
            if not self.now - held.since < self.LIMIT:  # "once the first held batch is --hold old"
                problems.append(f"held since {held.since:%H:%M:%S}, past the limit")
            if dict(held.events) != dict(Counter(carried.events if carried else {}) + own):
                problems.append(f"held {held.events}: not the held batches' events")
        hold.landed()
        expected = own if held is not None else \
            Counter(carried.events if carried else {}) + own  # (committed with it)
        self.books = parse_state(hold.held.text, STATE).books if hold.held is not None else \
            read_state(self.root, STATE).books
        self.log.append(f"{self.now:%H:%M:%S} {'last ' if final else ''}batch"
                        f"{' (held)' if held is not None else ''}: {self.describe()}")
        if problems:
            raise AssertionError("; ".join(problems) + "\n" + self.history())
        self.check(old, events, listing, plan.events, unrouted, corrected, expected)

    def _plan(self, cache: StateCache, serving: Serving, events: list[JobEvent],
              listing: Listing | None, corrected: dict[str, Correction] | None = None,
              unrouted: list[JobEvent] | None = None) -> Plan:
        return batch_plan(self.root, "base", "gitscale.yaml", list(events), self.now, DURATION,
                          STATE, cache, listing=listing, corrected=corrected,
                          serving=serving, unrouted=unrouted, hold=self.hold)

    # -- the checks -----------------------------------------------------------------------

    def check(self, old: dict[str, Book], events: list[JobEvent], listing: Listing | None,
              counted: dict[str, int], unrouted: list[JobEvent],
              corrected: dict[str, Correction], expected: Mapping[str, int]) -> None:
        """``expected``: the events the plan counts (with the held batches' when it commits
        what was held)."""
        now, problems = self.now, []
        by_job = {r.job: (name, r) for name, book in self.books.items()
                  for r in book.reservations}
        seen = Counter(r.job for book in self.books.values() for r in book.reservations)
        # "matched by job id": a job is counted once, in the set its labels route it to
        problems += [f"job {job} counted {n} times" for job, n in seen.items() if n > 1]
        problems += [f"job {job} in {name}, routed to {JOBS[job]}"
                     for job, (name, _) in by_job.items() if JOBS[job] != name]
        # "Events are batched per window and land as one commit": its counts are the events'
        if counted != dict(expected):
            problems.append(f"Gitscale-Events {counted}, not {dict(expected)}")
        if sorted(e.job for e in unrouted) != sorted(e.job for e in events
                                                      if JOBS[e.job] is None):
            problems.append(f"unrouted {unrouted}")
        valid = listing is not None and listing.error is None
        before = listing.started - GRACE if listing is not None else now
        for name in SETS:
            lo, hi = self.bounds[name]
            book = self.books.get(name, Book())
            previous = {r.job: r for r in old.get(name, Book()).reservations}
            after = {r.job: r for r in book.reservations}
            demand = book.demand()
            # "never below zero"
            if demand.queued < 0 or demand.running < 0 or \
                    demand.queued + demand.running != len(book.reservations):
                problems.append(f"{name}: demand {demand} for {len(book.reservations)}")
            # "The sets' replicas follow their reservations" (min/max, no scale-down delay)
            want = min(max(len(book.reservations), lo), hi)
            if replicas(self.root, name) != want:
                problems.append(f"{name}: replicas {replicas(self.root, name)}, "
                                f"{len(book.reservations)} reserved in [{lo}, {hi}]")
            mine = [e for e in events if JOBS[e.job] == name]
            listed = listing.jobs.get(name, {}) if valid and listing is not None else {}
            correction = corrected.get(name)
            removed = set(correction.removed) if correction is not None else set()
            if not valid and correction:
                problems.append(f"{name}: a failed poll corrected {correction.describe()}")
            for job in SET_JOBS[name]:
                problems += self.check_job(name, job, [e for e in mine if e.job == job],
                                           previous.get(job), after.get(job),
                                           listed if valid else None, before, job in removed)
            ordered = sorted(book.reservations, key=lambda r: (r.created, r.job))
            running = sum(1 for r in ordered if r.running)
            ahead = running
            for r in ordered:
                if r.running:
                    continue
                # "Reservations past max are starved: their expiry is extended on each batch so
                # they do not expire while waiting" (the running jobs hold runners first)
                if ahead >= hi and r.expires < now + DURATION:
                    problems.append(f"{name}: job {r.job} starved ({ahead} ahead, max {hi}) "
                                    f"expires {r.expires:%H:%M:%S}")
                ahead += 1
                # "expires after the reservation duration": gone when expired, never later
                # than a duration from the last batch that kept it
                if not now < r.expires <= now + DURATION:
                    problems.append(f"{name}: queued job {r.job} expires {r.expires:%H:%M:%S}")
        if problems:
            raise AssertionError("; ".join(problems) + "\n" + self.history())

    def check_job(self, name: str, job: int, events: list[JobEvent],
                  previous: Reservation | None, after: Reservation | None,
                  listed: dict[int, bool] | None, before: datetime,
                  removed: bool) -> list[str]:
        """One job's reservation after the batch, from the one before and its events."""
        now = self.now
        tomb = self.tombs.get(job)
        if any(e.action == Action.COMPLETED for e in events):
            # "each `completed` removes one"; remembered for one --reservation
            self.tombs[job] = now + DURATION
            return [f"{name}: completed job {job} still reserved"] if after else []
        if tomb is not None and tomb > now:
            # "A seen `completed` always wins over a lagging API", and a late event adds nothing
            return [f"{name}: job {job} completed at {tomb - DURATION:%H:%M:%S} reserved "
                    "again"] if after else []
        # What the batch's events and the book before say, before a resync
        running = any(e.action == Action.IN_PROGRESS for e in events) or \
            (previous is not None and previous.running)
        # "A replayed queued adds nothing": a queued reserves from its time when the job has no
        # live reservation then (none, or one expired before it came), else the first one holds
        expires = previous.expires if previous is not None else None
        for e in events:
            if e.action == Action.QUEUED and (expires is None or expires <= e.at):
                expires = e.at + DURATION
        holds = running or (expires is not None and expires > now)
        problems = []
        if listed is not None:
            if job in listed:
                # "a job GitHub lists but serve never heard of gets one (running or queued)":
                # a resync never removes a reservation of a job GitHub still lists
                if after is None:
                    problems.append(f"{name}: listed job {job} not reserved")
                elif listed[job] and not after.running:
                    problems.append(f"{name}: job {job} running on GitHub, queued here")
                return problems
            if after is not None and after.created < before:
                problems.append(f"{name}: job {job} not listed, created {after.created:%H:%M:%S}"
                                f" before {before:%H:%M:%S}, still reserved")
            if removed:
                # "unless it is less than a minute older than the poll"
                made = [previous.created] if previous is not None else []
                made += [e.at for e in events if e.action != Action.COMPLETED]
                if after is not None or not made or min(made) >= before:
                    problems.append(f"{name}: job {job} removed by the resync, made at "
                                    f"{made} (poll grace from {before:%H:%M:%S})")
                self.tombs[job] = now + DURATION  # "its completed was lost"
                return problems
        if running:
            # "a running job holds its runner until its `completed` arrives"
            if after is None or not after.running:
                problems.append(f"{name}: running job {job} {'queued' if after else 'dropped'}")
        elif holds and after is None:
            # "a queued event adds a capacity reservation ... expires after the duration"
            problems.append(f"{name}: queued job {job} dropped before its expiry")
        elif not holds and after is not None and listed is None \
                and after.expires < now + DURATION:
            # (one past its expiry that is starved at this batch is extended: it still waits)
            problems.append(f"{name}: job {job} reserved without a live event")
        return problems

    def describe(self) -> str:
        return "; ".join(f"{name} " + " ".join(
            f"{r.job}{'r' if r.running else 'q'}@{r.created:%H:%M:%S}→{r.expires:%H:%M:%S}"
            for r in book.reservations) for name, book in self.books.items()) or "empty"

    def history(self) -> str:
        return "\n".join(self.log[-200:])

    @invariant()
    def clock_moves_forward(self) -> None:
        assert all(e.at <= self.now for e in self.pending)


ReservationsMachine.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
    derandomize=not HUNTING,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much])
test_webhook_reservations_against_the_world = ReservationsMachine.TestCase


class HeldReservationsMachine(ReservationsMachine):
    """The same world, served with ``--hold 5m``."""

    LIMIT = timedelta(minutes=5)

    def stopping(self) -> None:
        """serve's last batch: the events still queued and what is held, committed (the
        listing not yet applied is the next process's, as the pending events were before)."""
        if self.pending or self.hold.held is not None:
            self.land(None, final=True)
        assert self.hold.held is None, self.history()

    @rule(minutes=st.sampled_from((1, 5, 6)))  # (5, 6: past the limit, or just)
    def quiet_minutes(self, minutes: int) -> None:
        """No delivery for a while: serve's batch runs every minute all the same (its
        EXPIRY_CHECK), and the one after the limit lands what is held."""
        for _ in range(minutes):
            self.now += timedelta(minutes=1)
            self.log.append(f"time +60s → {self.now:%H:%M:%S}")
            self.batch()


HeldReservationsMachine.TestCase.settings = settings(
    ReservationsMachine.TestCase.settings, max_examples=HELD_EXAMPLES)
test_webhook_reservations_held_against_the_world = HeldReservationsMachine.TestCase
