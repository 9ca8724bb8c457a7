"""decide() over a small cluster, pass after pass: the rule for a slot lost from outside.

A pass whose gate is shut creates a runner for every slot with neither a live runner nor a
finished marker (README, "a slot lost from outside"), on the claim that the controller's own
removals always leave ``replicas`` covered: without deletions from outside, such a pass never
refills the slot of a runner that finished its job. The cluster here plays gitscale's writes
(patch 0 or the next patch ID, an effectiveTime that moves on, a backlog), the runners' lives
in any order (pending, idle, busy, finished, failed; failed by a timeout and back online;
observed late), and passes applied as ``reconcile.py`` applies them: successors created before
their predecessors go, refused creations keeping their predecessors and the write unrecorded,
passes killed midway (after the status written before creating), a final status lost,
unregistrations answering 422 (kept as busy, the scale-down's next candidate in their place),
pods lingering as terminating. ``record`` and ``refilled_after`` are kept between passes.

Checked: without deletions from outside, every shut pass has ``create == 0`` and every pass
applied whole leaves ``replicas`` covered (``check_own_removals_cover``; also with no status
at all, the gate going by the runners' labels); with them, every shut pass applied whole fills
every slot at once (``check_lost_slots_refilled``); and in both, and from any state, the
bounds of a pass (``check_bounds``). The last found a scale-down that named, as the next
candidate in place of a surplus runner that proved busy, a failed runner the pass removed
anyway (test_decide.py, ``test_scale_down_standby_leaves_out_the_runners_...``).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from gitscale.controller.decide import (
    Actions,
    DeleteReason,
    Phase,
    Refilled,
    Runner,
    Spec,
    Write,
    decide,
    record,
    refilled_after,
)

T0 = datetime(2026, 11, 23, 9, 0, tzinfo=timezone.utc)
P, I, B, F, X = Phase.PENDING, Phase.IDLE, Phase.BUSY, Phase.FINISHED, Phase.FAILED
TERMINATING = Phase.TERMINATING
COUNTED = (P, I, B, X)  # the runners a set counts (status.replicas): not finished, not going

# What a runner may become between two passes, as the controller observes it. "x" is a soft
# failure (its pod still runs: registration timeout, stuck image) that may come back online
# and may be running a job after all; "X" a hard one (its container exited non-zero).
MOVES: dict[str, tuple[str, ...]] = {
    "P": ("I", "B", "F", "X", "x"),
    "I": ("B", "F", "X", "P"),
    "B": ("F", "X", "I"),
    "x": ("P", "I", "B", "F", "X"),
}
PHASE = {"P": P, "I": I, "B": B, "F": F, "X": X, "x": X, "Q": I}  # Q, q: outdated I, P

FULL, REFUSED, KILLED, STATUS_LOST, UNKNOWN = "full", "refused", "killed", "status-lost", \
    "unknown"  # how a pass went: see Cluster.reconcile


@dataclass
class Pass:
    """One pass as the world applied it, with the counts the invariants need."""

    actions: Actions
    spec: Spec
    mode: str
    raced: bool  # some unregistration answered 422
    live_before: int  # pending + idle + busy at the start of the pass
    counted_before: int  # ... + failed
    counted_after: int
    finished_after: int
    busy_after: int
    old_after: int  # pending, idle and failed runners after it that were there before it


class Cluster:
    """One RunnerSet, its runner pods and the controller's status."""

    def __init__(self, outside: bool, no_status: bool = False) -> None:
        self.outside = outside  # deletions from outside allowed
        # Every status write refused (no RBAC for runnersets/status, say): no record, so the
        # gate goes by the runners' labels, and no refill (its count is written first).
        self.no_status = no_status
        self.now = T0
        self.spec = Spec(0, 0, None)
        self.runners: dict[str, Runner] = {}
        self.soft: set[str] = set()  # failed runners whose pods still run
        self.applied: Write | None = None
        self.refilled: Refilled | None = None
        self.numbers = itertools.count(1)
        self.passes: list[Pass] = []

    # -- the world between passes ----------------------------------------------------------------
    def step(self, event: tuple[str, int, int, int]) -> None:
        kind, a, b, c = event
        self.now += timedelta(seconds=1)
        if kind == "write":
            self.write(replicas=a, patch_0=b == 0, backlog=b - 1 if b else 0, skew=c)
        elif kind == "tick":
            self.now += timedelta(seconds=a)
        elif kind == "move":
            self.move(a, b, c)
        elif kind == "gone":  # a terminating pod is gone at last
            going = self.named(TERMINATING)
            if going:
                del self.runners[going[a % len(going)]]
        elif kind == "edit":  # job settings edited: every runner so far is outdated
            self.runners = {n: replace(r, outdated=True) for n, r in self.runners.items()}
        elif kind == "outside" and self.outside:  # drained, evicted, kubectl delete pod
            here = [n for n in sorted(self.runners) if self.runners[n].phase is not TERMINATING]
            if here:
                name = here[a % len(here)]
                self.soft.discard(name)
                if b:
                    self.runners[name] = replace(self.runners[name], phase=TERMINATING)
                else:
                    del self.runners[name]

    def write(self, replicas: int, patch_0: bool, backlog: int, skew: int) -> None:
        """gitscale's write: patch 0, or the next patch ID; an effectiveTime to the second that
        moves on from the last (the controller sees it up to 90 s late, or its clock is up to
        5 s behind gitscale's)."""
        patch = 0 if patch_0 else self.spec.patch_id % (2**31 - 1) + 1
        when = (self.now + timedelta(seconds=skew)).replace(microsecond=0)
        if self.spec.effective_time is not None and when <= self.spec.effective_time:
            when = self.spec.effective_time + timedelta(seconds=1)
        self.spec = Spec(replicas, patch, when, backlog)

    def move(self, index: int, choice: int, late: int) -> None:
        names = [n for n in sorted(self.runners) if self.runners[n].phase in (P, I, B, X)
                 and (self.runners[n].phase is not X or n in self.soft)]
        if not names:
            return
        name = names[index % len(names)]
        runner = self.runners[name]
        state = "x" if name in self.soft else {P: "P", I: "I", B: "B"}[runner.phase]
        options = MOVES[state]
        to = options[choice % len(options)]
        ended = None
        if to in "FXx":  # observed ``late`` seconds after it stopped (never before it started)
            ended = max(self.now - timedelta(seconds=late), runner.created_at or T0)
        self.soft.discard(name)
        if to == "x":
            self.soft.add(name)
        self.runners[name] = replace(runner, phase=PHASE[to], finished_at=ended)

    def named(self, *phases: Phase) -> list[str]:
        return [n for n in sorted(self.runners) if self.runners[n].phase in phases]

    def count(self, *phases: Phase) -> int:
        return sum(r.phase in phases for r in self.runners.values())

    # -- a pass, applied as reconcile.py applies it ----------------------------------------------
    def reconcile(self, mode: str = FULL, k: int = 0, busy_bits: int = 0) -> Pass:
        """``mode``: FULL, or REFUSED (the last ``k`` creations refused), KILLED (after the
        first ``k`` creations), STATUS_LOST (the status at its end not written), UNKNOWN (the
        last ``k`` creations answered 5xx, their pods made all the same); ``busy_bits``: the n-th unregistration of a runner still running answers 422 when bit n
        is set (it took a job since the list was read)."""
        spec, before = self.spec, dict(self.runners)
        actions = decide(spec, list(before.values()), self.now, self.applied, self.refilled)
        for d in actions.deletes:
            assert before[d.name].phase is not B, f"busy runner {d.name} deleted"
        unregistrations = iter(range(64))
        raced = False

        def answers_busy(name: str) -> bool:
            """An unregistration (the runner pod still running) that answers 422."""
            nonlocal raced
            runner = self.runners.get(name)
            if runner is None or runner.runner_id is None or not (
                    runner.phase in (P, I) or name in self.soft):
                return False
            if not busy_bits >> next(unregistrations) & 1:
                return False
            raced = True
            self.soft.discard(name)
            self.runners[name] = replace(runner, phase=B, finished_at=None)
            return True

        # retire(): failed runners still running, and outdated ones, are unregistered before
        # their successors.
        outdated = {n for n, r in self.runners.items() if r.outdated}
        kept = {n for n in actions.replaced if (n in self.soft or n in outdated)
                and answers_busy(n)}
        if kept:
            index = [i for i, n in enumerate(actions.replaced) if n not in kept]
            actions = replace(
                actions, retries=tuple(actions.retries[i] for i in index),
                replaced=tuple(actions.replaced[i] for i in index),
                deletes=tuple(d for d in actions.deletes if d.name not in kept))
        retired = set(actions.replaced) & (self.soft | outdated)
        # The backlog's refills are counted (in status) before they are made.
        refilled = refilled_after(spec, self.refilled, len(actions.refills)) \
            if actions.refills else None
        creating = replace(actions, refills=()) if self.no_status else actions
        lineage = list(creating.retries) + [0] * (len(creating.refills) + creating.create)
        made = lineage[:k] if mode == KILLED else lineage[:max(len(lineage) - k, 0)] \
            if mode in (REFUSED, UNKNOWN) else lineage
        unreplaced = set(creating.predecessors[len(made):]) | (set(actions.refills) - set(
            creating.refills))
        for failures in lineage if mode == UNKNOWN else made:
            number = next(self.numbers)
            name = f"r{number}"
            self.runners[name] = Runner(name, actions.create_patch_id, P, number, None,
                                        failures, self.now, spec.effective_time)
        if self.no_status:
            refilled = None
        if mode == KILLED:  # the status written before creating, nothing removed
            if actions.create and not self.no_status:
                self.applied = record(spec, self.applied, all_created=False)
            self.refilled = refilled or self.refilled
            return self._passed(actions, spec, mode, raced, before)

        # remove_runners(): wave by wave; a surplus runner that proves busy gives its place to
        # the next of the scale-down's order.
        todo = [d for d in actions.deletes if d.name not in unreplaced]
        standby = list(actions.standby)
        while todo:
            wave = min(d.wave for d in todo)
            batch, todo = [d for d in todo if d.wave == wave], [d for d in todo if d.wave != wave]
            for d in batch:
                if d.name not in retired and answers_busy(d.name):
                    if d.reason is DeleteReason.SURPLUS and standby:
                        todo.append(standby.pop(0))
                    continue
                if d.name in self.runners:
                    self.soft.discard(d.name)
                    if d.wave % 2:  # (some pods take their grace period to go)
                        self.runners[d.name] = replace(self.runners[d.name], phase=TERMINATING)
                    else:
                        del self.runners[d.name]
        if self.no_status:
            pass
        elif mode == STATUS_LOST:  # the final status write failed: what was written before stays
            if actions.create:
                self.applied = record(spec, self.applied, all_created=False)
            self.refilled = refilled or self.refilled
        else:
            self.applied = record(spec, self.applied, all_created=len(made) == len(lineage))
            if refilled is not None:  # a refill not made gives its place in the backlog back
                self.refilled = Refilled(refilled.write, refilled.count - len(
                    unreplaced & set(actions.refills)))
        return self._passed(actions, spec, mode, raced, before)

    def _passed(self, actions: Actions, spec: Spec, mode: str, raced: bool,
                before: dict[str, Runner]) -> Pass:
        done = Pass(actions, spec, mode, raced,
                    # (an outdated runner not busy is no runner of the set: it goes anyway)
                    live_before=sum(r.phase in (P, I, B) and not _stale(r)
                                    for r in before.values()),
                    counted_before=sum(r.phase in COUNTED for r in before.values()),
                    counted_after=self.count(*COUNTED), finished_after=self.count(F),
                    busy_after=self.count(B), old_after=sum(
                        n in before and r.phase in (P, I, X) for n, r in self.runners.items()))
        self.passes.append(done)
        return done


