"""Others writing while the controller acts, through the real ``kubernetes`` client against the
local API server: Argo CD or Flux applying the set while a pass reads it (a resourceVersion
conflict), a human editing the template while runners run.

(r, p) is a spec write of replicas r and patch ID p.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Iterator

import pytest

from gitscale.controller.observe import FINALIZER
from tests.controller.harness import NS, Harness, start
from tests.helpers import wait_for


def _edit_during_the_finalizer_patch(harness: Harness, edit: dict[str, Any]) -> list[str]:
    """Argo CD applies ``edit`` to the set's spec just before the controller's first write to
    it (its finalizer, conditional on the version it read) reaches the API server."""
    seen: list[str] = []

    def argo(verb: str, resource: str, query: dict[str, str]) -> None:
        if verb == "patch" and resource.startswith("runnersets") and "/" not in resource \
                and not seen:
            seen.append(resource)
            harness.api.mutate_object("runnersets", "rs", lambda o: o["spec"].update(edit), NS)

    harness.api.on_call(argo)
    return seen


def test_a_set_edited_while_a_pass_reads_it_is_acted_on_as_edited_without_an_error(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """The edit makes the finalizer's patch a 409: the pass acted on a spec that is no longer
    the set's. It stops with nothing done — no runner made for the old spec, no ApplyFailed, no
    Warning — and the next pass, on the edit, adds the finalizer and acts on the new spec."""
    caplog.set_level(logging.INFO, "gitscale.controller")
    harness.write("rs", 3, 1)
    seen = _edit_during_the_finalizer_patch(harness, {"replicas": 1, "patchID": 2})
    report = harness.sync("rs")
    assert seen == ["runnersets.gitscale.dev"]
    assert report.errors == [] and report.created == [] and report.requeue_after == 1.0
    assert harness.pods("rs") == [] and harness.github.runners == {}
    assert (harness.status("rs").get("conditions") or []) == []  # nothing said on a stale read
    report = harness.sync("rs")  # the edit came through the watch
    assert report.errors == [] and len(report.created) == 1
    obj = harness.api.get_object("runnersets", "rs", NS)
    assert obj is not None and FINALIZER in obj["metadata"]["finalizers"]
    status = harness.status("rs")
    assert (status["appliedPatchID"], status["conditions"][0]["status"]) == (2, "True")
    assert [e["type"] for e in harness.events("rs")] == ["Normal"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_spec_edits_during_every_pass_cost_no_error_and_the_set_converges(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """Argo CD applies a new write (one more replica, patch + 1) while each of 10 passes
    creates its runner: each pass's status, written on the version it read, is a 409 — no
    error, no backoff, no Warning, the pass due again in a second (the edit's watch event
    brings it sooner) — and the first pass without an edit writes the status of the last
    write. Never more runners than the write read wants."""
    caplog.set_level(logging.INFO, "gitscale.controller")
    harness.write("rs", 1, 1)
    assert len(harness.sync("rs").created) == 1
    harness.write("rs", 2, 2)
    edits: list[int] = []

    def argo(verb: str, resource: str, query: dict[str, str]) -> None:
        if (verb, resource) == ("create", "pods") and "dryRun" not in query \
                and len(edits) < 10:
            edits.append(3 + len(edits))
            harness.write("rs", edits[-1], edits[-1])

    harness.api.on_call(argo)
    harness.api.reset_calls()
    for replicas in range(2, 12):
        report = harness.sync("rs")
        assert (len(report.created), report.errors, report.error_retry) == (1, [], None)
        assert report.stale and report.requeue_after == 1.0
        assert len(harness.pods("rs")) == replicas  # what the pass read: 1 more each time
    assert len(edits) == 10
    conflicts = [line for line in harness.api.log if "/status" in line and line.endswith("409")]
    assert len(conflicts) == 10  # one per edited pass, none tried again within it
    report = harness.sync("rs")
    assert (len(report.created), report.errors, report.stale) == (1, [], False)
    obj = harness.api.get_object("runnersets", "rs", NS)
    assert obj is not None and len(harness.pods("rs")) == 12
    status = obj["status"]
    assert (status["appliedPatchID"], status["replicas"]) == (12, 12)
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    assert [c["status"] for c in status["conditions"] if c["type"] == "Ready"] == ["True"]
    assert {e["type"] for e in harness.events("rs")} == {"Normal"}
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert harness.controller.queue.failures(f"{NS}/rs") == 0


@pytest.fixture
def running() -> Iterator[Harness]:
    """The controller's own workers, each API call answered after 10 ms (a pass spans tens of
    milliseconds, so edits land inside passes)."""
    for harness in start(workers=True, resync=1.0):
        harness.api.latency = 0.01
        yield harness


def test_a_spec_edited_every_few_milliseconds_makes_no_error_loop(running: Harness) -> None:
    """Argo CD or Flux re-writing the spec every 25 ms for 1.5 s (a write a pass, and more)
    while the workers run: passes that read a version edited since stop or leave their status
    without an error — none fails, the set never backs off — and once the edits stop, the
    status is the last write's, its runners all there."""
    running.write("rs", 3, 1)
    wait_for(lambda: len(running.pods("rs")) == 3, 10)
    patch, stop = 1, time.monotonic() + 1.5
    done = threading.Event()

    def argo() -> None:
        nonlocal patch
        while time.monotonic() < stop:
            patch += 1
            running.write("rs", 3 + patch % 2, patch)  # up one, and back (no scale-down)
            time.sleep(0.025)
        done.set()

    thread = threading.Thread(target=argo)
    thread.start()
    thread.join(5)
    assert done.is_set()
    obj = wait_for(lambda: (o := running.api.get_object("runnersets", "rs", NS)) is not None
                   and (o.get("status") or {}).get("appliedPatchID") == patch
                   and o["status"].get("observedGeneration") == o["metadata"]["generation"]
                   and o, 10)
    reports = [r for r in running.controller.reports if r.key == f"{NS}/rs"]
    assert any(r.stale for r in reports)  # (the edits did land inside passes)
    assert [r.errors for r in reports if r.errors or r.error_retry is not None] == []
    assert running.controller.queue.failures(f"{NS}/rs") == 0
    assert len(running.pods("rs")) == 4 and obj["status"]["replicas"] == 4
    assert {e["type"] for e in running.events("rs")} == {"Normal"}


