"""The controller's pure decision (the patch-ID rules): the issue's scenarios as a table, then properties."""
from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitscale.controller.decide import (
    BACKOFF_SECONDS,
    NOTHING_APPLIED,
    Actions,
    Delete,
    DeleteReason,
    Phase,
    Runner,
    Spec,
    Unschedulable,
    Write,
    backoff,
    decide,
    effective,
    Refilled,
    gate_open,
    record,
    refilled_after,
)

T0 = datetime(2026, 11, 23, 9, 0, tzinfo=timezone.utc)
P, I, B, F, X = Phase.PENDING, Phase.IDLE, Phase.BUSY, Phase.FINISHED, Phase.FAILED


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def r(name: str, patch: int, phase: Phase, *, rid: int | None = None, ended: float | None = None,
      failures: int = 0, created: float | None = None) -> Runner:
    stopped = at(ended) if ended is not None else (at(1) if phase in (F, X) else None)
    return Runner(name, patch, phase, rid, stopped, failures,
                  at(created) if created is not None else None)


def summary(actions: Actions) -> tuple[int, list[str], list[str]]:
    return actions.create, [d.name for d in actions.deletes], list(actions.held)


# (spec, runners, now) -> (create, deletes in order, held), and the status counts
# (replicas, pending, idle, busy, failed). Times are seconds after T0; effectiveTime 0 unless set.
SCENARIOS = [
    pytest.param(Spec(5, 0, at(0)), [], 10, (5, [], []), (5, 5, 0, 0, 0),
                 id="from-nothing-5-0"),
    pytest.param(Spec(1, 0, at(0)), [], 10, (1, [], []), (1, 1, 0, 0, 0), id="1-0"),
    pytest.param(Spec(2, 1, at(20)), [r("a", 0, P)], 30, (1, [], []), (2, 2, 0, 0, 0),
                 id="1-0-then-2-1"),
    pytest.param(Spec(2, 1, at(0)), [r("a", 1, F, ended=50), r("b", 1, B)], 60,
                 (0, [], []), (1, 0, 0, 1, 0), id="same-patch-finished-not-replaced"),
    pytest.param(Spec(1, 2, at(70)), [r("a", 1, F, ended=50), r("b", 1, B)], 80,
                 (0, ["a"], []), (1, 0, 0, 1, 0), id="then-1-2-finished-removed-running-kept"),
    pytest.param(Spec(2, 1, at(0)), [r("a", 1, F, ended=50), r("b", 1, P)], 60,
                 (0, [], []), (1, 1, 0, 0, 0), id="no-write-no-replacement-no-deletion"),
    pytest.param(Spec(3, 2, at(70)), [r("a", 1, F, ended=50), r("b", 1, B)], 80,
                 (2, ["a"], []), (3, 2, 0, 1, 0), id="3-2-three-live-none-finished"),
    pytest.param(Spec(0, 2, at(70)), [r("a", 1, F, ended=50), r("b", 1, P)], 80,
                 (0, ["a"], []), (1, 1, 0, 0, 0), id="0-2-pending-stays"),
    pytest.param(Spec(0, 2, at(70)), [r("b", 1, F, ended=90)], 100,
                 (0, ["b"], []), (0, 0, 0, 0, 0), id="0-2-then-it-finishes-to-0"),
    pytest.param(Spec(0, 0, at(70)), [r("p", 1, P, rid=1), r("i", 1, I, rid=2)], 80,
                 (0, ["i", "p"], []), (0, 0, 0, 0, 0), id="0-0-idle-first-then-pending"),
    pytest.param(Spec(1, 0, at(70)), [r("i1", 0, I), r("b", 0, B), r("i2", 0, I)], 80,
                 (0, ["i1", "i2"], []), (1, 0, 0, 1, 0), id="1-0-idle-deleted-busy-stays"),
    pytest.param(Spec(1, 0, at(70)), [r("p", 0, P), r("i", 0, I)], 80,
                 (0, ["i"], []), (1, 1, 0, 0, 0), id="1-0-idle-deleted-pending-stays"),
    pytest.param(Spec(3, 1, at(0)), [r("p", 1, P), r("b", 1, B), r("x", 1, X, ended=5)], 10,
                 (0, ["x"], []), (3, 1, 0, 1, 1), id="status-pending-running-failed"),
    # A runner that finished after effectiveTime holds its slot until re-affirmed.
    pytest.param(Spec(2, 0, at(0)), [r("i", 0, I), r("f", 0, F, ended=50)], 60,
                 (0, [], ["f"]), (1, 0, 1, 0, 0), id="finished-after-write-holds-slot"),
    pytest.param(Spec(2, 0, at(55)), [r("i", 0, I), r("f", 0, F, ended=50)], 60,
                 (1, ["f"], []), (2, 1, 1, 0, 0), id="re-affirmed-slot-refilled"),
    pytest.param(Spec(2, 0, None), [r("i", 0, I), r("f", 0, F, ended=50)], 60,
                 (1, ["f"], []), (2, 1, 1, 0, 0), id="no-effective-time-refills"),
    pytest.param(Spec(2, 0, at(50)), [r("i", 0, I), r("f", 0, F, ended=50)], 60,
                 (1, ["f"], []), (2, 1, 1, 0, 0), id="finished-at-the-write-not-after-refilled"),
    pytest.param(Spec(1, 0, at(0)), [r("i", 0, I), r("f", 0, F, ended=50)], 60,
                 (0, ["f"], []), (1, 0, 1, 0, 0), id="no-slot-to-hold-finished-removed"),
    pytest.param(Spec(1, 3, at(0)), [r("a", 2, I), r("b", 2, I), r("c", 2, P)], 10,
                 (0, [], []), (3, 1, 2, 0, 0), id="patch-above-0-never-scales-down"),
    pytest.param(Spec(0, 0, at(0)), [r("b1", 0, B), r("b2", 0, B)], 10,
                 (0, [], []), (2, 0, 0, 2, 0), id="busy-never-deleted"),
    pytest.param(Spec(1, 0, at(0)), [r("i", 0, I), r("x", 0, X, ended=5, failures=2)], 8,
                 (0, ["x"], []), (1, 0, 1, 0, 0), id="failed-surplus-goes-first"),
    pytest.param(Spec(2, 1, at(0)), [r("a", 1, Phase.TERMINATING), r("b", 1, I)], 10,
                 (1, [], []), (2, 1, 1, 0, 0), id="terminating-runner-counts-for-the-gate"),
    # A runner deleted from outside (a drained node, an eviction) leaves a slot with neither a
    # runner nor a marker: refilled while the gate is shut; a finished runner's slot is not.
    pytest.param(Spec(3, 1, at(0)), [r("i", 1, I), r("b", 1, B)], 10,
                 (1, [], []), (3, 1, 1, 1, 0), id="slot-lost-outside-refilled-gate-shut"),
    pytest.param(Spec(3, 1, at(0)), [r("i", 1, I), r("b", 1, B), r("f", 1, F, ended=5)], 10,
                 (0, [], []), (2, 0, 1, 1, 0), id="finished-slot-not-refilled-gate-shut"),
]


