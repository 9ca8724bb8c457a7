"""Kubernetes Events of the controller: one per reason and pass, repeats counted on one object
(what ``kubectl describe runnerset`` shows), secrets masked; the pure part table-driven, then
the controller against the local API server."""
from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from gitscale.controller import status as st
from gitscale.controller.context import Report
from gitscale.controller.decide import Actions, Delete, DeleteReason, Spec, Status, Write
from gitscale.controller.events import (
    COMBINED,
    COMPONENT,
    MESSAGE_LIMIT,
    Correlator,
    Event,
    body,
    clip,
    event_name,
    of_pass,
    repeat,
)
from gitscale.redact import MASK, forget_held, hold
from gitscale.timeutil import parse_time
from tests.controller.harness import NS, Harness

T0 = datetime(2026, 11, 23, 9, 0, tzinfo=timezone.utc)
NAMES = [f"linux-ab12-{n:06x}" for n in range(500)]


def counts(wanted: int, pending: int = 0, idle: int = 0, busy: int = 0, failed: int = 0,
           waiting: int = 0) -> Status:
    return Status(pending + idle + busy + failed, pending, idle, busy, failed, 3, wanted,
                  waiting=waiting)


def status(counted: Status | None, problem: st.Problem | None = None,
           failing: tuple[tuple[str, int], ...] = ()) -> dict[str, Any]:
    """A status as the controller writes it."""
    return st.build(None, counted, st.conditions(counted, problem, failing, None, T0), T0)


def actions(create: int = 0, deletes: tuple[Delete, ...] = (),
            standby: tuple[Delete, ...] = ()) -> Actions:
    return Actions(acting=True, create=create, create_patch_id=3, retries=(), deletes=deletes,
                   held=(), status=counts(create), requeue_after=None, failing=(),
                   standby=standby)


def delete(name: str, reason: DeleteReason) -> Delete:
    return Delete(name, reason, None, 1)


READY = status(counts(2, idle=2))
CREATING = st.build(None, counts(2), st.conditions(counts(2), None, (), None, T0, creating=2), T0)
QUOTA = st.Problem("QuotaExceeded", 'create pod default/linux-ab12-000001: 403 Forbidden: pods '
                   '"linux-ab12-000001" is forbidden: exceeded quota')