def test_a_write_without_an_effective_time_is_recorded_once_not_patched_every_pass(
        harness: Harness) -> None:
    """A human writes a patch ID by hand, without an effectiveTime (the field is nullable):
    the status must lose the appliedEffectiveTime of the write before (a merge patch keeps
    what it does not name), or every pass after finds it changed and patches it again."""
    harness.write("rs", 1, 3)
    harness.sync("rs")
    assert harness.status("rs")["appliedEffectiveTime"] == "2026-11-23T09:00:00Z"

    def by_hand(obj: dict[str, Any]) -> None:
        obj["spec"].pop("effectiveTime")
        obj["spec"]["patchID"] = 4
    harness.api.mutate_object("runnersets", "rs", by_hand, NS)
    harness.api.reset_calls()
    harness.sync("rs")
    status = harness.status("rs")
    assert status["appliedPatchID"] == 4 and "appliedEffectiveTime" not in status
    assert harness.api.call_count("patch", "runnersets/status") == 1
    for _ in range(3):
        harness.clock.advance(60)
        harness.sync("rs")
    assert harness.api.call_count("patch", "runnersets/status") == 1


def test_pods_deleted_from_outside_while_they_terminate_are_replaced_once_and_swept(
        harness: Harness) -> None:
    """A clean-up job (or a drain) deletes a pending, an idle and a busy runner's pods, which
    take their grace period to go (Terminating): each slot gets one new runner at once — the
    set is `replicas` runners that are not being deleted, never more — and the registrations
    the old pods leave are swept once GitHub has them offline and idle, however many passes
    run meanwhile."""
    harness.api.graceful_pod_deletion = True
    harness.write("rs", 4, 1)
    harness.sync("rs")
    pending, idle, busy, kept = harness.names("rs")
    harness.running(idle)
    harness.running(busy, busy=True)
    harness.running(kept)
    harness.sync("rs")
    pods = harness.api.registry.resolve("pods")
    for name in (pending, idle, busy):
        harness.api.store.delete(pods, NS, name, {})
    report = harness.sync("rs")
    assert len(report.created) == 3 and report.deleted == []
    for _ in range(3):  # more passes while they terminate: nothing more
        harness.clock.advance(10)
        assert harness.sync("rs").created == []
    live = harness.names("rs")
    assert len(live) == 4 and kept in live and not {pending, idle, busy} & set(live)
    assert harness.status("rs")["replicas"] == 4
    harness.api.finish_pod_deletions()  # the kubelet is done with them
    for name in (idle, busy):  # their runners went offline with their pods
        harness.github.set_state(name, online=False, busy=False)
    harness.clock.advance(301)  # the next look for leftovers: suspected ...
    assert harness.sync("rs").leftovers == []
    harness.clock.advance(61)  # ... and removed after the grace
    assert sorted(harness.sync("rs").leftovers) == sorted((pending, idle, busy))
    assert {r.name for r in harness.github.runners.values()} == set(live)
    assert len(harness.names("rs")) == 4