@pytest.mark.parametrize(("spec", "runners", "now", "expected", "status"), SCENARIOS)
def test_scenarios(spec: Spec, runners: list[Runner], now: float,
                   expected: tuple[int, list[str], list[str]],
                   status: tuple[int, int, int, int, int]) -> None:
    actions = decide(spec, runners, at(now))
    assert summary(actions) == expected
    s = actions.status
    assert (s.replicas, s.pending, s.idle, s.busy, s.failed) == status
    assert s.observed_patch_id == spec.patch_id
    assert actions.create_patch_id == spec.patch_id


def test_gate_open_only_on_patch_0_or_a_new_patch() -> None:
    runners = [r("a", 4, I)]
    assert not decide(Spec(1, 4), runners, T0).acting
    assert decide(Spec(1, 5), runners, T0).acting
    assert decide(Spec(1, 0), [r("a", 0, I)], T0).acting
    assert decide(Spec(1, 1), [], T0).acting


def test_scale_down_waves_and_unregister_list() -> None:
    actions = decide(Spec(0, 0), [r("p", 0, P, rid=7), r("i", 0, I, rid=8), r("j", 0, I)], T0)
    assert [(d.name, d.wave, d.reason) for d in actions.deletes] == [
        ("i", 1, DeleteReason.SURPLUS), ("j", 1, DeleteReason.SURPLUS),
        ("p", 2, DeleteReason.SURPLUS)]
    assert actions.unregister_first == ("i", "p")


def test_scale_down_standby_continues_its_order_beyond_the_surplus() -> None:
    """The runners a 422 may hand the surplus to: the rest of the order (idle oldest first,
    then pending newest first), never a busy one; none when there is no scale-down."""
    runners = [r("i1", 0, I, created=1), r("i2", 0, I, created=2), r("i3", 0, I, created=3),
               r("p1", 0, P, created=4), r("p2", 0, P, created=5), r("b", 0, B)]
    actions = decide(Spec(4, 0), runners, at(10))
    assert [d.name for d in actions.deletes] == ["i1", "i2"]
    assert [(d.name, d.wave, d.reason) for d in actions.standby] == [
        ("i3", 1, DeleteReason.SURPLUS), ("p2", 2, DeleteReason.SURPLUS),
        ("p1", 2, DeleteReason.SURPLUS)]
    assert decide(Spec(4, 3), runners, at(10)).standby == ()  # patch > 0: no scale-down
    exact = decide(Spec(6, 0), runners, at(10))  # patch 0 at the count: nothing to remove
    assert (exact.deletes, exact.standby) == ((), ())


def stuck(name: str, since: float | None, created: float) -> Runner:
    """A pending runner the scheduler has not placed since ``since`` (None: unknown)."""
    return replace(r(name, 0, P, created=created),
                   unschedulable=Unschedulable(at(since) if since is not None else None, "cpu"))


def broken(name: str, created: float) -> Runner:
    """A pending runner whose container cannot start (a Secret missing, an image not pulled)."""
    return replace(r(name, 0, P, created=created),
                   cannot_start="container runner: CreateContainerConfigError: secret not found")