@pytest.mark.parametrize(("report", "after", "expected"), [
    pytest.param(Report("ci/linux", actions(500), created=NAMES, before={}),
                 status(counts(500, pending=500)),
                 [("Normal", "RunnersCreated", "created 500 runners for patch 3 (linux-ab12-000000, "
                   "linux-ab12-000001, linux-ab12-000002 and 497 more)")],
                 id="a-0-to-500-scale-up-is-one-event"),
    pytest.param(Report("ci/linux", actions(1), created=NAMES[:1], before=READY), READY,
                 [("Normal", "RunnersCreated", "created 1 runner for patch 3 (linux-ab12-000000)")],
                 id="one-runner"),
    pytest.param(Report("ci/linux", actions(deletes=(
        delete("a", DeleteReason.SURPLUS), delete("b", DeleteReason.SURPLUS),
        delete("c", DeleteReason.FINISHED), delete("d", DeleteReason.FAILED)),
        standby=(delete("e", DeleteReason.SURPLUS),)),
        deleted=["a", "b", "c", "d", "e"], before=READY), READY,
        [("Normal", "RunnersDeleted", "deleted 5 runners: 3 surplus (scale-down), 1 finished, "
          "1 failed (a, b, c and 2 more)")],
        id="deletions-by-why"),
    pytest.param(Report("ci/linux", actions(deletes=(delete("a", DeleteReason.SURPLUS),)),
                        busy=["a"], before=READY), READY,
                 [("Normal", "UnregisterRefused", "kept 1 runner running a job (a): the platform "
                   "says it is busy (GitHub refuses to unregister a busy runner; Buildkite's "
                   "agents list, read again before running agents are removed, shows the job); "
                   "tried again later, never deleted while busy")],
                 id="busy-runner-kept-is-normal"),
    pytest.param(Report("ci/linux", actions(), leftovers=["x", "y"], before=READY), READY,
                 [("Normal", "LeftoversRemoved",
                   "removed 2 registration(s) left without a pod (x, y)")],
                 id="leftovers"),
    pytest.param(Report("ci/linux", actions(3), errors=[QUOTA.message], before=READY),
                 status(counts(3), QUOTA),
                 [("Warning", "QuotaExceeded", f"3 of 3 runner(s) missing: {QUOTA.message}")],
                 id="failed-creations-are-the-ready-warning-once"),
    pytest.param(Report("ci/linux", None, before=READY),
                 status(None, st.Problem("InvalidSpec", "spec.template is missing", person=True)),
                 [("Warning", "InvalidSpec", "spec.template is missing")],
                 id="invalid-spec"),
    pytest.param(Report("ci/linux", actions(), before=READY), status(counts(2, idle=1)),
                 [("Warning", "RunnersMissing", "1 of 2 runner(s) missing: they went away after "
                   "patch 3 was applied (deleted or evicted?); they are replaced without a new write")],
                 id="runners-deleted-from-outside"),
    pytest.param(Report("ci/linux", actions(), before=status(counts(2, idle=1))), READY,
                 [("Normal", "Reconciled", "2 of 2 runner(s): 0 pending, 2 idle, 0 busy")],
                 id="ready-again"),
    pytest.param(Report("ci/linux", actions(), before=READY), READY, [], id="nothing-happened"),
    pytest.param(Report("ci/linux", actions(), before=CREATING), READY, [],
                 id="ready-after-creating-is-no-news"),
    pytest.param(Report("ci/linux", actions(), before={}), READY, [], id="first-status-ready"),
    pytest.param(Report("ci/linux", actions(), before=READY), CREATING, [],
                 id="creating-is-no-warning"),
    pytest.param(Report("ci/linux", actions(), errors=["update status of RunnerSet ci/linux: "
                                                       "500 InternalError"], before=READY),
                 READY, [("Warning", "ApplyFailed", "update status of RunnerSet ci/linux: 500 "
                          "InternalError")],
                 id="an-error-the-status-could-not-say"),
    pytest.param(Report("ci/linux", actions(3), errors=[QUOTA.message], before=READY,
                        stale=True), status(counts(3), QUOTA), [],
                 id="a-stale-pass-leaves-its-warning-to-the-next"),
    pytest.param(Report("ci/linux", actions(), before=READY),
                 status(counts(2, idle=1, failed=1, waiting=1), None, (("linux-x", 4),)),
                 [("Warning", "Backoff", "1 runner(s) failed: each is replaced once its backoff "
                   "has passed"),
                  ("Warning", "RepeatedFailures", "runners keep failing and are replaced with "
                   "backoff: linux-x (4 in a row)")],
                 id="failing-runners"),
])
def test_events_of_a_pass(report: Report, after: dict[str, Any],
                          expected: list[tuple[str, str, str]]) -> None:
    assert [(e.type, e.reason, e.message) for e in of_pass(report, after)] == expected


HAND = st.unapplied(Spec(2, 3, T0), Write(3, T0, 4))  # spec.replicas 4 → 2 by hand
NOTICED = st.build(None, counts(2, idle=4), st.conditions(counts(2, idle=4), None, (), None, T0,
                                                          unapplied=HAND), T0)


@pytest.mark.parametrize(("report", "after", "expected"), [
    pytest.param(Report("ci/linux", actions(), unapplied=HAND, before=READY), NOTICED,
                 [("Normal", "ReplicasNotApplied", HAND)], id="said-once-when-it-appears"),
    pytest.param(Report("ci/linux", actions(), unapplied=HAND, before=NOTICED), NOTICED, [],
                 id="not-every-pass-nor-after-a-restart"),
    pytest.param(Report("ci/linux", actions(), unapplied=HAND, before=READY), READY, [],
                 id="not-while-the-status-does-not-say-it"),  # (its write failed)
    pytest.param(Report("ci/linux", actions(), unapplied=HAND, before=READY, stale=True),
                 NOTICED, [], id="not-by-a-stale-pass"),
    pytest.param(Report("ci/linux", actions(), before=NOTICED), READY, [],
                 id="cleared-without-an-event"),
])
def test_a_count_written_by_hand_is_one_normal_event(
        report: Report, after: dict[str, Any], expected: list[tuple[str, str, str]]) -> None:
    assert HAND.startswith("spec.replicas 2 is not acted on as a write: patch 3 ")
    assert [(e.type, e.reason, e.message) for e in of_pass(report, after)] == expected


