"""A Buildkite scale-down reads the agents list again right before it stops agents.

The list is reused up to 15 s (``LIST_MAX_AGE``), and Buildkite has no guard of its own: a pod
deleted is an agent stopped, whatever it took since the list was read (GitHub answers 422 to
the unregistration of a runner that took a job). So a pass that is about to delete running
agents' pods reads the list once more, and an agent that took a job since is kept, the next
of the scale-down's order going in its place. The controller runs against ``tests/kubeapi``
and the Buildkite fake, with the platforms' lists aging on the harness clock (simulated
seconds) at their real ages, so "reused" and "fresh" are exact.
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