@pytest.mark.parametrize(("replicas", "runners", "deletes"), [
    pytest.param(2, [r("i", 0, I, created=1), r("p", 0, P, created=2), stuck("s", 3, 3)],
                 [("s", 1)], id="unschedulable-before-idle"),
    pytest.param(1, [r("i", 0, I, created=1), stuck("s1", 5, 2), stuck("s2", 4, 3),
                     r("p", 0, P, created=4)],
                 [("s2", 1), ("s1", 1), ("i", 1)], id="longest-stuck-first-placed-pending-last"),
    pytest.param(1, [stuck("s1", 5, 2), stuck("s2", None, 3), r("b", 0, B)],
                 [("s2", 1), ("s1", 1)], id="unknown-since-counts-as-longest"),
    pytest.param(2, [r("x", 0, X, ended=9, failures=3), stuck("s", 1, 2), r("i", 0, I)],
                 [("x", 1)], id="failed-still-first"),
    pytest.param(2, [r("i", 0, I, created=1), r("p", 0, P, created=2), broken("c", 3)],
                 [("c", 1)], id="cannot-start-before-idle"),
    pytest.param(1, [r("i", 0, I, created=1), broken("c1", 2), stuck("s", 4, 3),
                     broken("c2", 4), r("p", 0, P, created=5)],
                 [("s", 1), ("c1", 1), ("c2", 1), ("i", 1)],
                 id="unschedulable-then-cannot-start-oldest-first-placed-pending-last"),
])
def test_scale_down_removes_unschedulable_runners_before_idle_ones(
        replicas: int, runners: list[Runner], deletes: list[tuple[str, int]]) -> None:
    """A pending runner the scheduler cannot place, or whose container cannot start, can take
    no job: it goes with the failed ones, before an idle runner that can; a placed pending
    runner that may still start goes last."""
    actions = decide(Spec(replicas, 0), runners, at(10))
    assert [(d.name, d.wave) for d in actions.deletes] == deletes
    # the order names each runner once: a stuck runner is not also a placed pending one
    order = [d.name for d in actions.deletes + actions.standby]
    assert sorted(order) == sorted(x.name for x in runners if x.phase is not B)
    assert decide(Spec(replicas, 1), runners, at(10)).deletes == ()  # patch > 0: none


@pytest.mark.parametrize(("replicas", "runners", "deletes", "standby"), [
    # x1 is the surplus; x2, past its backoff, goes anyway (replaced): i1 is next, not x2
    pytest.param(3, [r("x1", 0, X, ended=1), r("x2", 0, X, ended=2), r("i1", 0, I, created=1),
                     r("i2", 0, I, created=2)], ["x2", "x1"], ["i1", "i2"],
                 id="failed-past-backoff-replaced"),
    pytest.param(1, [r("x1", 0, X, ended=1), r("x2", 0, X, ended=2)], ["x2", "x1"], [],
                 id="failed-past-backoff-only"),
    # x2 still waits out its backoff (failures 3: 20 s): it stays unless it takes x1's place
    pytest.param(2, [r("x1", 0, X, ended=1), r("x2", 0, X, ended=9, failures=3),
                     r("i1", 0, I, created=1)], ["x1"], ["x2", "i1"],
                 id="failed-in-backoff-is-a-candidate"),
])
def test_scale_down_standby_leaves_out_the_runners_the_pass_removes_anyway(
        replicas: int, runners: list[Runner], deletes: list[str], standby: list[str]) -> None:
    """A surplus runner that proves busy (a 422) gives its place to the next candidate: one
    that goes in this pass anyway (a failed runner past its backoff) would free no slot, and
    the set would stay above ``replicas`` with an idle runner left (found by
    test_decide_properties: 3 replicas on patch 0 left 4 runners, 2 of them idle)."""
    actions = decide(Spec(replicas, 0, at(0)), runners, at(10))
    assert [d.name for d in actions.deletes] == deletes
    assert [d.name for d in actions.standby] == standby


def test_a_set_being_deleted_is_decided_as_0_0() -> None:
    spec = Spec(3, 5, at(0))
    assert effective(spec, False) == spec
    assert effective(spec, True) == Spec(0, 0, at(0))
    # Patch 5 never scales down, but a set being deleted does: idle and failed first, pending
    # last, busy never (each unregistered first), finished ones removed, nothing created or held.
    runners = [r("p", 5, P, rid=1), r("i", 5, I, rid=2), r("b", 5, B, rid=3),
               r("f", 5, F, ended=50), r("x", 5, X, ended=55, failures=1)]
    actions = decide(effective(spec, True), runners, at(56))
    assert actions.acting and (actions.create, actions.retries, actions.held) == (0, (), ())
    assert [(d.name, d.wave) for d in actions.deletes] == [("f", 0), ("x", 1), ("i", 1),
                                                           ("p", 2)]
    assert actions.unregister_first == ("i", "p")
    assert (actions.status.replicas, actions.status.busy) == (1, 1)


def test_pending_runners_removed_newest_first() -> None:
    runners = [r("old", 0, P, created=1), r("new", 0, P, created=9), r("mid", 0, P, created=5)]
    assert [d.name for d in decide(Spec(1, 0), runners, at(10)).deletes] == ["new", "mid"]