def _stale(runner: Runner) -> bool:
    return runner.outdated and runner.phase in (P, I)


def run_pass(cluster: Cluster, plan: tuple[int, int, int]) -> Pass:
    mode, k, bits = plan
    return cluster.reconcile((FULL, FULL, FULL, REFUSED, KILLED, STATUS_LOST, UNKNOWN)[mode], k,
                             bits)


# -- strategies --------------------------------------------------------------------------------
writes = st.tuples(st.just("write"), st.integers(0, 4), st.integers(0, 3), st.integers(-90, 5))
moves = st.tuples(st.just("move"), st.integers(0, 9), st.integers(0, 4), st.integers(0, 30))
ticks = st.tuples(st.just("tick"), st.sampled_from([1, 4, 9, 30, 90]), st.just(0), st.just(0))
gone = st.tuples(st.just("gone"), st.integers(0, 9), st.just(0), st.just(0))
edit = st.tuples(st.just("edit"), st.just(0), st.just(0), st.just(0))
outside = st.tuples(st.just("outside"), st.integers(0, 9), st.integers(0, 1), st.just(0))
plans = st.tuples(st.integers(0, 6), st.integers(0, 3), st.integers(0, 7))
# Runners change more often than specs are written, so that shut passes meet finished runners.
own = st.one_of(writes, *[moves] * 5, ticks, gone, edit)
rough = st.one_of(writes, *[moves] * 5, ticks, gone, outside, outside, edit)


