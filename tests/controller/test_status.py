"""RunnerSet status as kstatus reads it: Ready while every slot has a runner, Reconciling while
short, Stalled when stuck past the progress deadline, observedGeneration everywhere."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from gitscale.controller import status as st
from gitscale.controller.decide import (
    Phase,
    Runner,
    Spec,
    Status,
    Unschedulable,
    Write,
    record,
)
from gitscale.core.model import next_patch_id
from gitscale.runnerset_api import PATCH_ID_MAX
from gitscale.controller.errors import (
    ControllerError,
    CredentialsError,
    CredentialsMissing,
    KubeError,
    PlatformError,
)
from gitscale.timeutil import format_time
from tests.controller.harness import NS, Harness

T0 = datetime(2026, 11, 23, 9, 0, tzinfo=timezone.utc)


def counts(wanted: int, pending: int = 0, idle: int = 0, busy: int = 0, failed: int = 0,
           held: int = 0, waiting: int = 0) -> Status:
    return Status(pending + idle + busy + failed, pending, idle, busy, failed, 4, wanted, held,
                  waiting)


def by_type(conds: list[st.Condition]) -> dict[str, tuple[bool, str]]:
    return {c.type: (c.status, c.reason) for c in conds}


@pytest.mark.parametrize(("status", "problem", "creating", "ready", "reconciling"), [
    pytest.param(counts(3, pending=1, idle=1, busy=1), None, 0, (True, "Reconciled"), False,
                 id="all-slots-have-runners"),
    pytest.param(counts(3, idle=1, held=2), None, 0, (True, "Reconciled"), False,
                 id="finished-runners-hold-their-slots"),
    pytest.param(counts(1, idle=3), None, 0, (True, "Reconciled"), False,
                 id="above-replicas-on-patch-above-0"),
    pytest.param(counts(300), None, 300, (False, "Creating"), True, id="creating"),
    pytest.param(counts(300, pending=85), st.Problem("CreateFailed", "500"), 0,
                 (False, "CreateFailed"), True, id="85-of-300"),
    pytest.param(counts(3, idle=2), None, 0, (False, "RunnersMissing"), True,
                 id="a-runner-deleted-from-outside"),
    pytest.param(counts(3, idle=2, failed=1, waiting=1), None, 0, (False, "Backoff"), True,
                 id="a-failed-runner-waits-its-backoff"),
    pytest.param(None, st.Problem("InvalidSpec", "spec.template is missing", person=True), 0,
                 (False, "InvalidSpec"), False, id="invalid-spec-stalls-at-once"),
])
def test_ready_and_reconciling(status: Status | None, problem: st.Problem | None,
                               creating: int, ready: tuple[bool, str],
                               reconciling: bool) -> None:
    conds = by_type(st.conditions(status, problem, (), None, T0, creating=creating))
    assert conds["Ready"] == ready
    assert conds["Reconciling"][0] is reconciling
    assert conds["Stalled"][0] is (problem is not None and problem.person)


def test_short_message_says_how_many_and_why() -> None:
    (ready, *_) = st.conditions(counts(300, pending=85), st.Problem(
        "QuotaExceeded", "create pod: 403 Forbidden: exceeded quota"), (), None, T0)
    assert ready.message == ("215 of 300 runner(s) missing: create pod: 403 Forbidden: "
                             "exceeded quota")


def test_stalled_after_the_progress_deadline() -> None:
    short, problem = counts(3, idle=1), st.Problem("CreateFailed", "500")
    failing_since = {"conditions": [{"type": "Ready", "status": "False", "reason": "CreateFailed",
                                     "lastTransitionTime": format_time(T0)}]}
    early = by_type(st.conditions(short, problem, (), failing_since, T0 + timedelta(minutes=4)))
    assert early["Reconciling"][0] and not early["Stalled"][0]
    late = st.conditions(short, problem, (), failing_since, T0 + timedelta(minutes=5))
    assert by_type(late)["Stalled"] == (True, "CreateFailed")
    assert not by_type(late)["Reconciling"][0]  # kstatus reads Reconciling first
    assert late[2].message.startswith("no progress for 5m: 2 of 3 runner(s) missing")


SAID = 'container agent: CreateContainerConfigError: secret "bk-token" not found'


def test_runners_that_cannot_start_stay_not_ready_across_their_replacement_then_stall() -> None:
    """A pod whose container cannot start (a Secret missing) is failed after 5 minutes and
    replaced; its successor is pending with no container status yet. That pass said Ready True
    ("Reconciled", a Normal Event) between two RunnersCannotStart: Ready flapped every few
    minutes and never stalled. While the runners made since are pending, none started, Ready
    keeps it; False for 5 minutes, it is Stalled (a person must act); a runner made since that
    started ends it, as does a pass with none of them pending."""
    since = {"conditions": [{"type": "Ready", "status": "False", "reason": "RunnersCannotStart",
                             "message": f"2 of 2 runner(s) cannot start: {SAID}",
                             "lastTransitionTime": format_time(T0)}]}
    later = T0 + timedelta(minutes=5)

    def runner(name: str, phase: Phase, made: datetime) -> Runner:
        return Runner(name, 4, phase, created_at=made)

    first = by_type(st.conditions(counts(2, pending=2), None, (), None, T0,
                                  not_starting=(2, SAID)))
    assert first["Ready"] == (False, "RunnersCannotStart") and not first["Stalled"][0]
    successors = [runner("c", Phase.PENDING, later), runner("d", Phase.PENDING, later)]
    replaced = st.conditions(counts(2, pending=2), None, (), since, later, runners=successors)
    assert by_type(replaced)["Ready"] == (False, "RunnersCannotStart")
    assert replaced[0].message == f"2 of 2 runner(s) cannot start: {SAID}"
    assert by_type(replaced)["Stalled"] == (True, "RunnersCannotStart")
    assert not by_type(replaced)["Reconciling"][0]
    started = [runner("c", Phase.IDLE, later), runner("d", Phase.PENDING, later)]
    fixed = by_type(st.conditions(counts(2, pending=1, idle=1), None, (), since, later,
                                  runners=started))
    assert fixed["Ready"] == (True, "Reconciled"), "a runner made since started: fixed"
    before = [runner("a", Phase.PENDING, T0 - timedelta(minutes=1))]
    assert by_type(st.conditions(counts(1, pending=1), None, (), since, later,
                                 runners=before))["Ready"] == (True, "Reconciled")
    other = {"conditions": [{**since["conditions"][0], "reason": "Backoff"}]}
    assert by_type(st.conditions(counts(2, pending=2), None, (), other, later,
                                 runners=successors))["Ready"] == (True, "Reconciled")


CPU = "0/3 nodes are available: 3 Insufficient cpu."


def pending(name: str, since: datetime | None, message: str = CPU,
            phase: Phase = Phase.PENDING) -> Runner:
    return Runner(name, 4, phase, unschedulable=Unschedulable(since, message))


GRACE = st.UNSCHEDULABLE_GRACE


@pytest.mark.parametrize(("runners", "expected"), [
    pytest.param([], st.Unscheduled(), id="none"),
    pytest.param([pending("a", T0)], st.Unscheduled(1, 0, "", GRACE.total_seconds()),
                 id="just-now:-in-its-grace"),
    pytest.param([pending("a", T0 - GRACE)], st.Unscheduled(1, 1, CPU, None),
                 id="grace-run-out"),
    pytest.param([pending("a", T0 - GRACE, "later"), pending("b", T0 - 2 * GRACE, "first"),
                  pending("c", T0 - timedelta(seconds=30))],
                 st.Unscheduled(3, 2, "first", GRACE.total_seconds() - 30),
                 id="the-longest-waiting-speaks;-the-next-grace-wakes"),
    pytest.param([pending("a", None)], st.Unscheduled(1, 1, CPU, None),
                 id="unknown-since:-reported"),
    pytest.param([pending("a", T0 - GRACE, phase=Phase.TERMINATING), Runner("b", 4, Phase.IDLE)],
                 st.Unscheduled(), id="only-pending-runners"),
])
def test_unscheduled(runners: list[Runner], expected: st.Unscheduled) -> None:
    assert st.unscheduled(runners, T0) == expected


def test_unschedulable_runners_after_their_grace_make_ready_false() -> None:
    late, early = st.Unscheduled(2, 2, CPU), st.Unscheduled(2, 0, "", 30.0)
    ready, working, stalled, _ = st.conditions(counts(3, pending=2, idle=1), None, (), None, T0,
                                               unschedulable=late)
    assert (ready.status, ready.reason) == (False, "RunnersUnschedulable")
    assert ready.message == (f"2 of 3 runner(s) cannot be scheduled: {CPU} (they stay "
                             "pending, not replaced, until a node fits them)")
    assert working.status and not stalled.status
    quiet = by_type(st.conditions(counts(3, pending=2, idle=1), None, (), None, T0,
                                  unschedulable=early))
    assert quiet["Ready"] == (True, "Reconciled")
    # A failure of the pass says more (and is what to fix first); a set short of runners too.
    failed = by_type(st.conditions(counts(3, pending=2, idle=1), st.Problem("ApplyFailed", "x"),
                                   (), None, T0, unschedulable=late))
    assert failed["Ready"] == (False, "ApplyFailed")
    short = by_type(st.conditions(counts(4, pending=2, idle=1), None, (), None, T0,
                                  unschedulable=late))
    assert short["Ready"] == (False, "RunnersMissing")
    since = {"conditions": [{"type": "Ready", "status": "False",
                             "reason": "RunnersUnschedulable",
                             "lastTransitionTime": format_time(T0)}]}
    stuck = by_type(st.conditions(counts(3, pending=2, idle=1), None, (), since,
                                  T0 + st.STALLED_AFTER, unschedulable=late))
    assert stuck["Stalled"] == (True, "RunnersUnschedulable")
    assert not stuck["Reconciling"][0]


def test_conditions_and_status_carry_the_observed_generation() -> None:
    new = st.build(None, counts(1, idle=1), st.conditions(counts(1, idle=1), None, (), None, T0),
                   T0, generation=7)
    assert new["observedGeneration"] == 7
    assert {c["observedGeneration"] for c in new["conditions"]} == {7}


# -- a count written by hand: said where a person looks, never acted on --------------------------
LOWERED = ("spec.replicas 3 is not acted on as a write: patch 12 (effectiveTime 2026-11-23T09:00:00Z) was "
           "applied with 5, and a count written by hand that keeps spec.patchID and "
           "spec.effectiveTime is no new write: no runner is removed for it (those above 3 go "
           "as their jobs end); write it with spec.patchID: 0 to remove the idle ones now "
           "(never a busy one)")
RAISED = ("spec.replicas 8 is not acted on as a write: patch 12 (effectiveTime 2026-11-23T09:00:00Z) was "
          "applied with 5, and a count written by hand that keeps spec.patchID and "
          "spec.effectiveTime is no new write: only slots with no runner at all get one, not "
          "those finished runners hold until the next write; write it with spec.patchID: 0 (or "
          "a new patch ID)")


@pytest.mark.parametrize(("spec", "applied", "said"), [
    pytest.param(Spec(3, 12, T0), Write(12, T0, 5), LOWERED, id="lowered-by-hand"),
    pytest.param(Spec(8, 12, T0), Write(12, T0, 5), RAISED, id="raised-by-hand"),
    pytest.param(Spec(3, 12, None), Write(12, None, 5), LOWERED.replace(
        " (effectiveTime 2026-11-23T09:00:00Z)", ""), id="a-spec-without-times"),
    pytest.param(Spec(5, 12, T0), Write(12, T0, 5), "", id="the-count-applied"),
    pytest.param(Spec(3, 13, T0), Write(12, T0, 5), "", id="a-new-patch-is-acted-on"),
    pytest.param(Spec(3, 12, T0 + timedelta(seconds=1)), Write(12, T0, 5), "",
                 id="a-new-effective-time-is-acted-on"),
    pytest.param(Spec(3, 0, T0), Write(0, T0, 5), "", id="patch-0-is-acted-on"),
    pytest.param(Spec(3, 12, T0), None, "", id="no-record"),
    pytest.param(Spec(3, 12, T0), Write(12, T0), "", id="a-record-of-an-older-controller"),
])
def test_a_count_written_by_hand_is_said(spec: Spec, applied: Write | None, said: str) -> None:
    assert st.unapplied(spec, applied) == said


@settings(max_examples=200, deadline=None)
@given(previous=hs.integers(0, PATCH_ID_MAX), applied=hs.integers(0, 10000),
       replicas=hs.integers(0, 10000), force=hs.booleans(), seconds=hs.integers(0, 10**6),
       created=hs.booleans())
def test_gitscales_own_writes_never_say_it(previous: int, applied: int, replicas: int,
                                           force: bool, seconds: int, created: bool) -> None:
    # Each write gitscale makes is the next patch ID (or 0) at a new effectiveTime: the gate
    # opens, so the count is not "written by hand" — neither before its pass nor after it
    # (recorded, whether or not all its runners were made).
    last = Write(previous, T0, applied)
    spec = Spec(replicas, 0 if force else next_patch_id(previous),
                T0 + timedelta(seconds=seconds))
    assert st.unapplied(spec, last) == ""
    assert st.unapplied(spec, record(spec, last, created)) == ""


def test_ready_stays_true_and_says_the_count_not_applied() -> None:
    conds = st.conditions(counts(3, idle=5), None, (), None, T0, unapplied=LOWERED)
    ready = conds[0]
    assert (ready.type, ready.status, ready.reason) == ("Ready", True, "Reconciled")
    assert ready.message == ("5 of 3 runner(s): 0 pending, 5 idle, 0 busy; the surplus goes on "
                             "the next patch-0 write (never a busy runner); " + LOWERED)
    # A long message of a problem is cut, never the notice (the Event is keyed on it).
    problem = st.Problem("CreateFailed", "webhook said: " + "no " * 500)
    short = st.conditions(counts(8, idle=5), problem, (), None, T0, unapplied=RAISED)[0]
    assert not short.status and len(short.message) <= 1000 and short.message.endswith(RAISED)


def test_the_status_keeps_the_count_applied() -> None:
    conds = st.conditions(counts(3, idle=3), None, (), None, T0)
    new = st.build(None, counts(3, idle=3), conds, T0, applied=Write(12, T0, 3))
    assert (new["appliedPatchID"], new["appliedReplicas"]) == (12, 3)
    older = st.build(new, counts(3, idle=3), conds, T0, applied=Write(12, T0))
    assert "appliedReplicas" not in older  # (unknown: no count to compare a hand edit with)
    assert st.build(new, None, conds, T0)["appliedReplicas"] == 3  # kept when not recorded


def _kstatus(obj: dict[str, Any]) -> str:
    """kstatus' generic rules for a custom resource (what Flux's health checks compute)."""
    if obj["metadata"].get("deletionTimestamp"):
        return "Terminating"
    status = obj.get("status") or {}
    if "observedGeneration" in status and status["observedGeneration"] != obj["metadata"][
            "generation"]:
        return "InProgress"
    for cond in status.get("conditions") or []:
        if cond["type"] == "Reconciling" and cond["status"] == "True":
            return "InProgress"
        if cond["type"] == "Stalled" and cond["status"] == "True":
            return "Failed"
    return "Current"


def test_kstatus_follows_a_set_from_written_to_short_to_ready(harness: Harness) -> None:
    harness.write("rs", 4, 1)
    obj = harness.api.get_object("runnersets", "rs", NS)
    assert obj is not None and _kstatus(obj) == "Current"  # no status yet: nothing to wait on
    harness.api.inject_error("create", "pods", times=2, skip=1)  # (the first is a dry run)
    harness.sync("rs")
    obj = harness.api.get_object("runnersets", "rs", NS)
    assert obj is not None and _kstatus(obj) == "InProgress"
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    harness.clock.advance(10)  # (refused creations are tried again after 10 s)
    harness.write("rs", 5, 2)  # a new generation the controller has not seen yet
    obj = harness.api.get_object("runnersets", "rs", NS)
    assert obj is not None and _kstatus(obj) == "InProgress"
    assert obj["status"]["observedGeneration"] < obj["metadata"]["generation"]
    harness.sync("rs")
    obj = harness.api.get_object("runnersets", "rs", NS)
    assert obj is not None and _kstatus(obj) == "Current"
    assert obj["status"]["replicas"] == 5
    # A runner deleted from outside while the write is applied (a drained node): replaced in
    # the next pass, with no new write; the set stays Current.
    victim = harness.names("rs")[0]
    harness.api.store.delete(harness.api.registry.resolve("pods"), NS, victim, {})
    harness.sync("rs")
    assert victim not in harness.names("rs") and len(harness.names("rs")) == 5
    ready = next(c for c in harness.status("rs")["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Reconciled"), ready
    assert _kstatus(harness.api.get_object("runnersets", "rs", NS) or {}) == "Current"
    harness.clock.advance(10)
    harness.write("rs", 5, 3)
    harness.sync("rs")
    assert _kstatus(harness.api.get_object("runnersets", "rs", NS) or {}) == "Current"


@pytest.mark.parametrize(("error", "reason"), [
    pytest.param(CredentialsMissing("Secret ns/s does not exist"), "CredentialsMissing",
                 id="secret-missing"),
    pytest.param(CredentialsError("https://api.github.com/... answered 401"),
                 "CredentialsRefused", id="refused"),
    pytest.param(PlatformError("https://api.github.com/... answered 503"),
                 "PlatformUnavailable", id="platform-5xx"),
    pytest.param(KubeError("read Secret ns/s: 500", status=500), "PlatformUnavailable",
                 id="secret-not-read"),
])
def test_a_configuration_error_is_not_reported_as_an_outage(error: ControllerError,
                                                             reason: str) -> None:
    assert st.platform_reason(error) == reason


def test_a_pass_that_could_not_count_says_which_patch_it_saw() -> None:
    before = st.build(None, counts(2, idle=2), st.conditions(counts(2, idle=2), None, (), None,
                                                             T0), T0, generation=1)
    problem = st.Problem("CredentialsMissing", "Secret ns/s does not exist")
    after = st.build(before, None, st.conditions(None, problem, (), before, T0), T0,
                     generation=2, observed=9)
    assert (after["observedPatchID"], after["observedGeneration"]) == (9, 2)
    assert (after["replicas"], after["idle"]) == (2, 2)  # the last counted, kept
    kept = st.build(after, None, st.conditions(None, problem, (), after, T0), T0, generation=3)
    assert kept["observedPatchID"] == 9


@pytest.mark.parametrize(("errors", "said"), [
    pytest.param(["A", "A", "B"], ["A", "B"], id="repeated"),
    pytest.param(["A", "A; creations failed 1 pass(es) in a row"],
                 ["A; creations failed 1 pass(es) in a row"], id="said-within-another"),
    pytest.param(["3 runners not replaced (a, b, c): they could not be unregistered first (A)",
                  "A"], ["3 runners not replaced (a, b, c): they could not be unregistered "
                         "first (A)"], id="the-cause-after"),
    pytest.param(["B", "A"], ["B", "A"], id="distinct-kept-in-order"),
    pytest.param(["F; GitHub is not asked again before T2 (2 failure(s) in a row)",
                  "F; GitHub is not asked again before T1 (1 failure(s) in a row) (and 1 more "
                  "runner alike); creations failed 1 pass(es) in a row"],
                 ["F; GitHub is not asked again before T2 (2 failure(s) in a row) (and 1 more "
                  "runner alike); creations failed 1 pass(es) in a row"],
                 id="one-outage-two-waits-said-once-with-the-latest"),
    pytest.param(["F; GitHub is not asked again before T1 (1 failure(s) in a row): one request "
                  "is trying it", "F; GitHub is not asked again before T1 (1 failure(s) in a "
                  "row)"], ["F; GitHub is not asked again before T1 (1 failure(s) in a row): "
                            "one request is trying it"],
                 id="the-request-trying-it-is-the-same-failure"),
    pytest.param([], [], id="none"),
])
def test_a_pass_says_each_error_once(errors: list[str], said: list[str]) -> None:
    assert st.said_once(errors) == said


def test_errors_that_differ_only_by_their_runner_are_said_once_with_how_many() -> None:
    alike = st.Alike()
    for name in ("rs-1a2b-000001", "rs-1a2b-000002", "rs-1a2b-000003"):
        alike.add(f"create pod ci/{name}: 403 Forbidden: pods \"{name}\" is forbidden: "
                  "exceeded quota", name)
    for runner_id in (7, 8):
        alike.add(f"GitHub DELETE https://api.github.com/orgs/acme/actions/runners/{runner_id} "
                  "answered 401", "rs-1a2b-00000" + str(runner_id), runner_id)
    alike.add("something else")
    assert alike.messages() == [
        'create pod ci/rs-1a2b-000001: 403 Forbidden: pods "rs-1a2b-000001" is forbidden: '
        "exceeded quota (and 2 more runners alike)",
        "GitHub DELETE https://api.github.com/orgs/acme/actions/runners/7 answered 401 (and 1 "
        "more runner alike)",
        "something else"]


def test_a_count_written_by_hand_is_said_once_while_runners_cannot_start() -> None:
    """RunnersCannotStart carries Ready's last message across the replacement of the pods that
    cannot start; that message ends with the hand-written count's notice, which the pass
    appends again: it was said twice, then three times, one more each pass — and after a
    patch-0 write (nothing to say) it still said the count was not acted on."""
    first = st.conditions(counts(3, pending=5), None, (), None, T0, not_starting=(5, SAID),
                          unapplied=LOWERED)
    assert first[0].reason == "RunnersCannotStart" and first[0].message.count(LOWERED) == 1
    status = st.build(None, counts(3, pending=5), first, T0)
    later = T0 + timedelta(minutes=5)
    successors = [Runner(f"r{i}", 12, Phase.PENDING, created_at=later) for i in range(5)]
    for n in range(1, 4):
        conds = st.conditions(counts(3, pending=5), None, (), status, later + timedelta(
            seconds=n), runners=successors, unapplied=LOWERED)
        assert conds[0].reason == "RunnersCannotStart"
        assert conds[0].message == first[0].message, f"pass {n}"
        status = st.build(status, counts(3, pending=5), conds, later)
    cleared = st.conditions(counts(3, pending=5), None, (), status, later + timedelta(minutes=1),
                            runners=successors)
    assert cleared[0].reason == "RunnersCannotStart"
    assert cleared[0].message == f"5 of 3 runner(s) cannot start: {SAID} (a pod that stays so " \
        "for 5 minutes counts as failed and is replaced; kubectl describe pod says more)"
