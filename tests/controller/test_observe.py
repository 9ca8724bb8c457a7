"""Pods as the decision sees them: a pod stuck before it can start is a failed runner."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from gitscale.controller.decide import Phase
from gitscale.controller.observe import runner_of

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
