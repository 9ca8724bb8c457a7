"""Runner pods being deleted that still run — a Buildkite agent finishing its job within its
3600 s grace period after a scale-down, a pod deleted from outside — through the real client
against the local API server (which keeps a deleted pod until its kubelet would stop it).

Status says them apart (``terminating``): they are no runners of the set — no slot, so a
scale-up does not wait for them and a patch-0 write finds no surplus in them — and they are
never deleted twice.
"""
from __future__ import annotations

from typing import Any

from tests.controller.harness import NS, Harness, buildkite_spec

COUNTS = ("replicas", "pending", "idle", "busy", "failed", "terminating")


def counts(harness: Harness) -> dict[str, Any]:
    status = harness.status("bk")
    return {k: status.get(k) for k in COUNTS}


def running(harness: Harness) -> list[str]:
    names = harness.names("bk")
    for name in names:
        harness.api.set_pod_phase(NS, name, "Running", [
            {"name": "agent", "ready": True, "state": {"running": {}}}])
    return names


def test_agents_finishing_their_jobs_after_a_scale_down_are_terminating_not_runners(
        harness: Harness) -> None:
    harness.api.graceful_pod_deletion = True  # deleted pods stay until they stop
    harness.write("bk", 3, 0, spec=buildkite_spec())
    harness.sync("bk")
    names = running(harness)
    harness.sync("bk")
    harness.write("bk", 1, 0)  # two go; their agents finish their jobs on SIGTERM
    report = harness.sync("bk")
    assert len(report.deleted) == 2
    (kept,) = set(names) - set(report.deleted)
    leaving = sorted(report.deleted)
    assert counts(harness) == {"replicas": 1, "pending": 0, "idle": 1, "busy": 0, "failed": 0,
                               "terminating": 2}
    ready = next(c for c in harness.status("bk")["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and ready["message"].endswith(
        "; 2 more being deleted, not stopped yet (their grace period: they hold no slot)")

    # Patch 0 acts on every pass: the terminating pods are no surplus, and are not deleted
    # again; nor does a scale-up wait for them (they hold no slot).
    deletes = len(harness.pod_deletes())
    for _ in range(2):
        report = harness.sync("bk")
        assert (report.created, report.deleted) == ([], [])
    assert harness.names("bk") == [kept] and len(harness.pod_deletes()) == deletes
    harness.write("bk", 2, 1)
    assert len(harness.sync("bk").created) == 1
    assert counts(harness) == {"replicas": 2, "pending": 1, "idle": 1, "busy": 0, "failed": 0,
                               "terminating": 2}
    assert len(harness.pod_deletes()) == deletes

    # Their jobs done, their pods stop and go: nothing left to report.
    for name in leaving:
        harness.api.set_pod_phase(NS, name, "Succeeded", [{"name": "agent", "ready": False,
                                  "state": {"terminated": {"exitCode": 0}}}])
    harness.sync("bk")
    assert counts(harness)["terminating"] == 0  # stopped: not running, only not gone yet
    harness.api.finish_pod_deletions()
    harness.sync("bk")
    assert counts(harness)["terminating"] == 0 and len(harness.pod_deletes()) == deletes


def test_a_busy_pod_deleted_from_outside_is_terminating_and_its_slot_refilled(
        harness: Harness) -> None:
    """``kubectl delete pod`` of a busy agent: it finishes its job in its grace period
    (terminating), and its slot, lost from outside, gets a new runner at once."""
    harness.api.graceful_pod_deletion = True
    harness.write("bk", 1, 1, spec=buildkite_spec())
    harness.sync("bk")
    (busy,) = running(harness)
    harness.api.mutate_object("pods", busy, lambda p: p["metadata"].setdefault(
        "annotations", {}).update({"gitscale.dev/busy": "true"}), NS)
    harness.sync("bk")
    harness.controller.kube.delete_pod(NS, busy)  # (someone else's delete)
    assert len(harness.sync("bk").created) == 1
    assert counts(harness) == {"replicas": 1, "pending": 1, "idle": 0, "busy": 0, "failed": 0,
                               "terminating": 1}
    assert harness.pod_deletes() == [busy]  # the one delete, not the controller's
