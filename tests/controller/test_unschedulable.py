"""Runners the scheduler cannot place, against the local API server: the test plays
kube-scheduler (``PodScheduled=False, Unschedulable``) and the cluster autoscaler (a node
added: the pods scheduled). They are reported — Ready False after a grace, a Warning Event,
a gauge — and never replaced or removed for it."""
from __future__ import annotations

from typing import Any

import pytest

from gitscale.controller import status as st
from tests.controller.harness import NS, TOKEN, Harness
from tests.controller.test_metrics import metrics
from tests.test_metrics import value

GRACE = st.UNSCHEDULABLE_GRACE.total_seconds()
CPU = "0/3 nodes are available: 3 Insufficient cpu."
PER_SET = {"namespace": NS, "set": "rs"}


def ready(harness: Harness, name: str = "rs") -> dict[str, Any]:
    return dict(st.ready_of(harness.status(name)))


def warnings(harness: Harness, reason: str) -> list[dict[str, Any]]:
    return [e for e in harness.events("rs") if e["type"] == "Warning" and e["reason"] == reason]


def test_unschedulable_runners_are_reported_not_replaced(harness: Harness, port: int) -> None:
    harness.write("rs", 5, 0)
    harness.sync("rs")
    pods = harness.names("rs")
    for pod in pods:
        harness.unschedulable(pod, CPU)
    within = harness.sync("rs")  # just unschedulable: within the grace, nothing said yet
    assert ready(harness)["status"] == "True"
    assert value(metrics(port), "gitscale_controller_runners_unschedulable", **PER_SET) == 5
    # The next pass is due when the grace runs out (an unschedulable pod may not change again).
    assert within.requeue_after == pytest.approx(GRACE)

    harness.clock.advance(GRACE)
    late = harness.sync("rs")
    cond = ready(harness)
    assert (cond["status"], cond["reason"]) == ("False", "RunnersUnschedulable")
    assert cond["message"] == (f"5 of 5 runner(s) cannot be scheduled: {CPU} (they stay "
                               "pending, not replaced, until a node fits them)")
    reconciling = st.condition_of(harness.status("rs"), st.RECONCILING)
    assert reconciling["status"] == "True"
    (event,) = warnings(harness, "RunnersUnschedulable")
    assert event["message"] == cond["message"]
    samples = metrics(port)
    assert value(samples, "gitscale_controller_runners_unschedulable", **PER_SET) == 5
    assert value(samples, "gitscale_controller_runners_missing", **PER_SET) == 0
    assert harness.status("rs")["pending"] == 5
    # Not replaced, not removed: a new pod would wait for the same node.
    assert harness.names("rs") == pods and not late.created and not late.deleted
    assert late.requeue_after is None

    harness.clock.advance(30)  # the same warning next pass: the same Event, counted
    harness.sync("rs")
    (event,) = warnings(harness, "RunnersUnschedulable")
    assert event["count"] == 2

    for pod in pods:  # the autoscaler added a node
        harness.scheduled(pod)
    harness.sync("rs")
    cond = ready(harness)
    assert (cond["status"], cond["reason"]) == ("True", "Reconciled")
    assert any(e["type"] == "Normal" and e["reason"] == "Reconciled"
               for e in harness.events("rs"))
    assert value(metrics(port), "gitscale_controller_runners_unschedulable", **PER_SET) == 0
    assert harness.names("rs") == pods


def test_a_brief_unschedulable_does_not_flip_ready(harness: Harness, port: int) -> None:
    harness.write("rs", 2, 0)
    harness.sync("rs")
    first, second = harness.names("rs")
    harness.unschedulable(first, CPU)
    harness.clock.advance(GRACE - 10)
    harness.unschedulable(second, CPU)  # a second one, later
    harness.sync("rs")
    assert ready(harness)["status"] == "True"
    harness.scheduled(first)  # placed just before its grace ran out
    harness.clock.advance(10)
    report = harness.sync("rs")
    assert ready(harness)["status"] == "True"
    assert value(metrics(port), "gitscale_controller_runners_unschedulable", **PER_SET) == 1
    assert report.requeue_after == pytest.approx(GRACE - 10)  # the second's grace
    harness.scheduled(second)
    harness.clock.advance(GRACE)
    harness.sync("rs")
    assert ready(harness)["status"] == "True"
    assert not warnings(harness, "RunnersUnschedulable")
    assert value(metrics(port), "gitscale_controller_runners_unschedulable", **PER_SET) == 0