def world(events: st.SearchStrategy[tuple[str, int, int, int]],
          passes: st.SearchStrategy[tuple[int, int, int]] = plans) -> st.SearchStrategy[
        list[tuple[tuple[str, int, int, int], tuple[int, int, int] | None]]]:
    """Events, each followed by a pass or not (a pass: its mode, k and 422 bits)."""
    return st.lists(st.tuples(events, st.none() | passes), min_size=20, max_size=80)


def settle(cluster: Cluster) -> list[Pass]:
    """Events stop: passes, time moving past every backoff, until nothing is left to do
    (without a status, nothing but the refills it cannot count, so never makes)."""
    done: list[Pass] = []
    while len(done) < 6 and not (done and settled(cluster, done[-1].actions)):
        cluster.now += timedelta(seconds=81)
        done.append(cluster.reconcile())
    return done


def settled(cluster: Cluster, actions: Actions) -> bool:
    if cluster.no_status:  # its refills (and their markers' removals) are never made
        actions = replace(actions, refills=(), deletes=tuple(
            d for d in actions.deletes if d.name not in actions.refills))
    return not actions.changes


def check_bounds(p: Pass) -> None:
    """Whatever happens around it ("counted": pending + idle + busy + failed):

    - a pass never grows a set beyond ``replicas``: counted after it <= max(replicas,
      counted before it), and a pass that creates leaves at most ``replicas`` counted;
    - patch > 0 never scales down, patch 0 does: a pass on patch 0 that made all its
      creations leaves at most max(replicas, busy runners) counted — or, where surplus
      runners proved busy (422) with no other candidate left, no runner from before it that
      is not busy (successors made before the removals may then outnumber the removals).
    """
    a, replicas = p.actions, p.spec.replicas
    if p.mode not in (KILLED, UNKNOWN):  # (there replaced runners may stay with successors)
        assert p.counted_after <= max(replicas, p.counted_before)
        if a.successors and not p.raced:  # (a failed runner that proved busy stays)
            assert p.counted_after <= replicas
    if p.mode in (FULL, STATUS_LOST) and p.spec.patch_id == 0:
        assert p.counted_after <= max(replicas, p.busy_after) or p.raced and not p.old_after


