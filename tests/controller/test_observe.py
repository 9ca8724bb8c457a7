"""Pods as the decision sees them: a pod stuck before it can start is a failed runner."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from gitscale.controller.decide import Phase, Unschedulable
from gitscale.controller.observe import (
    REGISTRATION_TIMEOUT,
    runner_of,
    started_at,
    unschedulable_of,
)
from gitscale.controller.platform import Registered
from gitscale.controller.platform_github import running as github_running

NOW = datetime(2026, 11, 22, 9, 0, tzinfo=timezone.utc)


def pod(age: timedelta, reason: str | None, phase: str = "Pending") -> dict[str, Any]:
    statuses = [] if reason is None else [
        {"name": "runner", "state": {"waiting": {"reason": reason}}}]
    return {
        "metadata": {"name": "r-1", "labels": {"gitscale.dev/patch-id": "3"},
                     "creationTimestamp": (NOW - age).strftime("%Y-%m-%dT%H:%M:%SZ")},
        "spec": {"containers": [{"name": "runner", "image": "x"}]},
        "status": {"phase": phase, "containerStatuses": statuses},
    }


@pytest.mark.parametrize(
    ("age", "reason", "phase"),
    [
        pytest.param(timedelta(minutes=10), "ImagePullBackOff", Phase.FAILED, id="bad-image"),
        pytest.param(timedelta(minutes=10), "CreateContainerConfigError", Phase.FAILED,
                     id="missing-jit-secret"),
        pytest.param(timedelta(minutes=1), "ImagePullBackOff", Phase.PENDING,
                     id="young-enough-to-recover"),
        pytest.param(timedelta(minutes=10), "ContainerCreating", Phase.PENDING,
                     id="slow-but-normal"),
        pytest.param(timedelta(minutes=10), "ErrImageNeverPull", Phase.FAILED,
                     id="never-pull-and-not-on-the-node"),
        pytest.param(timedelta(minutes=10), "InvalidImageName", Phase.FAILED,
                     id="invalid-image-name"),
        pytest.param(timedelta(minutes=10), None, Phase.PENDING, id="unscheduled"),
    ],
)
def test_stuck_pending_pods_are_failed_runners(age: timedelta, reason: str | None,
                                               phase: Phase) -> None:
    runner = runner_of(pod(age, reason), None, None, NOW)
    assert runner.phase == phase
    if phase == Phase.FAILED:  # a fixed time, so the backoff after it can run out
        assert runner.finished_at == NOW - age + timedelta(minutes=5)
        later = runner_of(pod(age, reason), None, None, NOW + timedelta(minutes=1))
        assert later.finished_at == runner.finished_at


@pytest.mark.parametrize(("reason", "message", "said"), [
    pytest.param("CreateContainerConfigError", 'secret "bk-token" not found',
                 'container runner: CreateContainerConfigError: secret "bk-token" not found',
                 id="missing-secret"),
    pytest.param("ImagePullBackOff", None, "container runner: ImagePullBackOff", id="no-message"),
    pytest.param("ContainerCreating", None, None, id="slow-but-normal"),
    pytest.param(None, None, None, id="unscheduled"),
])
def test_a_pending_runner_says_why_its_container_cannot_start(
        reason: str | None, message: str | None, said: str | None) -> None:
    """Before its 5 minutes are up, a pod waiting for a reason that does not clear by itself is
    a pending runner that says the kubelet's reason and message (what Ready quotes)."""
    young = pod(timedelta(minutes=1), reason)
    if message is not None:
        young["status"]["containerStatuses"][0]["state"]["waiting"]["message"] = message
    runner = runner_of(young, None, None, NOW)
    assert (runner.phase, runner.cannot_start) == (Phase.PENDING, said)


def running_pod(runner_state: dict[str, Any], *, started: datetime) -> dict[str, Any]:
    """A Running pod with a sidecar (dind) started at ``started`` and the runner container in
    ``runner_state``, its runner id 7."""
    stamp = started.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {"name": "r-1", "labels": {"gitscale.dev/patch-id": "3"},
                     "annotations": {"gitscale.dev/runner-id": "7"},
                     "creationTimestamp": stamp},
        "spec": {"containers": [{"name": "dind", "image": "docker:dind"},
                                {"name": "runner", "image": "x"}]},
        "status": {"phase": "Running", "startTime": stamp, "containerStatuses": [
            {"name": "dind", "state": {"running": {"startedAt": stamp}}},
            {"name": "runner", "state": runner_state}]},
    }


