"""A count written by hand (`kubectl edit`, or in the config repo while the set is paused) that
keeps `spec.patchID` and `spec.effectiveTime`: the gate stays shut, as ever, and the cluster now
says so — in Ready's message and one Normal Event per such count —, through the real
``kubernetes`` client against the local API server.

(r, p) is a spec write of replicas r and patch ID p, as gitscale writes it.
"""
from __future__ import annotations

import time
from typing import Any

from gitscale.controller.kube import Kube
from gitscale.controller.kube_config import client_for
from gitscale.controller.loop import Controller
from gitscale.controller.platforms import Platforms
from tests.controller.harness import NS, Elapsed, Harness

NOTICE = "is not acted on as a write: patch"


def by_hand(harness: Harness, replicas: int) -> None:
    """`kubectl edit runnerset rs`: spec.replicas only."""
    harness.api.mutate_object("runnersets", "rs", lambda o: o["spec"].update(replicas=replicas),
                              NS)


def ready(harness: Harness) -> dict[str, Any]:
    return next(c for c in harness.status("rs")["conditions"] if c["type"] == "Ready")


def noticed(harness: Harness) -> list[dict[str, Any]]:
    return [e for e in harness.events("rs") if e["reason"] == "ReplicasNotApplied"]


def test_a_count_written_by_hand_is_said_once_and_not_acted_on(harness: Harness) -> None:
    harness.write("rs", 3, 12)
    made = harness.sync("rs").created
    for name in made:
        harness.running(name)
    harness.sync("rs")
    assert harness.status("rs")["appliedReplicas"] == 3

    harness.clock.advance(60)
    by_hand(harness, 1)
    report = harness.sync("rs")
    assert report.deleted == [] and report.created == []  # the gate is the contract
    said = ("spec.replicas 1 is not acted on as a write: patch 12 (effectiveTime 2026-11-23T09:00:00Z) was "
            "applied with 3, and a count written by hand that keeps spec.patchID and "
            "spec.effectiveTime is no new write: no runner is removed for it")
    assert (ready(harness)["status"], ready(harness)["reason"]) == ("True", "Reconciled")
    assert said in ready(harness)["message"]
    assert harness.status("rs")["appliedReplicas"] == 3
    (event,) = noticed(harness)
    assert event["type"] == "Normal" and event["message"].startswith(said)

    harness.clock.advance(30)
    harness.sync("rs")  # not every pass
    assert [e["count"] for e in noticed(harness)] == [1]

    # A restarted controller (another replica taking over: nothing in memory) reads the count
    # applied from status, says the same in Ready, and posts no Event again.
    kube = Kube(client_for(harness.api.url))
    other = Controller(kube, clock=harness.clock, concurrency=2,
                       platforms=Platforms(kube.read_secret, list_max_age=0,
                                           clock=Elapsed(harness.clock)))
    try:
        other.start(workers=False)
        assert other.synced(5)
        version = harness.api.get_object("runnersets", "rs", NS)["metadata"]["resourceVersion"]  # type: ignore[index]
        deadline = time.monotonic() + 5
        while (other.runnersets.get(f"{NS}/rs") or {}).get("metadata", {}).get(
                "resourceVersion") != version:
            assert time.monotonic() < deadline, "the new controller's cache did not catch up"
            time.sleep(0.01)
        harness.clock.advance(30)
        again = other.reconcile(f"{NS}/rs")
        assert other.events.flush(5)
        assert again.deleted == [] and again.created == []
        assert said in ready(harness)["message"]
        assert [e["count"] for e in noticed(harness)] == [1]
    finally:
        other.stop()
        kube.close()

    # Raised by hand: a slot with no runner gets one (as a lost runner's does), and the new
    # count is said once more.
    harness.clock.advance(30)
    by_hand(harness, 4)
    assert len(harness.sync("rs").created) == 1
    assert "spec.replicas 4 is not acted on as a write: patch 12" in ready(harness)["message"]
    assert len(noticed(harness)) == 2

    # Written with patch 0, the count is applied: the notice clears, the record moves on.
    harness.clock.advance(30)
    harness.write("rs", 1, 0)
    report = harness.sync("rs")
    assert len(report.deleted) == 3 and report.created == []
    assert NOTICE not in ready(harness)["message"]
    assert harness.status("rs")["appliedReplicas"] == 1
    assert len(noticed(harness)) == 2


def test_gitscales_own_writes_never_say_it(harness: Harness) -> None:
    # Every write gitscale makes changes the patch ID or the effectiveTime (both, mostly):
    # the gate opens, and the count is applied and recorded with it.
    for replicas, patch in ((3, 1), (5, 2), (2, 3), (2, 0), (4, 1), (4, 1), (1, 2)):
        harness.clock.advance(30)
        harness.write("rs", replicas, patch)
        assert harness.sync("rs").actions.acting  # type: ignore[union-attr]
        harness.sync("rs")  # and the shut pass after it
        assert harness.status("rs")["appliedReplicas"] == replicas
        assert NOTICE not in ready(harness).get("message", "")
    assert noticed(harness) == []


def test_a_status_written_before_the_count_was_kept_says_nothing(harness: Harness) -> None:
    harness.write("rs", 3, 12)
    harness.sync("rs")
    # An older controller's status: the write applied, not with which count.
    harness.api.mutate_object("runnersets", "rs", lambda o: o["status"].pop("appliedReplicas"),
                              NS)
    by_hand(harness, 1)
    harness.sync("rs")
    assert NOTICE not in ready(harness)["message"] and noticed(harness) == []
    assert "appliedReplicas" not in harness.status("rs")  # no guess from the hand edit
    harness.clock.advance(30)
    harness.write("rs", 1, 13)  # the next write is recorded with its count
    harness.sync("rs")
    assert harness.status("rs")["appliedReplicas"] == 1