@pytest.mark.parametrize("failures", range(len(BACKOFF_SECONDS) + 2))
def test_failed_runner_backs_off_then_is_replaced(failures: int) -> None:
    wait = backoff(failures).total_seconds()
    assert wait == BACKOFF_SECONDS[min(failures, 5)]
    runners = [r("x", 1, X, ended=100, failures=failures)]
    if wait:
        early = decide(Spec(1, 1), runners, at(100 + wait - 1))
        assert not early.changes
        assert early.requeue_after == pytest.approx(1.0)
        assert early.status.failed == 1
    due = decide(Spec(1, 1), runners, at(100 + wait))
    assert due.retries == (failures + 1,)
    assert [(d.name, d.reason) for d in due.deletes] == [("x", DeleteReason.FAILED)]
    assert due.create == 0
    assert bool(due.failing) == (failures + 1 >= 3)


@pytest.mark.parametrize(("now", "requeue"), [
    pytest.param(104.5, 0.5, id="half-a-second-left"),
    pytest.param(101, 4.0, id="four-seconds-left"),
    pytest.param(105, None, id="due"),
])
def test_a_pass_is_queued_for_when_a_backoff_ends(now: float, requeue: float | None) -> None:
    runners = [r("x", 1, X, ended=100, failures=1)]  # 5 s backoff
    assert decide(Spec(1, 1), runners, at(now)).requeue_after == requeue


def test_failed_runner_not_replaced_when_its_slot_is_not_wanted() -> None:
    actions = decide(Spec(1, 2), [r("a", 1, B), r("x", 1, X, ended=0)], at(10))
    assert actions.retries == ()
    assert [d.name for d in actions.deletes] == ["x"]


def o(name: str, phase: Phase, created: float, rid: int | None = None) -> Runner:
    """An outdated runner: made for job settings the set no longer has."""
    return replace(r(name, 1, phase, rid=rid, created=created), outdated=True)


@pytest.mark.parametrize(("spec", "runners", "replaced", "deleted", "create"), [
    pytest.param(Spec(3, 1, at(0)), [o("a", I, 1), o("b", P, 2), o("c", B, 3)],
                 ["a", "b"], ["a", "b"], 0, id="idle-and-pending-swapped-busy-left"),
    pytest.param(Spec(2, 4, at(0)), [o("a", I, 1), o("b", I, 2), r("c", 1, I, created=3)],
                 ["a"], ["a", "b"], 0, id="beyond-replicas-on-patch-above-0-removed"),
    pytest.param(Spec(2, 0, at(0)), [o("a", I, 1), r("b", 1, I, created=2),
                                     r("c", 1, I, created=3)],
                 [], ["a"], 0, id="patch-0-scale-down-takes-the-outdated-first"),
    pytest.param(Spec(4, 1, at(0)), [o("a", I, 1)], ["a"], ["a"], 3,
                 id="the-missing-ones-too"),
])
def test_outdated_runners_make_way_at_any_patch_never_busy(
        spec: Spec, runners: list[Runner], replaced: list[str], deleted: list[str],
        create: int) -> None:
    actions = decide(spec, runners, at(10), last_applied=spec.write)
    assert sorted(actions.replaced) == replaced and actions.retries == (0,) * len(replaced)
    assert sorted(d.name for d in actions.deletes) == deleted
    assert actions.create == create
    assert not {d.name for d in actions.deletes} & {x.name for x in runners if x.phase is B}


def d(name: str, reason: DeleteReason, rid: int | None, wave: int) -> Delete:
    return Delete(name, reason, rid, wave)


S, FIN, FAIL, OUT = (DeleteReason.SURPLUS, DeleteReason.FINISHED, DeleteReason.FAILED,
                     DeleteReason.OUTDATED)


@pytest.mark.parametrize(("spec", "runners", "deletes", "standby"), [
    pytest.param(Spec(1, 2, at(70)), [r("f", 1, F, rid=11, ended=50), r("b", 1, B, rid=12)],
                 [d("f", FIN, 11, 0)], [], id="finished"),
    pytest.param(Spec(1, 1, at(0)), [r("x", 1, X, rid=21, ended=0)], [d("x", FAIL, 21, 0)], [],
                 id="failed-past-its-backoff"),
    pytest.param(Spec(1, 1, at(0)), [o("a", I, 1, rid=31)], [d("a", OUT, 31, 0)], [],
                 id="outdated"),
    # patch 0: outdated runners go with the idle ones (wave 1), before placed pending ones
    pytest.param(Spec(2, 0, at(0)), [o("a", P, 1, rid=41), r("i", 0, I, rid=42, created=2),
                                     r("p", 0, P, rid=43, created=3), r("b", 0, B, rid=44)],
                 [d("a", S, 41, 1), d("i", S, 42, 1)], [d("p", S, 43, 2)],
                 id="scale-down-and-its-standby"),
    # the oldest idle first by creation, not by name; a runner without a creation time last
    pytest.param(Spec(1, 0, at(0)), [r("a", 0, I, rid=1, created=2), r("b", 0, I, rid=2, created=1),
                                     r("c", 0, I, rid=3)],
                 [d("b", S, 2, 1), d("a", S, 1, 1)], [d("c", S, 3, 1)],
                 id="idle-oldest-first-unknown-age-last"),
    # pending newest first (the oldest is the closest to taking a job); unknown age last
    pytest.param(Spec(1, 0, at(0)), [r("a", 0, P, created=2), r("b", 0, P, created=1),
                                     r("c", 0, P)],
                 [d("a", S, None, 2), d("b", S, None, 2)], [d("c", S, None, 2)],
                 id="pending-newest-first-unknown-age-last"),
    # failed runners by when they failed (unknown: first): the one that failed first is the
    # surplus, the other is replaced
    pytest.param(Spec(1, 0, at(0)), [r("a", 0, X, ended=2), r("b", 0, X, ended=1)],
                 [d("a", FAIL, None, 0), d("b", S, None, 1)], [], id="failed-first-is-surplus"),
    pytest.param(Spec(1, 0, at(0)), [r("a", 0, X, ended=2), Runner("u", 0, X)],
                 [d("a", FAIL, None, 0), d("u", S, None, 1)], [],
                 id="failed-at-an-unknown-time-counts-as-first"),
])
def test_every_removal_says_why_and_which_registration_goes(
        spec: Spec, runners: list[Runner], deletes: list[Delete],
        standby: list[Delete]) -> None:
    """Each removal carries the runner's registration (unregistered before its pod goes, as
    the README's controller section says for every reason), its reason and its wave (0:
    clean-up, 1: failed, unschedulable, outdated and idle surplus, 2: pending surplus)."""
    actions = decide(spec, runners, at(10))
    assert list(actions.deletes) == deletes
    assert list(actions.standby) == standby