def test_a_runner_still_pulling_its_image_beside_a_running_sidecar_has_not_started() -> None:
    """The pod is Running (its sidecar runs) while the runner's image is pulled: the
    registration timeout starts when the runner container does, not with the pod."""
    pulling = running_pod({"waiting": {"reason": "ContainerCreating"}},
                          started=NOW - timedelta(minutes=15))
    assert started_at(pulling) is None
    runner = runner_of(pulling, {}, None, NOW, github_running)
    assert runner.phase is Phase.PENDING
    began = NOW - timedelta(minutes=11)
    started = running_pod({"running": {"startedAt": began.strftime("%Y-%m-%dT%H:%M:%SZ")}},
                          started=NOW - timedelta(minutes=15))
    assert started_at(started) == began
    timed_out = runner_of(started, {}, None, NOW, github_running)
    assert (timed_out.phase, timed_out.finished_at) == (Phase.FAILED,
                                                        began + REGISTRATION_TIMEOUT)


def test_the_registration_timeout_is_judged_at_the_time_of_the_list() -> None:
    """A list read before the runner's 10 minutes ran out cannot say it never came online:
    lists are reused (for minutes, up to an hour while GitHub's rate limit is scarce)."""
    began = NOW - timedelta(minutes=30)
    pod = running_pod({"running": {"startedAt": began.strftime("%Y-%m-%dT%H:%M:%SZ")}},
                      started=began)
    for listed_at, phase in [(began + timedelta(minutes=9), Phase.PENDING),
                             (began + REGISTRATION_TIMEOUT, Phase.FAILED),
                             (None, Phase.FAILED)]:  # None: read now
        runner = runner_of(pod, {}, None, NOW, github_running, listed_at=listed_at)
        assert runner.phase is phase, listed_at
    online = {7: Registered(True, False, "r-1")}
    assert runner_of(pod, online, None, NOW, github_running,
                     listed_at=began + timedelta(minutes=1)).phase is Phase.IDLE


def scheduled(status: str, reason: str | None, *, since: bool = True,
              phase: str = "Pending") -> dict[str, Any]:
    """A pod 10 minutes old whose PodScheduled condition is ``status``/``reason``."""
    cond: dict[str, Any] = {"type": "PodScheduled", "status": status,
                            "message": "0/3 nodes are available: 3 Insufficient memory."}
    if reason is not None:
        cond["reason"] = reason
    if since:
        cond["lastTransitionTime"] = "2026-11-22T08:58:00Z"
    obj = pod(timedelta(minutes=10), None, phase)
    obj["status"]["conditions"] = [{"type": "Initialized", "status": "True"}, cond]
    return obj


MEMORY = "0/3 nodes are available: 3 Insufficient memory."


@pytest.mark.parametrize(("obj", "expected"), [
    pytest.param(scheduled("False", "Unschedulable"),
                 Unschedulable(NOW - timedelta(minutes=2), MEMORY), id="since-its-transition"),
    pytest.param(scheduled("False", "Unschedulable", since=False),
                 Unschedulable(NOW - timedelta(minutes=10), MEMORY),
                 id="no-transition-time:-since-creation"),
    pytest.param(scheduled("True", None), None, id="scheduled"),
    pytest.param(scheduled("False", "SchedulingGated"), None, id="gated-on-purpose"),
    pytest.param(pod(timedelta(minutes=10), None), None, id="no-conditions-yet"),
])
def test_the_schedulers_word_on_a_pod(obj: dict[str, Any],
                                      expected: Unschedulable | None) -> None:
    assert unschedulable_of(obj) == expected
    runner = runner_of(obj, None, None, NOW)
    assert (runner.phase, runner.unschedulable) == (Phase.PENDING, expected)


def test_unschedulable_is_a_pending_runners_word_only() -> None:
    """A pod that runs (a stale condition) or failed is not reported as unschedulable, and an
    unschedulable pod is never failed for it: it is not replaced, whatever its age."""
    stale = scheduled("False", "Unschedulable", phase="Running")
    stale["status"]["containerStatuses"] = [{"name": "runner", "state": {"running": {}}}]
    assert runner_of(stale, None, None, NOW).unschedulable is None
    old = scheduled("False", "Unschedulable")
    assert runner_of(old, None, None, NOW + timedelta(days=1)).phase is Phase.PENDING