def check_own_removals_cover(p: Pass) -> None:
    """Without deletions from outside: a pass whose gate is shut creates nothing for a missing
    slot (``create == 0``: only ``retries``, replacing failed runners, and ``refills``, from
    the backlog), since every pass that made all its creations (and found no surplus runner
    busy) leaves ``replicas`` covered: counted + finished >= replicas."""
    check_bounds(p)
    if not p.actions.acting:
        assert p.actions.create == 0, \
            f"a shut pass created {p.actions.create} runner(s) for a finished slot"
    if p.mode in (FULL, STATUS_LOST) and not p.raced:
        assert p.counted_after + p.finished_after >= p.spec.replicas, "a slot left uncovered"


def check_lost_slots_refilled(p: Pass) -> None:
    """With deletions from outside: a shut pass applied whole, with no failed runner in its
    backoff, leaves every slot taken by a live runner or a marker, and no more than before:
    pending + idle + busy + finished after it == max(replicas, pending + idle + busy before)."""
    check_bounds(p)
    a = p.actions
    if a.acting or p.mode not in (FULL, STATUS_LOST) or p.raced or a.status.waiting:
        return
    assert a.status.short == 0
    assert p.counted_after + p.finished_after == max(p.spec.replicas, p.live_before)


Events = list[tuple[tuple[str, int, int, int], tuple[int, int, int] | None]]


