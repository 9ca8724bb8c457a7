"""Under saturation, through the real ``kubernetes`` client against the local API server and the
GitHub fake: the backlog's refills without a new write, and the scale-down that moves on to the
next idle runner when one answers 422.

(r, p, backlog b) is a spec write of replicas r, patch ID p and ``spec.backlog`` b.
"""
from __future__ import annotations

import logging

import pytest

from gitscale.timeutil import format_time
from tests.controller.harness import NS, Harness


def busy_pair(harness: Harness) -> list[str]:
    """(2, 1, backlog 2) applied: two runners, both running a job."""
    harness.write("rs", 2, 1, backlog=2)
    assert len(harness.sync("rs").created) == 2
    names = harness.names("rs")
    for name in names:
        harness.running(name, busy=True)
    harness.sync("rs")
    assert harness.status("rs")["appliedPatchID"] == 1
    return names


def test_the_backlog_refills_finished_slots_without_a_new_write(harness: Harness) -> None:
    first, second = busy_pair(harness)
    harness.clock.advance(60)
    harness.stop(first)
    report = harness.sync("rs")
    (refill,) = report.created
    assert report.deleted == [first]  # the finished runner gave its slot to the new one
    assert harness.pod(refill)["metadata"]["labels"]["gitscale.dev/patch-id"] == "1"
    status = harness.status("rs")
    assert (status["refilled"], status["refilledPatchID"]) == (1, 1)
    assert status["refilledEffectiveTime"] == status["appliedEffectiveTime"]
    harness.running(refill, busy=True)
    harness.clock.advance(60)
    harness.stop(second)
    assert len(harness.sync("rs").created) == 1
    assert harness.status("rs")["refilled"] == 2

    # the backlog is used up: the next finished runner holds its slot until a new write
    harness.clock.advance(60)
    harness.stop(refill)
    report = harness.sync("rs")
    assert (report.created, report.deleted) == ([], [])
    assert refill in harness.names("rs") and len(harness.names("rs")) == 2
    ready = next(c for c in harness.status("rs")["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True" and "1 finished" in ready["message"]

    # a new write applies as before (its missing runner created), and its backlog counts
    # from 0: the slot of a runner that finishes after it is refilled at once
    harness.clock.advance(10)
    harness.write("rs", 2, 2, backlog=1)
    report = harness.sync("rs")
    assert report.deleted == [refill] and len(report.created) == 1
    (last,) = report.created
    harness.running(last, busy=True)
    harness.clock.advance(60)
    harness.stop(last)
    assert len(harness.sync("rs").created) == 1
    status = harness.status("rs")
    assert (status["refilled"], status["refilledPatchID"]) == (1, 2)


def test_no_refill_beyond_replicas(harness: Harness) -> None:
    first, second = busy_pair(harness)
    harness.clock.advance(30)
    harness.write("rs", 1, 2, backlog=5)  # fewer replicas: the finished slot is not wanted
    harness.sync("rs")
    harness.clock.advance(30)
    harness.stop(first)
    report = harness.sync("rs")
    assert report.created == [] and report.deleted == [first]
    assert harness.names("rs") == [second]
    assert "refilled" not in harness.status("rs")


def test_a_refill_that_cannot_be_created_keeps_its_marker_and_its_place(
        harness: Harness) -> None:
    first, _ = busy_pair(harness)
    harness.clock.advance(60)
    harness.stop(first)
    harness.api.inject_error("create", "pods", code=403, reason="Forbidden",
                             message="exceeded quota: pods")
    report = harness.sync("rs")
    assert report.created == [] and report.deleted == []
    assert first in harness.names("rs")  # still marks its slot
    assert harness.status("rs")["refilled"] == 0  # the refill was given back
    harness.clock.advance(10)
    report = harness.sync("rs")  # the quota was raised
    assert len(report.created) == 1 and report.deleted == [first]
    assert harness.status("rs")["refilled"] == 1


def test_an_unregister_422_gives_way_to_the_next_idle_runner_in_the_same_pass(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    harness.write("rs", 3, 0)
    harness.sync("rs")
    for name in harness.names("rs"):
        harness.running(name)  # GitHub's list says all three are idle ...
    oldest, *_ = order = sorted(harness.names("rs"))  # (created in the same second: by name)
    harness.github.refuse_delete(oldest)  # ... but the first took a job just before the DELETE
    harness.write("rs", 1, 0)  # a surplus of two
    caplog.set_level(logging.INFO, "gitscale.controller")
    report = harness.sync("rs")
    assert report.busy == [oldest]
    assert sorted(report.deleted) == sorted(order[1:])  # the third went in its place
    assert harness.names("rs") == [oldest]
    assert harness.github.count("DELETE") == 3
    status = harness.status("rs")
    assert (status["replicas"], status["busy"], status["idle"]) == (1, 1, 0)
    assert sum("still running a job" in r.getMessage() for r in caplog.records) == 1


def test_the_422_replacements_stop_at_the_surplus(harness: Harness) -> None:
    harness.write("rs", 4, 0)
    harness.sync("rs")
    for name in harness.names("rs"):
        harness.running(name)
    first, second, third, fourth = sorted(harness.names("rs"))
    harness.github.refuse_delete(first)
    harness.github.refuse_delete(second)
    harness.write("rs", 3, 0)  # a surplus of one
    report = harness.sync("rs")
    # first answered 422, second took its place and answered 422 too, then third went: one
    # removed, as the surplus says; fourth is never asked
    assert report.busy == [first, second] and report.deleted == [third]
    assert harness.names("rs") == [first, second, fourth]
    assert harness.github.count("DELETE") == 3


def test_a_422_gives_way_to_an_idle_runner_not_to_a_failed_one_that_goes_anyway(
        harness: Harness) -> None:
    """Patch 0, a surplus of one: the first of the order is a runner failed by its
    registration timeout (its pod runs) that took a job after all (422); the next is a failed
    runner past its backoff, replaced and removed in this pass anyway. An idle runner goes in
    the first one's place, so the set ends at ``replicas`` (it stayed one above, an idle
    runner, until the next pass)."""
    harness.write("rs", 4, 0)
    harness.sync("rs")
    silent, crashed, idle1, idle2 = sorted(harness.names("rs"))
    harness.api.set_pod_phase(NS, silent, "Running", [
        {"name": "runner", "ready": True,
         "state": {"running": {"startedAt": format_time(harness.clock.now)}}}])
    for name in (crashed, idle1, idle2):
        harness.running(name)
    harness.sync("rs")
    harness.github.refuse_delete(silent)  # it took a job the list does not show yet
    harness.clock.advance(10 * 60 + 1)  # silent failed at 10 min, crashed 1 s later
    harness.stop(crashed, exit_code=1)
    harness.write("rs", 3, 0)
    report = harness.sync("rs")
    (successor,) = report.created  # crashed's
    assert report.busy == [silent]
    assert sorted(report.deleted) == sorted([crashed, idle1])
    assert harness.names("rs") == sorted([silent, idle2, successor])
    status = harness.status("rs")
    assert (status["replicas"], status["busy"]) == (3, 1)


def test_refills_are_counted_in_status_before_their_runners_exist(harness: Harness) -> None:
    """Even in a pass that also completes a write applied in part (Ready already False, so the
    "Creating" status is not written again): the count comes first, then the pods."""
    harness.write("rs", 3, 1, backlog=2)
    harness.api.inject_error("create", "pods", code=500, skip=1)  # (the first is a dry run)
    assert len(harness.sync("rs").created) == 2  # one refused: the write is not applied
    assert next(c for c in harness.status("rs")["conditions"]
                if c["type"] == "Ready")["status"] == "False"
    first, second = harness.names("rs")
    for name in (first, second):
        harness.running(name, busy=True)
    harness.clock.advance(60)
    harness.stop(first)
    harness.catch_up()
    harness.api.reset_calls()
    report = harness.sync("rs")
    assert len(report.created) == 2 and report.deleted == [first]  # the missing one, a refill
    log = [line for line in harness.api.log if "/pods" in line or "/status" in line]
    assert "/runnersets/rs/status" in log[0] and log[1].startswith("POST") and "/pods" in log[1]
    status = harness.status("rs")
    assert (status["refilled"], status["refilledPatchID"], status["appliedPatchID"]) == (1, 1, 1)


def test_no_refill_when_its_count_could_not_be_written_first(harness: Harness) -> None:
    """The count is written before the refills are made, so that a pass cut short never
    refills a slot twice; when that write fails, the refills wait for a pass that can count
    them (the marker keeps its slot, the write stays not applied)."""
    first, _ = busy_pair(harness)
    harness.clock.advance(60)
    harness.stop(first)
    harness.catch_up()
    harness.api.inject_error("patch", "runnersets/status", code=500)
    report = harness.sync("rs")
    assert report.created == [] and report.deleted == []
    assert any("refill(s) not made" in e for e in report.errors)
    assert first in harness.names("rs") and harness.status("rs").get("refilled", 0) == 0
    harness.clock.advance(10)
    report = harness.sync("rs")
    assert len(report.created) == 1 and report.deleted == [first]
    assert harness.status("rs")["refilled"] == 1


def _counted_meanwhile(harness: Harness, refilled: int) -> list[int]:
    """Another replica — the new leader, while this one lost the Lease without noticing yet
    (``deposed`` not set), or this one's own pass that its cache does not show yet — counts
    ``refilled`` refills of write 1 just before this pass's first status write reaches the API
    server: the pass computed its status from an older version of the set."""
    seen: list[int] = []

    def leader(verb: str, resource: str, query: dict[str, str]) -> None:
        if verb == "patch" and resource == "runnersets.gitscale.dev/status" and not seen:
            seen.append(harness.api.resource_version)
            harness.api.mutate_object("runnersets", "rs", lambda o: o["status"].update(
                refilled=refilled, refilledPatchID=1,
                refilledEffectiveTime=o["status"]["appliedEffectiveTime"]), NS)

    harness.api.on_call(leader)
    return seen


def test_a_stale_pass_whose_refill_count_conflicts_makes_no_refill(harness: Harness) -> None:
    """The refill count is written on the version the pass read: over a count written since
    (2, by the new leader, which made both refills the backlog allows), this pass's (1, from
    the 0 it read) is a 409, not a roll-back. The pass stops — no runner, no error, no Event,
    its finished runner left as it is — and runs again in a second; on the new version the
    backlog is used up, so the slot is never refilled a third time."""
    first, second = busy_pair(harness)
    harness.clock.advance(60)
    harness.stop(first)
    harness.catch_up()
    events = len(harness.events("rs"))
    seen = _counted_meanwhile(harness, refilled=2)
    report = harness.sync("rs")
    assert seen and (report.created, report.deleted, report.errors) == ([], [], [])
    assert harness.names("rs") == sorted((first, second))
    assert harness.github.count("POST") == 2  # (the two runners of the write: no registration)
    status = harness.status("rs")
    assert (status["refilled"], status["refilledPatchID"]) == (2, 1)
    assert len(harness.events("rs")) == events
    assert report.stale and report.requeue_after == 1.0 and report.error_retry is None

    report = harness.sync("rs")  # the edit came through the watch: the count is 2 of 2
    assert (report.created, report.errors, report.stale) == ([], [], False)
    assert harness.status("rs")["refilled"] == 2 and first in harness.names("rs")


def test_the_end_of_pass_status_of_a_stale_pass_does_not_roll_the_count_back(
        harness: Harness) -> None:
    """A pass with nothing to refill still writes its whole status (its counts changed), the
    refill count it read included: on a version written since, that is a 409 and the count
    written meanwhile stays; the next pass writes the counts."""
    first, second = busy_pair(harness)
    harness.clock.advance(60)
    harness.stop(first)
    (refill,) = harness.sync("rs").created
    assert harness.status("rs")["refilled"] == 1
    harness.running(refill)  # its counts change: idle 1
    harness.catch_up()
    seen = _counted_meanwhile(harness, refilled=2)
    report = harness.sync("rs")
    assert seen and (report.created, report.errors, report.error_retry) == ([], [], None)
    status = harness.status("rs")
    assert status["refilled"] == 2 and status["idle"] == 0
    assert report.stale and report.requeue_after == 1.0
    report = harness.sync("rs")
    assert not report.stale and report.errors == []
    status = harness.status("rs")
    assert (status["refilled"], status["idle"], status["busy"]) == (2, 1, 1)