@pytest.mark.parametrize("leak", [
    pytest.param("https://hook:s3cr3t-pw@policy.example.com/validate", id="url-userinfo"),
    pytest.param("https://policy.example.com/validate?token=s3cr3t-pw", id="query-token"),
    pytest.param("ghp_s3cr3t-pw", id="a-held-secret"),
])
def test_messages_are_redacted(leak: str) -> None:
    hold("ghp_s3cr3t-pw")
    try:
        error = f"create pod: Internal error: failed calling webhook: Post {leak}: refused"
        report = Report("ci/linux", actions(1), errors=[error], before=READY)
        (event,) = of_pass(report, status(counts(1), st.Problem("CreateFailed", error)))
    finally:
        forget_held()
    assert "s3cr3t-pw" not in event.message and MASK in event.message


@pytest.mark.parametrize(("message", "kept"), [
    pytest.param("x" * MESSAGE_LIMIT, MESSAGE_LIMIT, id="at-the-limit"),
    pytest.param("x" * 5000, MESSAGE_LIMIT, id="ascii"),
    pytest.param("é" * 1000, MESSAGE_LIMIT - 1, id="never-half-a-character"),
])
def test_messages_are_cut_to_the_kubernetes_limit(message: str, kept: int) -> None:
    cut = clip(message)
    assert len(cut.encode()) == kept
    assert cut == message or cut.endswith("…")


def test_a_huge_error_is_one_event_within_the_limit() -> None:
    error = "webhook said: " + "no " * 2000
    report = Report("ci/linux", actions(1), errors=[error], before=READY)
    (event,) = of_pass(report, status(counts(1), st.Problem("CreateFailed", error)))
    assert len(event.message.encode()) <= MESSAGE_LIMIT


OBJ = ("ci", "linux", "uid-1")
WARN = Event("Warning", "QuotaExceeded", "exceeded quota")


Step = tuple[tuple[str, str, str], Event, float]  # object, event, minutes after T0


def run(steps: list[Step], fail: set[int]) -> list[tuple[str, int, str]]:
    """Each step through a Correlator, posted unless its index is in ``fail``: (the object
    written — a new name or the one repeated —, count, message)."""
    correlator, out, made = Correlator(), [], 0
    for n, (obj, event, minutes) in enumerate(steps):
        post = correlator.observe(obj, event, T0 + timedelta(minutes=minutes))
        name = post.name
        if name is None:
            made += 1
            name = f"e{made}"
        if n not in fail:
            correlator.posted(post, name)
        out.append((name, post.count, post.event.message))
    return out


@pytest.mark.parametrize(("steps", "fail", "expected"), [
    pytest.param([(OBJ, WARN, 0), (OBJ, WARN, 1), (OBJ, WARN, 9)], set(),
                 [("e1", 1, "exceeded quota"), ("e1", 2, "exceeded quota"),
                  ("e1", 3, "exceeded quota")],
                 id="the-same-warning-counts-on-one-object"),
    pytest.param([(OBJ, WARN, 0), (OBJ, WARN, 9), (OBJ, WARN, 18), (OBJ, WARN, 29)], set(),
                 [("e1", 1, "exceeded quota"), ("e1", 2, "exceeded quota"),
                  ("e1", 3, "exceeded quota"), ("e2", 1, "exceeded quota")],
                 id="within-10-minutes-of-the-last-repeat"),
    pytest.param([(OBJ, WARN, 0), (OBJ, Event("Warning", "CreateFailed", "exceeded quota"), 0),
                  (("ci", "other", "uid-2"), WARN, 0), (OBJ, Event("Normal", "QuotaExceeded",
                                                                    "exceeded quota"), 0)],
                 set(), [("e1", 1, "exceeded quota"), ("e2", 1, "exceeded quota"),
                  ("e3", 1, "exceeded quota"), ("e4", 1, "exceeded quota")],
                 id="by-object-type-and-reason"),
    pytest.param([(OBJ, WARN, 0), (OBJ, WARN, 1)], {0}, [("e1", 1, "exceeded quota"),
                                                          ("e2", 1, "exceeded quota")],
                 id="one-not-posted-is-posted-anew"),
    pytest.param([(OBJ, Event("Warning", "CreateFailed", f"pod p{n} refused"), n / 10)
                  for n in range(13)] + [(OBJ, Event("Warning", "CreateFailed", "pod p3 refused"),
                                          2)], set(),
                 [(f"e{n + 1}", 1, f"pod p{n} refused") for n in range(10)] + [
                     ("e11", 1, f"{COMBINED}pod p10 refused"),
                     ("e11", 2, f"{COMBINED}pod p11 refused"),
                     ("e11", 3, f"{COMBINED}pod p12 refused"),
                     ("e4", 2, "pod p3 refused")],
                 id="past-10-messages-of-a-reason-they-are-combined"),
])
def test_repeats(steps: list[Step], fail: set[int],
                 expected: list[tuple[str, int, str]]) -> None:
    assert run(steps, fail) == expected


