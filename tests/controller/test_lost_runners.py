"""Runner pods deleted from outside (a drained or preempted node, an eviction, `kubectl delete
pod`), through the real ``kubernetes`` client against the local API server: their slots are
refilled with no new write; the slot of a runner that finished its job is not.

(r, p) is a spec write of replicas r and patch ID p.
"""
from __future__ import annotations

from tests.controller.harness import NS, Harness


def test_a_drained_nodes_runners_are_replaced_without_a_new_write(harness: Harness) -> None:
    harness.write("rs", 3, 1)
    assert len(harness.sync("rs").created) == 3
    idle, busy, done = harness.names("rs")
    harness.running(idle, busy=False)
    harness.running(busy, busy=True)
    harness.sync("rs")
    harness.clock.advance(60)
    harness.stop(done)  # finished its job after the write: its slot waits for the next write
    assert harness.sync("rs").created == []

    pods = harness.api.registry.resolve("pods")
    for name in (idle, busy):  # the node they ran on is drained
        harness.api.store.delete(pods, NS, name, {})
    report = harness.sync("rs")

    assert len(report.created) == 2 and report.deleted == []
    names = set(harness.names("rs"))
    assert done in names and not names & {idle, busy} and len(names) == 3
    assert {harness.pod(n)["metadata"]["labels"]["gitscale.dev/patch-id"]
            for n in report.created} == {"1"}
    assert harness.status("rs")["appliedPatchID"] == 1  # no new write was needed
    # and nothing more on the next passes: the set is whole again
    harness.clock.advance(30)
    assert harness.sync("rs").created == []