def test_a_shut_pass_keeps_the_latest_to_finish_as_markers() -> None:
    """Gate shut, one slot wanted, two finished runners: the one that finished last marks the
    slot; the other (and one with no finish time, taken as the oldest) goes."""
    spec = Spec(1, 1, at(0))
    runners = [r("a", 1, F, ended=9), r("b", 1, F, ended=5), Runner("u", 1, F)]
    actions = decide(spec, runners, at(10), last_applied=spec.write)
    assert not actions.acting
    assert sorted(x.name for x in actions.deletes) == ["b", "u"]
    assert (actions.create, actions.status.held) == (0, 1)


# Three slots: one busy runner, two finished after the write (f2 first, at 5 s; f1 at 7 s).
BACKLOG_RUNNERS = [r("b", 1, B, created=1), r("f1", 1, F, ended=7), r("f2", 1, F, ended=5)]
OLD_WRITE = Write(9, at(-60))


@pytest.mark.parametrize(("spec", "applied", "refilled", "refills", "held"), [
    pytest.param(Spec(3, 1, at(0)), OLD_WRITE, None, [], ["f2", "f1"],
                 id="no-backlog-the-slots-are-held"),
    pytest.param(Spec(3, 1, at(0), backlog=2), OLD_WRITE, None, ["f2", "f1"], [],
                 id="backlog-2-both-refilled"),
    pytest.param(Spec(3, 1, at(0), backlog=1), OLD_WRITE, None, ["f2"], ["f1"],
                 id="backlog-1-oldest-finished-first"),
    pytest.param(Spec(3, 1, at(0), backlog=2), OLD_WRITE, Refilled(Write(1, at(0)), 1), ["f2"],
                 ["f1"], id="one-of-two-already-refilled"),
    pytest.param(Spec(3, 1, at(0), backlog=2), OLD_WRITE, Refilled(Write(1, at(0)), 2), [],
                 ["f2", "f1"], id="used-up"),
    pytest.param(Spec(3, 1, at(0), backlog=2), OLD_WRITE, Refilled(OLD_WRITE, 5),
                 ["f2", "f1"], [], id="a-count-for-another-write-starts-from-0"),
    pytest.param(Spec(3, 1, at(0), backlog=1), Write(1, at(0)), None, ["f2"], [],
                 id="gate-shut-refills-too"),
])
def test_the_backlog_refills_marked_slots(spec: Spec, applied: Write,
                                          refilled: Refilled | None, refills: list[str],
                                          held: list[str]) -> None:
    """README, "the backlog": each finished runner that marks its slot is replaced by a new
    runner of the same write, oldest finished first, while fewer than ``backlog`` slots have
    been refilled for that write; the marker goes with its successor."""
    actions = decide(spec, BACKLOG_RUNNERS, at(10), applied, refilled)
    assert list(actions.refills) == refills
    assert actions.create == 0 and actions.successors == len(refills)
    assert (actions.status.pending, actions.status.busy) == (len(refills), 1)  # the new ones
    assert actions.status.held == (len(held) if actions.acting else 2 - len(refills))
    if actions.acting:
        assert list(actions.held) == held
    assert [x.name for x in actions.deletes] == refills


@pytest.mark.parametrize(("refilled", "made", "expected"), [
    pytest.param(None, 2, 2, id="first-refills-of-the-write"),
    pytest.param(Refilled(Write(1, at(0)), 3), 2, 5, id="counted-on"),
    pytest.param(Refilled(Write(1, at(0)), 3), 0, 3, id="none-made"),
    pytest.param(Refilled(Write(1, at(-60)), 3), 2, 2, id="another-write-starts-from-0"),
])
def test_refilled_after_counts_for_the_spec_write(refilled: Refilled | None, made: int,
                                                  expected: int) -> None:
    spec = Spec(3, 1, at(0), backlog=5)
    assert refilled_after(spec, refilled, made) == Refilled(Write(1, at(0)), expected)