def test_the_correlator_forgets_what_it_no_longer_needs() -> None:
    correlator = Correlator()
    for n in range(1000):
        event = Event("Warning", f"Reason{n % 7}", f"message {n}")
        post = correlator.observe(("ci", f"set-{n}", f"uid-{n}"), event, T0 + timedelta(
            minutes=n))
        correlator.posted(post, f"e{n}")
    assert len(correlator._posted) <= 11 and len(correlator._messages) <= 11


def test_the_event_body_and_its_repeat() -> None:
    ref = {"apiVersion": "gitscale.dev/v1alpha1", "kind": "RunnerSet", "name": "linux",
           "namespace": "ci", "uid": "uid-1", "resourceVersion": "42"}
    correlator = Correlator()
    first = correlator.observe(("ci", "linux", "uid-1"), WARN, T0)
    correlator.posted(first, "linux.1")
    again = correlator.observe(("ci", "linux", "uid-1"), WARN, T0 + timedelta(seconds=90))
    made = body(ref, first, "linux.1", "gitscale-controller-7d9f_ab12")
    assert made == {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "linux.1", "namespace": "ci"},
        "involvedObject": ref, "type": "Warning", "reason": "QuotaExceeded",
        "message": "exceeded quota", "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT, "reportingInstance": "gitscale-controller-7d9f_ab12",
        "firstTimestamp": "2026-11-23T09:00:00Z", "lastTimestamp": "2026-11-23T09:00:00Z",
        "eventTime": "2026-11-23T09:00:00.000000Z", "count": 1}
    assert repeat(again) == {"count": 2, "lastTimestamp": "2026-11-23T09:01:30Z",
                             "message": "exceeded quota"}


@pytest.mark.parametrize("set_name", ["linux", "a" * 253, "a" * 230 + "." + "b" * 22,
                                      "a" * 235 + "-" + "b" * 17])
def test_event_names_are_valid_object_names(set_name: str) -> None:
    name = event_name(set_name, 0x18EBAC429D50E215)
    assert len(name) <= 253 and name.endswith(".18ebac429d50e215")
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", name)


# -- the controller against the local API server -------------------------------------------------
def spoil(harness: Harness, name: str) -> None:
    """Make the set invalid: the same InvalidSpec warning on every pass."""
    harness.api.mutate_object("runnersets", name, lambda o: o["spec"].pop("template"), NS)


def test_a_scale_up_posts_one_event_on_the_runnerset(harness: Harness) -> None:
    harness.write("rs", 5, 0)
    report = harness.sync("rs")
    assert len(report.created) == 5
    (event,) = harness.events("rs")
    rs = harness.api.get_object("runnersets", "rs", NS)
    assert rs is not None
    assert event["involvedObject"] == {
        "apiVersion": "gitscale.dev/v1alpha1", "kind": "RunnerSet", "name": "rs",
        "namespace": NS, "uid": rs["metadata"]["uid"],
        "resourceVersion": rs["metadata"]["resourceVersion"]}
    assert (event["type"], event["reason"], event["count"]) == ("Normal", "RunnersCreated", 1)
    assert event["message"].startswith("created 5 runners for patch 0 (")
    assert event["message"].endswith(" and 2 more)")
    assert event["source"] == {"component": "gitscale-controller"}
    assert event["reportingComponent"] == "gitscale-controller" and event["reportingInstance"]
    assert event["firstTimestamp"] == event["lastTimestamp"]
    # A pass with nothing to do says nothing.
    harness.sync("rs")
    assert len(harness.events("rs")) == 1