def test_counted_from_the_conditions_transition_not_the_pass(harness: Harness) -> None:
    """A controller that starts (or takes over) while pods have long been unschedulable
    says so on its first pass: the grace runs from the condition's lastTransitionTime."""
    harness.write("rs", 3, 0)
    harness.sync("rs")
    pods = harness.names("rs")
    harness.unschedulable(pods[0], "0/3 nodes are available: 3 node(s) didn't match Pod's "
                          "node affinity/selector.",
                          since=harness.clock.now)
    harness.clock.advance(GRACE + 60)
    harness.unschedulable(pods[1], CPU)  # within its grace: not counted in Ready's message
    harness.sync("rs")
    cond = ready(harness)
    assert cond["reason"] == "RunnersUnschedulable"
    assert cond["message"].startswith("1 of 3 runner(s) cannot be scheduled: 0/3 nodes are "
                                      "available: 3 node(s) didn't match Pod's node "
                                      "affinity/selector.")


def test_stalled_once_unschedulable_past_the_progress_deadline(harness: Harness) -> None:
    harness.write("rs", 1, 0)
    harness.sync("rs")
    (pod,) = harness.names("rs")
    harness.unschedulable(pod, CPU)
    harness.clock.advance(GRACE)
    harness.sync("rs")
    assert st.condition_of(harness.status("rs"), st.STALLED)["status"] == "False"
    harness.clock.advance(st.STALLED_AFTER.total_seconds())
    harness.sync("rs")
    stalled = st.condition_of(harness.status("rs"), st.STALLED)
    assert (stalled["status"], stalled["reason"]) == ("True", "RunnersUnschedulable")
    assert stalled["message"].startswith("no progress for 5m: 1 of 1 runner(s) cannot be "
                                         "scheduled")


def test_a_scale_down_removes_them_and_they_stop_counting(harness: Harness,
                                                           port: int) -> None:
    harness.write("rs", 3, 0)
    harness.sync("rs")
    pods = harness.names("rs")
    for pod in pods:
        harness.unschedulable(pod, CPU)
    harness.clock.advance(GRACE)
    harness.sync("rs")
    assert ready(harness)["message"].startswith("3 of 3 runner(s) cannot be scheduled")
    harness.write("rs", 1, 0)  # unschedulable pending runners go (they can take no job)
    report = harness.sync("rs")
    assert len(report.deleted) == 2 and set(report.deleted) < set(pods)
    assert ready(harness)["message"].startswith("1 of 1 runner(s) cannot be scheduled")
    assert value(metrics(port), "gitscale_controller_runners_unschedulable", **PER_SET) == 1
    harness.write("rs", 0, 0)
    harness.sync("rs")
    assert (ready(harness)["status"], ready(harness)["reason"]) == ("True", "Reconciled")
    assert value(metrics(port), "gitscale_controller_runners_unschedulable", **PER_SET) == 0


def test_a_scale_down_keeps_an_idle_runner_over_an_unschedulable_one(harness: Harness) -> None:
    """The idle runner can take the next job; the unschedulable one cannot until a node
    comes, so a patch-0 scale-down removes it first (it goes with the failed runners, before
    idle ones); a pending runner the scheduler has placed still goes last."""
    harness.write("rs", 3, 0)
    harness.sync("rs")
    idle, placed, stuck = harness.names("rs")
    harness.running(idle)
    harness.scheduled(placed)
    harness.unschedulable(stuck, CPU)
    harness.sync("rs")
    harness.write("rs", 2, 0)
    assert harness.sync("rs").deleted == [stuck]
    harness.write("rs", 1, 0)  # then idle before a pending runner the scheduler has placed
    assert harness.sync("rs").deleted == [idle]
    assert harness.names("rs") == [placed]


def test_a_secret_in_the_schedulers_message_is_masked(harness: Harness) -> None:
    """The message quotes what the cluster says (a node label, a volume name): masked as every
    condition's message is."""
    harness.write("rs", 1, 0)
    harness.sync("rs")
    (pod,) = harness.names("rs")
    harness.unschedulable(pod, f"0/1 nodes are available: 1 node(s) didn't match Pod's node "
                          f"affinity/selector (token={TOKEN}).")
    harness.clock.advance(GRACE)
    harness.sync("rs")
    for said in (ready(harness)["message"], warnings(harness, "RunnersUnschedulable")[0][
            "message"]):
        assert TOKEN not in said and "didn't match Pod's node affinity" in said