# -- properties -----------------------------------------------------------------------------
# A small world: spec writes and runner state changes in random order, with a controller pass
# (decide, then apply its effects) after some of them. Creations are counted per spec write.
TRANSITIONS = {P: (I, X), I: (F, B, X), B: (F,)}

change = st.tuples(st.just("change"), st.integers(0, 8), st.integers(0, 2))
events = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, 4), st.integers(0, 3)),  # b: backlog, 0: patch 0
        change, change, change,  # state changes are the common event
        st.tuples(st.just("tick"), st.integers(1, 90), st.just(0)),
    ),
    min_size=10, max_size=40,
)


class World:
    def __init__(self) -> None:
        self.now = T0
        self.spec = Spec(0, 0, None)
        self.write = 0
        self.runners: dict[str, Runner] = {}
        self.created: dict[int, int] = {0: 0}  # spec write -> fresh runners it created
        self.names = (f"r{n}" for n in itertools.count())
        self.applied: Write | None = None  # what the controller records in status
        self.refilled: Refilled | None = None  # ... and the slots refilled from a backlog

    def apply(self, event: tuple[str, int, int]) -> None:
        kind, a, b = event
        self.now += timedelta(seconds=1)
        if kind == "write":
            patch = self.spec.patch_id % 2**31 + 1 if b else 0
            self.spec = Spec(a, patch, self.now, backlog=b - 1 if b else 0)
            self.write += 1
            self.created[self.write] = 0
        elif kind == "change" and self.runners:
            runner = sorted(self.runners.values(), key=lambda x: x.name)[a % len(self.runners)]
            options = TRANSITIONS.get(runner.phase, ())
            if options:
                phase = options[b % len(options)]
                ended = self.now if phase in (F, X) else None
                self.runners[runner.name] = replace(runner, phase=phase, finished_at=ended)
        elif kind == "tick":
            self.now += timedelta(seconds=a)

    def reconcile(self, refused: int = 0) -> Actions:
        """One pass whose last ``refused`` creations fail (a quota, a 500, a kill midway)."""
        actions = decide(self.spec, list(self.runners.values()), self.now, self.applied,
                         self.refilled)
        occupied = sum(x.phase in (P, I, B, X) for x in self.runners.values())
        wanted = list(actions.retries) + [0] * (len(actions.refills) + actions.create)
        made = wanted[:max(len(wanted) - refused, 0)]
        unreplaced = set(actions.predecessors[len(made):])  # their successors were refused
        for delete in actions.deletes:
            assert self.runners[delete.name].phase is not B, "a busy runner was deleted"
            if delete.name not in unreplaced:
                del self.runners[delete.name]
        for failures in made:
            name = next(self.names)
            self.runners[name] = Runner(name, actions.create_patch_id, P, failures=failures,
                                        created_at=self.now, spec_time=self.spec.effective_time)
        self.created[self.write] += sum(f == 0 for f in made)
        if actions.refills:
            self.refilled = refilled_after(self.spec, self.refilled,
                                           len(set(actions.refills) - unreplaced))
        self.applied = record(self.spec, self.applied, len(made) == len(wanted))
        # A refill only takes a finished runner's slot: never beyond replicas, never beyond
        # the backlog of the write it belongs to.
        assert sum(x.phase in (P, I, B, X) for x in self.runners.values()) <= max(
            occupied, self.spec.replicas)
        assert self.refilled is None or self.refilled.under(self.spec) <= self.spec.backlog
        return actions


@settings(max_examples=400, deadline=None)
@given(events, st.lists(st.booleans(), min_size=40, max_size=40),
       st.lists(st.integers(0, 3), min_size=40, max_size=40))
def test_property_busy_kept_patch_bounded_and_converges(
        sequence: list[tuple[str, int, int]], passes: list[bool], refused: list[int]) -> None:
    """Some passes see some of their creations refused: later passes complete the write."""
    world = World()
    for event, run_pass, lost in zip(sequence, passes, refused):
        world.apply(event)
        if run_pass:
            world.reconcile(lost)
        # One spec write never creates more runners than it asks for, and its backlog.
        assert world.created[world.write] <= world.spec.replicas + world.spec.backlog \
            or world.write == 0

    # Events stop: within a few passes (time moving past any backoff) nothing is left to do.
    for _ in range(4):
        world.now += timedelta(seconds=BACKOFF_SECONDS[-1] + 1)
        if not world.reconcile().changes:
            break
    final = decide(world.spec, list(world.runners.values()), world.now, world.applied,
                   world.refilled)
    assert not final.changes, "did not converge"
    assert final.status.short == 0, "a write applied in part was left short"
    assert world.created[world.write] <= world.spec.replicas + world.spec.backlog \
        or world.write == 0
    phases = [x.phase for x in world.runners.values()]
    total = sum(p in (P, I, B, X) for p in phases)
    if final.acting:
        if total > world.spec.replicas:
            # Only patch > 0 (never scales down) or busy runners keep a set above its spec.
            assert world.spec.patch_id > 0 or all(p in (B, F) for p in phases)
        else:
            assert total + len(final.held) == world.spec.replicas


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 50), st.integers(0, 3), st.lists(st.sampled_from([P, I, B, F, X]),
                                                      max_size=30))
