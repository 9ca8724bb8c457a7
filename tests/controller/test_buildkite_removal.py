"""A Buildkite pass reads the agents list again before it stops running agents: a scale-down's,
outdated agents', and those past their registration timeout.

The list is reused up to 15 s (``LIST_MAX_AGE``), and Buildkite has no guard of its own: a pod
deleted is an agent stopped, whatever it took since the list was read (GitHub answers 422 to
the unregistration of a runner that took a job). So a pass that is about to delete running
agents' pods reads the list once more, and an agent that took a job since is kept, the next
of the scale-down's order going in its place (an outdated one is kept until it is done, a
timed-out one it shows online kept as it shows; neither replaced). The controller runs
against ``tests/kubeapi`` and the Buildkite fake, with the platforms' lists aging on the
harness clock (simulated seconds) at their real ages, so "reused" and "fresh" are exact.
"""
from __future__ import annotations

import logging
from typing import Iterator

import kubernetes
import pytest

from gitscale.controller.platforms import Platforms
from tests.controller.buildkite_fake import FakeBuildkite
from tests.controller.harness import NS, Harness
from tests.controller.test_buildkite import TOKEN, api_token, busy_known, with_api


@pytest.fixture
def buildkite(harness: Harness) -> Iterator[FakeBuildkite]:
    """The fake, the API token's Secret, and the platforms' lists reused at their real ages
    (15 s before a removal, 60 s otherwise: the harness reads them fresh every pass)."""
    start = harness.clock.now
    harness.controller.ctx.platforms = Platforms(
        harness.controller.kube.read_secret,
        clock=lambda: (harness.clock.now - start).total_seconds())
    server = FakeBuildkite(TOKEN).start()
    api_token(harness, TOKEN)
    try:
        yield server
    finally:
        server.stop()


def lists(buildkite: FakeBuildkite) -> int:
    return sum("/agents" in call for call in buildkite.calls)


def running_agents(harness: Harness, buildkite: FakeBuildkite, count: int) -> list[str]:
    """A set of ``count`` connected, idle agents (patch 1), the list read by its last pass."""
    harness.write("bk", count, 1, spec=with_api(buildkite.url))
    harness.sync("bk")
    names = harness.names("bk")
    for name in names:
        harness.api.set_pod_phase(NS, name, "Running")
        buildkite.connect(name)
    harness.sync("bk")
    assert harness.status("bk")["idle"] == count
    return names


def test_an_agent_that_took_a_job_since_the_list_was_read_is_not_the_one_removed(
        harness: Harness, buildkite: FakeBuildkite, caplog: pytest.LogCaptureFixture) -> None:
    first, second = running_agents(harness, buildkite, 2)
    harness.write("bk", 1, 0)  # patch 0: one agent too many, the oldest idle one goes
    buildkite.connect(first, busy=True)  # it takes a job after the list was read
    harness.clock.advance(5)  # the list is 5 s old: reused for the decision
    before = lists(buildkite)
    caplog.set_level(logging.INFO, "gitscale")
    report = harness.sync("bk")
    assert report.deleted == [second] and harness.names("bk") == [first]
    assert lists(buildkite) - before == 1  # read once, right before the removal
    assert f"{first} took a job since the runner list was read: kept" in caplog.text
    status = harness.status("bk")
    assert (status["replicas"], status["busy"], status["idle"]) == (1, 1, 0)


def test_a_set_being_deleted_keeps_the_agent_that_took_a_job(
        harness: Harness, buildkite: FakeBuildkite) -> None:
    """A set being deleted is a scale-down to 0: the same read, the busy agent left to finish."""
    first, second = running_agents(harness, buildkite, 2)
    buildkite.connect(second, busy=True)
    harness.clock.advance(5)
    custom = kubernetes.client.CustomObjectsApi(harness.controller.kube.api)
    custom.delete_namespaced_custom_object("gitscale.dev", "v1alpha1", NS, "runnersets", "bk")
    report = harness.sync("bk")
    assert report.deleted == [first] and harness.names("bk") == [second]


@pytest.mark.parametrize("what", [
    pytest.param("no-surplus", id="patch 0, no surplus"),
    pytest.param("busy-surplus", id="patch 0, the surplus all busy"),
    pytest.param("pending-surplus", id="patch 0, the surplus pods not running"),
])
def test_a_pass_that_stops_no_running_agent_asks_nothing_more(
        harness: Harness, buildkite: FakeBuildkite, what: str) -> None:
    first, second = running_agents(harness, buildkite, 2)
    if what == "no-surplus":
        harness.write("bk", 2, 0)
    else:  # both run a job, and a pass has read the list that says so
        for name in (first, second):
            buildkite.connect(name, busy=True)
        harness.clock.advance(61)
        harness.sync("bk")
        assert harness.status("bk")["busy"] == 2
        if what == "pending-surplus":
            harness.write("bk", 3, 1)
            (third,) = harness.sync("bk").created  # pending: its pod does not run
            harness.write("bk", 2, 0)  # the surplus: the pending one (never a busy one)
        else:
            harness.write("bk", 1, 0)
    harness.clock.advance(5)
    before = lists(buildkite)
    report = harness.sync("bk")
    assert lists(buildkite) == before  # the list 5 s old serves the pass: no request
    assert report.deleted == ([third] if what == "pending-surplus" else [])