def test_a_repeated_warning_is_one_event_that_counts(harness: Harness) -> None:
    harness.write("rs", 1, 0)
    spoil(harness, "rs")
    harness.api.reset_calls()
    for _ in range(3):
        harness.sync("rs")
        harness.clock.advance(60)
    (event,) = harness.events("rs")
    assert (event["type"], event["reason"]) == ("Warning", "InvalidSpec")
    assert event["message"] == "spec.template is missing: a pod template for one runner"
    assert event["count"] == 3
    assert (parse_time(event["firstTimestamp"]), parse_time(event["lastTimestamp"])) == (
        T0, T0 + timedelta(minutes=2))
    assert (harness.api.call_count("create", "events"),
            harness.api.call_count("patch", "events")) == (1, 2)
    # Fixed: a Normal Reconciled event says so, the warning stays as it was.
    harness.api.mutate_object("runnersets", "rs", lambda o: o["spec"].update(
        template={"spec": {"containers": [{"name": "runner", "image": "ghcr.io/x:1"}]}}), NS)
    harness.sync("rs")
    reasons = sorted((e["reason"], e["count"]) for e in harness.events("rs"))
    assert reasons == [("InvalidSpec", 3), ("Reconciled", 1), ("RunnersCreated", 1)]


def test_a_repeat_whose_event_expired_is_posted_anew(harness: Harness) -> None:
    harness.write("rs", 1, 0)
    spoil(harness, "rs")
    harness.sync("rs")
    (event,) = harness.events("rs")
    api = harness.api  # the API server's event TTL removes it
    api.store.delete(api.registry.resolve("events"), NS, event["metadata"]["name"], {})
    harness.sync("rs")
    (again,) = harness.events("rs")
    assert again["count"] == 1 and again["metadata"]["name"] != event["metadata"]["name"]


def test_a_secret_echoed_in_an_error_is_masked(harness: Harness,
                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "gitscale")
    harness.write("rs", 1, 0)
    harness.api.inject_error("create", "pods", code=500, reason="InternalError", times=2,
                             message='Internal error occurred: failed calling webhook '
                             '"policy.example.com": Post "https://hook:s3cr3t-pw@policy.example'
                             '.com/validate?timeout=10s": dial tcp: connection refused')
    harness.sync("rs")
    (event,) = harness.events("rs")
    assert (event["type"], event["reason"]) == ("Warning", "CreateFailed")
    assert "s3cr3t-pw" not in event["message"]
    assert "https://***@policy.example.com/validate" in event["message"]
    # masked where the API server's answer becomes an error: in the status and the log too
    assert "s3cr3t-pw" not in str(harness.status("rs")) + caplog.text
    assert "https://***@policy.example.com" in caplog.text


def test_a_deposed_leader_posts_none(harness: Harness) -> None:
    harness.write("rs", 1, 0)
    spoil(harness, "rs")
    harness.sync("rs")
    harness.controller._follow()  # the Lease is lost
    harness.sync("rs")
    harness.sync("rs")
    assert [e["count"] for e in harness.events("rs")] == [1]
    assert harness.api.call_count("patch", "events") == 0
    harness.controller._lead()
    harness.sync("rs")
    assert [e["count"] for e in harness.events("rs")] == [2]


def test_events_that_cannot_be_posted_never_fail_the_pass(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "gitscale")
    harness.api.inject_error("create", "events", code=403, reason="Forbidden", times=2,
                             message='events is forbidden: User "system:serviceaccount:'
                             'gitscale-system:gitscale-controller" cannot create resource '
                             '"events"')
    harness.write("rs", 2, 0)
    report = harness.sync("rs")
    assert len(report.created) == 2 and report.errors == []
    harness.write("rs", 3, 1)
    assert len(harness.sync("rs").created) == 1
    said = [r for r in caplog.records if "not posted" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING, logging.DEBUG]
    assert "needs create and patch on events" in said[0].getMessage()
    assert harness.events("rs") == []
    harness.write("rs", 4, 2)  # posted again once the API takes them
    harness.sync("rs")
    assert [e["reason"] for e in harness.events("rs")] == ["RunnersCreated"]