def test_property_one_pass_creates_every_missing_runner(replicas: int, patch: int,
                                                        phases: list[Phase]) -> None:
    runners = [r(f"r{n}", patch + 1, phase, ended=-5 if phase in (F, X) else None)
               for n, phase in enumerate(phases)]
    actions = decide(Spec(replicas, patch, at(0)), runners, at(10))
    live = {x.name for x in runners if x.phase in (P, I, B)}
    busy = {x.name for x in runners if x.phase is B}
    after = len(live - {d.name for d in actions.deletes}) + actions.create + len(actions.retries)
    # Finished runners ended before effectiveTime: nothing holds a slot, so one pass fills all;
    # patch > 0 never scales down; patch 0 scales down to replicas, or to the busy runners.
    assert not actions.held
    assert after == (max(replicas, len(busy)) if patch == 0 else max(replicas, len(live)))
    assert not busy & {d.name for d in actions.deletes}


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 12), st.integers(0, 3), st.integers(0, 8), st.integers(0, 8),
       st.booleans(), st.booleans(), st.lists(st.sampled_from([P, I, B, F, X]), max_size=14))
def test_property_refills_stay_within_the_backlog_and_the_replicas(
        replicas: int, patch: int, backlog: int, refilled: int, applied: bool, same: bool,
        phases: list[Phase]) -> None:
    """Whatever the runners: the backlog refills only finished runners' slots, at most what it
    has left (counted for its own write), and never takes a set beyond its replicas."""
    spec = Spec(replicas, patch, at(0), backlog)
    runners = [r(f"r{n}", patch, phase, ended=5 if phase in (F, X) else None, created=1)
               for n, phase in enumerate(phases)]
    count = Refilled(spec.write if same else Write(patch + 1, at(-60)), refilled)
    actions = decide(spec, runners, at(10), spec.write if applied else None, count)
    finished = {x.name for x in runners if x.phase is F}
    assert set(actions.refills) <= finished
    assert set(actions.refills) <= {d.name for d in actions.deletes}
    assert len(actions.refills) <= max(backlog - (refilled if same else 0), 0)
    live = sum(x.phase in (P, I, B, X) for x in runners)
    gone = sum(d.reason is not DeleteReason.FINISHED for d in actions.deletes)
    after = live - gone + actions.successors
    assert after <= max(live, replicas)


# -- the patch-ID sequence restarts (0 → 1) and wraps (2³¹−1 → 1) --------------------------------
# "latest" must be the patch of the newest runner, not the numerically highest: a busy runner of
# an old, higher patch outlives the restart of the sequence and would otherwise hold the gate.
MAX = 2**31 - 1


def test_gate_opens_for_a_new_patch_equal_to_an_old_busy_runners() -> None:
    # 7 → 0 → 1 … 6 → 7: the patch-7 runner from before the restart is still busy.
    runners = [r("old", 7, B, created=0), r("c", 6, I, created=50)]
    actions = decide(Spec(4, 7, at(100)), runners, at(110))
    assert actions.acting
    assert actions.create == 2


def test_gate_stays_shut_after_the_sequence_wrapped() -> None:
    # 2³¹−1 → 1 applied: the newest runner carries 1, an old busy one 2³¹−1. Without
    # effectiveTime nothing else stops the finished runner's slot from being refilled.
    runners = [r("old", MAX, B, created=0), r("b", 1, I, created=50),
               r("c", 1, F, created=50, ended=60)]
    actions = decide(Spec(3, 1, None), runners, at(70))
    assert not actions.acting
    assert (actions.create, actions.deletes) == (0, ())


def test_gate_with_runners_created_in_the_same_second() -> None:
    # Two passes within one second (creationTimestamp has 1 s resolution): a tie at the newest
    # time that includes the spec's patch means that patch was applied.
    tied = [r("a", 4, I, created=10), r("b", 5, I, created=10), r("o", 9, B, created=1)]
    assert not decide(Spec(2, 5), tied, at(20)).acting
    assert not decide(Spec(2, 4), tied, at(20)).acting
    assert decide(Spec(2, 6), tied, at(20)).acting
    assert decide(Spec(2, 9), tied, at(20)).acting  # 9 is only on an old runner


def test_same_patch_number_from_an_earlier_write_opens_the_gate() -> None:
    # 1 → 0 → 1: the newest runner carries 1 from the write before the restart.
    old = replace(r("x", 1, B, created=0), spec_time=at(0))
    later = decide(Spec(3, 1, at(100)), [old], at(110))
    assert later.acting and later.create == 2
    assert not decide(Spec(3, 1, at(0)), [old], at(110)).acting  # the same write: applied
    assert not decide(Spec(3, 1, at(0).replace(microsecond=900)), [old], at(110)).acting
    assert not decide(Spec(3, 1, None), [old], at(110)).acting  # no time: patch ID alone
    assert not decide(Spec(3, 1, at(100)), [r("x", 1, B, created=0)], at(110)).acting