def test_a_fresh_read_that_fails_falls_back_to_the_graceful_stop_and_says_so_once(
        harness: Harness, buildkite: FakeBuildkite, caplog: pytest.LogCaptureFixture) -> None:
    """Buildkite down at the removal: the pass removes as decided on the list it had (the
    agent finishes any job it took on SIGTERM), and BusyKnown and the log say why."""
    first, second, third = running_agents(harness, buildkite, 3)
    harness.write("bk", 2, 0)
    harness.clock.advance(5)
    buildkite.down = 502
    caplog.set_level(logging.INFO, "gitscale")
    assert harness.sync("bk").deleted == [first]
    harness.write("bk", 1, 0)  # (Buildkite not asked again within its wait: said alike)
    harness.clock.advance(1)
    assert harness.sync("bk").deleted == [second]
    cond = busy_known(harness, "bk")
    assert (cond["status"], cond["reason"]) == ("False", "AgentsAPIUnavailable")
    assert "answered 502" in cond["message"]
    said = [r.getMessage() for r in caplog.records if "could not be read again before" in
            r.getMessage()]
    assert len(said) == 1 and "finishes" in said[0], said


def test_a_list_read_by_the_pass_itself_is_not_read_again_for_its_removals(
        harness: Harness, buildkite: FakeBuildkite) -> None:
    """A list older than a removal allows (15 s) is read by the pass before it decides: read
    again at once before the removals, it would say the same at twice the requests (each a
    walk of the organization's agents, page by page)."""
    running_agents(harness, buildkite, 2)
    harness.write("bk", 1, 0)
    harness.clock.advance(20)  # older than a removal allows: the pass reads it for the decision
    before = lists(buildkite)
    report = harness.sync("bk")
    assert len(report.deleted) == 1 and len(harness.names("bk")) == 1
    assert lists(buildkite) - before == 1


# -- the other removals of a running agent: outdated, and past its registration timeout ------
def new_queue(harness: Harness, queue: str = "linux-large") -> None:
    """A person changes the set's queue: the agents started for the old one are outdated."""
    harness.api.mutate_object("runnersets", "bk", lambda o: o["spec"]["buildkite"].update(
        queue=queue), NS)


def test_an_outdated_agent_that_took_a_job_since_the_list_was_read_is_kept_not_replaced(
        harness: Harness, buildkite: FakeBuildkite, caplog: pytest.LogCaptureFixture) -> None:
    """Outdated agents go at any patch ID when idle, their pods deleted once their successors
    exist. One that took a job after the pass's list was read is kept until it is done, and
    gets no successor (the set would be above replicas while it runs)."""
    first, second = running_agents(harness, buildkite, 2)
    new_queue(harness)
    buildkite.connect(first, busy=True)  # a job of the old queue, after the list was read
    harness.clock.advance(5)  # the list is 5 s old: reused for the decision
    before = lists(buildkite)
    caplog.set_level(logging.INFO, "gitscale")
    report = harness.sync("bk")
    assert report.deleted == [second] and report.busy == [first]
    (successor,) = report.created
    assert harness.names("bk") == sorted([first, successor])
    assert lists(buildkite) - before == 1  # read once, before the successors are made
    assert f"{first} made for other job settings, took a job: kept until it is done" \
        in caplog.text
    status = harness.status("bk")
    assert (status["replicas"], status["busy"]) == (2, 1)  # (the one replaced: till it goes)
    # Its job done, the agent exits; its slot follows the usual rule (the next write).
    harness.clock.advance(31)
    buildkite.disconnect(first)
    harness.api.set_pod_phase(NS, first, "Succeeded")
    report = harness.sync("bk")
    assert (report.created, report.deleted) == ([], [])


def timed_out_agent(harness: Harness, buildkite: FakeBuildkite) -> str:
    """Set ``bk``'s one agent runs, never listed; ten minutes later a pass of ``bk2`` (the same
    token and organization: one shared list) reads the list without it. Returns the agent."""
    harness.write("bk", 1, 1, spec=with_api(buildkite.url))
    (silent,) = harness.sync("bk").created
    harness.api.set_pod_phase(NS, silent, "Running")
    harness.write("bk2", 1, 1, spec=with_api(buildkite.url))
    (other,) = harness.sync("bk2").created
    harness.api.set_pod_phase(NS, other, "Running")
    buildkite.connect(other)
    harness.clock.advance(10 * 60)  # bk's agent is past its registration timeout
    harness.sync("bk2")  # the list is read here (older than a pass allows): bk's agent not in it
    return silent