def test_runners_made_for_labels_the_set_no_longer_has_are_replaced_unless_busy(
        harness: Harness) -> None:
    """A human changes `spec.github.labels` while runners run. Runners registered with the
    old labels can take none of the jobs the set is now scaled for (GitHub gives a job only to
    a runner with all its labels): left, they would hold their slots — a patch > 0 never
    scales down — while the jobs they were made for wait. Each one that is pending or idle is
    unregistered and replaced at once by a runner with the new labels, with no new write; a
    busy one finishes its job; one that took a job just now (422) is kept and not replaced;
    never more runners than replicas that can take a job."""
    harness.write("rs", 5, 3)
    harness.sync("rs")
    names = harness.names("rs")
    pending, idle, busy, racing, other = names
    for name in (idle, racing, other):
        harness.running(name)
    harness.running(busy, busy=True)
    harness.sync("rs")
    assert len({harness.pod(n)["metadata"]["annotations"]["gitscale.dev/matching"]
                for n in names}) == 1
    harness.api.mutate_object("runnersets", "rs", lambda o: o["spec"]["github"].update(
        labels=["linux", "x64"]), NS)
    harness.github.refuse_delete(racing)  # it takes a job between the list and the DELETE

    report = harness.sync("rs")
    assert sorted(report.deleted) == sorted((pending, idle, other))
    assert report.busy == [racing] and len(report.created) == 3 and report.errors == []
    live = harness.names("rs")
    assert sorted(live) == sorted([busy, racing, *report.created])
    for name in (pending, idle, other):
        assert harness.runner(name) is None  # unregistered before their successors existed
    for name in report.created:
        runner = harness.runner(name)
        assert runner is not None and sorted(runner.labels) == ["linux", "x64"]
        assert harness.pod(name)["metadata"]["labels"]["gitscale.dev/patch-id"] == "3"
    status = harness.status("rs")
    assert (status["replicas"], status["busy"], status["appliedPatchID"]) == (5, 2, 3)
    events = {e["reason"]: e["message"] for e in harness.events("rs")}
    assert "3 outdated (made for other job settings)" in events["RunnersDeleted"]

    # The new runners are the set's: nothing more happens to them. The outdated runners that
    # took jobs finish them, and their slots follow the usual rule (refilled on the next write).
    for name in report.created:
        harness.running(name)
    harness.clock.advance(31)
    harness.stop(racing)
    harness.stop(busy)
    report = harness.sync("rs")
    assert (report.created, report.deleted, report.errors) == ([], [], [])
    harness.write("rs", 5, 4)
    report = harness.sync("rs")
    assert sorted(report.deleted) == sorted((racing, busy)) and len(report.created) == 2
    assert all(sorted(r.labels) == ["linux", "x64"] for r in harness.github.runners.values())


def test_buildkite_agents_of_another_queue_are_replaced_after_their_successors(
        harness: Harness) -> None:
    """`spec.buildkite.queue` changed: idle agents of the old queue are replaced (their pods
    deleted once their successors exist: SIGTERM, on which an agent that just took a job
    finishes it); an agent the pod says is busy finishes its job first."""
    from tests.controller.harness import buildkite_spec
    harness.write("bk", 3, 1, spec=buildkite_spec())
    harness.sync("bk")
    idle, pending, busy = harness.names("bk")
    harness.api.set_pod_phase(NS, idle, "Running")
    harness.api.set_pod_phase(NS, busy, "Running")
    harness.api.mutate_object("pods", busy, lambda o: o["metadata"].setdefault(
        "annotations", {}).update({"gitscale.dev/busy": "true"}), NS)
    harness.api.mutate_object("runnersets", "bk", lambda o: o["spec"]["buildkite"].update(
        queue="linux-large"), NS)
    report = harness.sync("bk")
    assert sorted(report.deleted) == sorted((idle, pending)) and len(report.created) == 2
    assert busy in harness.names("bk") and len(harness.names("bk")) == 3
    for name in report.created:
        env = {e["name"]: e.get("value") for e in
               harness.pod(name)["spec"]["containers"][0]["env"]}
        assert env["BUILDKITE_AGENT_TAGS"].startswith("queue=linux-large")
    assert harness.sync("bk").created == []  # settled