# -- a write applied in part (issue: "the controller must converge") ---------------------------
def test_gate_stays_open_until_a_pass_fully_applied_the_write() -> None:
    spec = Spec(300, 5, at(0))
    some = [r(f"r{n}", 5, P, created=1) for n in range(82)]  # killed at 82 of 300
    for n in range(82):
        some[n] = replace(some[n], spec_time=at(0))
    # The runners' labels alone say "applied" (the old gate): shut, but the 218 slots with no
    # runner are refilled all the same (as slots whose runners were deleted from outside).
    old_gate = decide(spec, some, at(10))
    assert not old_gate.acting and old_gate.create == 300 - 82
    # The record says patch 4 was the last write fully applied: act, and create the rest only.
    actions = decide(spec, some, at(10), last_applied=Write(4, at(-60)))
    assert actions.acting and actions.create == 300 - 82
    assert actions.status.short == 0
    # Recorded only once every creation succeeded: a pass cut short keeps the old record.
    assert record(spec, Write(4, at(-60)), all_created=False) == Write(4, at(-60))
    assert record(spec, Write(4, at(-60)), all_created=True) == Write(5, at(0))
    # Once recorded, the gate is shut; runners that went missing since (no finished runner
    # marks their slots) are refilled.
    shut = decide(spec, some, at(20), last_applied=Write(5, at(0)))
    assert not shut.acting and shut.create == 300 - 82
    assert shut.status.short == 0


def test_a_first_pass_cut_short_leaves_a_record_that_keeps_the_gate_open() -> None:
    spec = Spec(3, 1, at(0))
    one = [replace(r("a", 1, P, created=1), spec_time=at(0))]
    assert record(spec, None, all_created=False) == NOTHING_APPLIED
    assert decide(spec, one, at(10), NOTHING_APPLIED).create == 2
    # A set with no record whose runners carry the write (a controller upgrade): as before.
    assert not decide(spec, one, at(10), None).acting
    assert record(spec, None, all_created=True) == spec.write


# -- the count a write was applied with: a count written by hand is kept apart -----------------
@pytest.mark.parametrize(("spec", "last", "all_created", "count"), [
    pytest.param(Spec(5, 12, at(0)), Write(11, at(-60), 3), True, 5, id="a-new-write-its-count"),
    pytest.param(Spec(8, 12, at(0)), Write(12, at(0), 5), True, 5,
                 id="gate-shut-keeps-the-count-applied-not-the-hand-edit"),
    pytest.param(Spec(8, 12, None), Write(12, None, 5), True, 5, id="no-times-by-patch"),
    pytest.param(Spec(8, 0, at(0)), Write(0, at(0), 5), True, 8, id="patch-0-applies-its-count"),
    pytest.param(Spec(8, 13, at(9)), Write(11, at(-60), 5), False, 5,
                 id="cut-short-keeps-the-record"),
    pytest.param(Spec(8, 12, at(0)), Write(12, at(0)), True, None,
                 id="a-record-without-a-count-an-older-controller-stays-without"),
    pytest.param(Spec(8, 12, at(0)), None, True, 8, id="the-first-record"),
])
def test_the_record_keeps_the_count_its_write_was_applied_with(
        spec: Spec, last: Write | None, all_created: bool, count: int | None) -> None:
    kept = record(spec, last, all_created)
    assert kept.replicas == count
    assert kept.same(spec.write if all_created else last)  # (the gate's record is as before)
    assert (kept.patch_id, kept.effective_time) == (
        (spec.patch_id, spec.effective_time) if all_created
        else (last.patch_id, last.effective_time) if last else (0, None))


def test_a_write_is_the_same_whatever_count_it_carries() -> None:
    # The gate compares patch ID and effectiveTime only: the count is kept, never compared.
    assert Write(12, at(0), 5) == Write(12, at(0), 8) == Write(12, at(0))
    assert Spec(8, 12, at(0)).write.replicas == 8


@pytest.mark.parametrize(("spec", "record", "expected"), [
    pytest.param(Spec(1, 0, at(0)), Write(0, at(0)), True, id="patch-0-always"),
    pytest.param(Spec(1, 3, at(5)), Write(3, at(5)), False, id="recorded-shut"),
    pytest.param(Spec(1, 3, at(5)), Write(3, at(5).replace(microsecond=500)), False,
                 id="same-second-shut"),
    pytest.param(Spec(1, 3, at(9)), Write(3, at(5)), True, id="same-patch-later-write-acts"),
    pytest.param(Spec(1, 4, at(9)), Write(3, at(5)), True, id="next-patch-acts"),
    pytest.param(Spec(1, 3, None), Write(3, None), False, id="no-times-by-patch"),
])
def test_gate_by_the_record(spec: Spec, record: Write, expected: bool) -> None:
    runners = [replace(r("a", spec.patch_id, I, created=1), spec_time=spec.effective_time)]
    assert gate_open(spec, runners, record) is expected


def test_status_counts_held_and_waiting_slots_as_not_short() -> None:
    # A finished runner holds its slot until the next write, a failed one waits out its backoff: neither
    # is a shortfall; a slot with no runner at all is.
    runners = [r("i", 1, I, created=1), r("f", 1, F, ended=50),
               r("x", 1, X, ended=55, failures=2)]
    status = decide(Spec(4, 1, at(0)), runners, at(56), Write(0, None)).status
    assert (status.replicas, status.held, status.waiting, status.wanted) == (3, 1, 1, 4)
    assert status.short == 0
    quiet = decide(Spec(5, 1, at(0)), runners, at(56), Write(1, at(0)))
    # gate shut: two slots have nothing in them (deleted from outside): both refilled
    assert quiet.create == 2 and quiet.status.short == 0