@pytest.mark.parametrize("listed", [
    pytest.param("busy", id="listed running a job"),
    pytest.param("idle", id="listed idle"),
    pytest.param("absent", id="not listed"),
])
def test_an_agent_past_its_registration_timeout_is_judged_on_the_list_read_again(
        harness: Harness, buildkite: FakeBuildkite, listed: str) -> None:
    """The decision's list (5 s old, read after the timeout ran out) never showed the agent:
    failed, to be replaced. It connected since: a list read again right before its pod is
    deleted shows it online after all — kept, not replaced, counted as the list says (busy
    or idle), and never timed out again. Not listed there either: replaced, as decided."""
    silent = timed_out_agent(harness, buildkite)
    if listed != "absent":
        buildkite.connect(silent, busy=listed == "busy")
    harness.clock.advance(5)
    before = lists(buildkite)
    report = harness.sync("bk")
    assert lists(buildkite) - before == 1
    status = harness.status("bk")
    if listed == "absent":
        assert report.deleted == [silent] and len(report.created) == 1
        return
    assert (report.created, report.deleted) == ([], [])
    assert report.busy == ([silent] if listed == "busy" else [])
    assert harness.names("bk") == [silent]
    assert (status["replicas"], status["busy"], status["idle"], status["failed"]) == \
        (1, listed == "busy", listed == "idle", 0)
    harness.clock.advance(61)  # a later pass, on a list of its own: a runner of the set
    report = harness.sync("bk")
    assert (report.created, report.deleted) == ([], []) and harness.names("bk") == [silent]


def test_one_read_serves_a_scale_down_and_the_outdated_agents_of_one_pass(
        harness: Harness, buildkite: FakeBuildkite) -> None:
    """Patch 0 and a new queue at once: the first agent goes as the surplus, the other two as
    outdated (replaced). One read again serves them all; the one it shows busy stays."""
    first, second, third = running_agents(harness, buildkite, 3)
    new_queue(harness)
    harness.write("bk", 2, 0)
    buildkite.connect(second, busy=True)
    harness.clock.advance(5)
    before = lists(buildkite)
    report = harness.sync("bk")
    assert lists(buildkite) - before == 1
    assert sorted(report.deleted) == [first, third] and report.busy == [second]
    (successor,) = report.created
    assert harness.names("bk") == sorted([second, successor])


def said(caplog: pytest.LogCaptureFixture) -> int:
    """The lines saying the list could not be read again (each saying what that means)."""
    lines = [r.getMessage() for r in caplog.records
             if "could not be read again before" in r.getMessage()]
    assert all("finishes" in line for line in lines), lines
    return len(lines)


def test_a_read_that_fails_before_outdated_agents_go_removes_them_as_decided_said_once(
        harness: Harness, buildkite: FakeBuildkite, caplog: pytest.LogCaptureFixture) -> None:
    """Buildkite down: the outdated agents go as decided on the list the pass had (one that
    took a job since finishes it on SIGTERM); the log says so once, for a later scale-down
    that cannot read it either too."""
    first, second = running_agents(harness, buildkite, 2)
    new_queue(harness)
    harness.clock.advance(5)
    buildkite.down = 502
    caplog.set_level(logging.INFO, "gitscale")
    report = harness.sync("bk")
    assert sorted(report.deleted) == [first, second] and len(report.created) == 2
    assert said(caplog) == 1
    for name in report.created:
        harness.api.set_pod_phase(NS, name, "Running")
    harness.write("bk", 1, 0)
    harness.clock.advance(1)
    assert len(harness.sync("bk").deleted) == 1
    assert said(caplog) == 1
    cond = busy_known(harness, "bk")
    assert (cond["status"], cond["reason"]) == ("False", "AgentsAPIUnavailable")


def test_a_timed_out_agent_kept_as_online_is_no_failure_in_runners_failing(
        harness: Harness, buildkite: FakeBuildkite) -> None:
    """The third agent of a lineage whose first two failed is past its registration timeout
    on the decision's list, and online in the one read again: kept, not replaced, counted idle
    — and not one more failure in a row either (RunnersFailing, with its Warning, said it
    was: 3 in a row, "replaced with backoff", for an agent online and idle)."""
    harness.write("bk", 1, 1, spec=with_api(buildkite.url))
    (agent,) = harness.sync("bk").created
    for _ in range(2):  # it exits at once, twice: its successor carries 2 failures in a row
        harness.api.set_pod_phase(NS, agent, "Failed")
        harness.clock.advance(5)
        (agent,) = harness.sync("bk").created
    harness.api.set_pod_phase(NS, agent, "Running")
    harness.write("bk2", 1, 1, spec=with_api(buildkite.url))
    (other,) = harness.sync("bk2").created
    harness.api.set_pod_phase(NS, other, "Running")
    buildkite.connect(other)
    harness.clock.advance(10 * 60)
    harness.sync("bk2")  # the shared list, read without bk's agent
    buildkite.connect(agent)  # it connects now
    harness.clock.advance(11)  # its backoff (10 s after two failures) is over: due
    report = harness.sync("bk")
    assert (report.online, report.created, report.deleted) == ([agent], [], [])
    status = harness.status("bk")
    assert (status["idle"], status["failed"]) == (1, 0)
    failing = next(c for c in status["conditions"] if c["type"] == "RunnersFailing")
    assert (failing["status"], failing["reason"]) == ("False", "NoRepeatedFailures"), failing
    assert not [e for e in harness.events("bk") if e["reason"] == "RepeatedFailures"]
