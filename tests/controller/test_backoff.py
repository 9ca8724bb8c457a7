"""A set whose passes keep failing on the Kubernetes API backs off, through the real client
against the local API server: its next pass waits 10 s, doubling with each failed pass in a
row up to 5 minutes (``workqueue.py``); a pass that succeeds, or a new spec, starts it over;
the periodic resync does not cut it short. (A status the API server refuses every time — a
validating webhook, a Role without ``runnersets/status`` — was tried every 10 s for ever.)
"""
from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gitscale.controller.workqueue import RETRY_MAX
from tests.controller.harness import NS, Harness, buildkite_spec, start


def _refuse_status(harness: Harness) -> None:
    harness.api.inject_error("patch", "runnersets/status", code=422, reason="Invalid",
                             message="admission webhook \"policy.example\" denied the request",
                             times=10**6)


def test_passes_that_keep_failing_back_off_until_one_succeeds(harness: Harness) -> None:
    harness.write("bk", 1, 1, spec=buildkite_spec())
    _refuse_status(harness)
    waits = []
    for _ in range(7):
        report = harness.sync("bk")
        assert "denied the request" in " ".join(report.errors)
        waits.append(report.requeue_after)
    assert waits == [10, 20, 40, 80, 160, RETRY_MAX, RETRY_MAX]
    assert len(harness.pods("bk")) == 1  # (what it could do, it did)

    harness.api.clear_errors()
    report = harness.sync("bk")
    assert report.errors == [] and report.requeue_after is None
    assert harness.status("bk")["replicas"] == 1
    assert harness.controller.queue.failures(f"{NS}/bk") == 0
    _refuse_status(harness)
    (pod,) = harness.names("bk")
    harness.api.set_pod_phase(NS, pod, "Running")  # (a status to write again)
    assert harness.sync("bk").requeue_after == 10  # a first failure again


def test_a_new_spec_is_tried_again_from_10s(harness: Harness) -> None:
    harness.write("bk", 1, 1, spec=buildkite_spec())
    _refuse_status(harness)
    assert [harness.sync("bk").requeue_after for _ in range(3)] == [10, 20, 40]
    harness.write("bk", 2, 2)  # Argo CD synced a new write: it may be the fix
    assert [harness.sync("bk").requeue_after for _ in range(2)] == [10, 20]


@pytest.fixture
def running() -> Iterator[Harness]:
    yield from start(workers=True, resync=0.1)


def test_the_resync_does_not_run_a_set_that_backs_off(running: Harness) -> None:
    """Resyncs every 0.1 s: a set whose status is refused is tried once (then once more at the
    most, for the event of its own finalizer), not ten times a second."""
    _refuse_status(running)
    running.write("bk", 0, 1, spec=buildkite_spec())
    time.sleep(1.5)
    assert 1 <= running.api.call_count("patch", "runnersets/status") <= 2
    assert running.controller.queue.failures(f"{NS}/bk") >= 1