def play(cluster: Cluster, events: Events, check: Callable[[Pass], None]) -> None:
    """The set written at 2 replicas (patch 0), then ``events`` with their passes, then passes
    until it settles; ``check`` after every pass."""
    cluster.write(replicas=2, patch_0=True, backlog=0, skew=0)
    for event, plan in events:
        cluster.step(event)
        if plan is not None:
            check(run_pass(cluster, plan))
    for p in settle(cluster):
        check(p)


@settings(max_examples=300, deadline=None)
@given(world(own))
def test_property_a_shut_pass_never_refills_a_finished_slot(events: Events) -> None:
    cluster = Cluster(outside=False)
    play(cluster, events, check_own_removals_cover)
    assert settled(cluster, cluster.passes[-1].actions), "did not settle"


@settings(max_examples=100, deadline=None)
@given(world(own, st.tuples(st.sampled_from([0, 5, 6]), st.integers(0, 3), st.integers(0, 7))))
def test_property_without_a_status_a_shut_pass_never_refills_a_finished_slot(
        events: Events) -> None:
    """The same, with every status write refused: the gate goes by the runners' labels, so a
    pass cut short (killed, creations refused) leaves it shut with slots never filled, which
    the next passes fill as lost slots: passes here make every creation they decide."""
    cluster = Cluster(outside=False, no_status=True)
    play(cluster, events, check_own_removals_cover)
    assert settled(cluster, cluster.passes[-1].actions), "did not settle"


@settings(max_examples=300, deadline=None)
@given(world(rough))
def test_property_a_slot_lost_from_outside_is_refilled_by_the_next_pass(events: Events) -> None:
    cluster = Cluster(outside=True)
    play(cluster, events, check_lost_slots_refilled)
    last = cluster.passes[-1]
    assert not last.actions.changes, "did not settle"
    assert last.actions.status.short == 0


# -- one pass, from any state ------------------------------------------------------------------
# The bounds of a single pass hold whatever the set looks like, which a random state reaches
# more often than a history does (several failed runners on a patch-0 scale-down, say).
runner_states = st.lists(st.tuples(st.sampled_from("PIBFXxTQq"), st.integers(0, 60),
                                   st.integers(0, 4)), max_size=10)


@settings(max_examples=500, deadline=None)
@given(runner_states, st.integers(0, 6), st.integers(0, 2), st.integers(0, 3), st.booleans(),
       st.integers(0, 6), st.integers(0, 3), st.integers(0, 15))
def test_property_one_pass_never_grows_a_set_beyond_its_replicas(
        states: list[tuple[str, int, int]], replicas: int, patch: int, backlog: int,
        applied: bool, mode: int, k: int, busy_bits: int) -> None:
    cluster = Cluster(outside=False)
    cluster.now = T0 + timedelta(seconds=100)
    cluster.spec = Spec(replicas, patch, T0 + timedelta(seconds=30), backlog)
    cluster.applied = cluster.spec.write if applied else Write(patch + 1, T0)
    for n, (state, ended, failures) in enumerate(states, start=1):
        stopped = T0 + timedelta(seconds=40 + ended) if state in "FXx" else None
        phase = TERMINATING if state == "T" else {**PHASE, "q": P}[state]
        cluster.runners[f"s{n}"] = Runner(f"s{n}", patch, phase, n, stopped, failures,
                                          T0 + timedelta(seconds=n), cluster.spec.effective_time,
                                          outdated=state in "Qq")
        if state == "x":
            cluster.soft.add(f"s{n}")
    check_bounds(run_pass(cluster, (mode, k, busy_bits)))
