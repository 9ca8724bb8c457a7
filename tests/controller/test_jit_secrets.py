"""JIT Secrets whose handover to their pod failed, after the process that knew of them is gone
(a restart, another replica taking the Lease): the next leader's sweep finds them by their
label and deletes those whose pod does not exist — once older than a creation could be — and
hands the others over. Through the real client, against the local API server."""
from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest

from gitscale.controller.kube import Kube
from gitscale.controller.kube_config import client_for
from gitscale.controller.leftovers import EVERY, SECRET_GRACE
from gitscale.controller.loop import Controller
from gitscale.controller.platforms import Platforms
from tests.controller.harness import NS, Elapsed, Harness

LABEL = "gitscale.dev/runnerset"


def secrets(harness: Harness, name: str = "rs") -> dict[str, str]:
    """The set's JIT Secrets: name → the kind of their owner (RunnerSet: not handed over)."""
    return {s["metadata"]["name"]: s["metadata"]["ownerReferences"][0]["kind"]
            for s in harness.api.objects("secrets", NS, label_selector=f"{LABEL}={name}")}


def evict(harness: Harness, pod: str) -> None:
    """The pod deleted from outside (an eviction, ``kubectl delete pod``)."""
    kubernetes.client.CoreV1Api(harness.controller.kube.api).delete_namespaced_pod(
        pod, NS, _preload_content=False)


@pytest.fixture
def next_leader(harness: Harness) -> Iterator[Any]:
    """The controller crashes (its memory with it); ``take_over()`` starts the next leader,
    with nothing in memory, on the same API server, GitHub and clock."""
    kubes: list[Kube] = []

    def take_over() -> Controller:
        harness.controller.stop(release=False)
        kube = Kube(client_for(harness.api.url))
        kubes.append(kube)
        controller = Controller(kube, clock=harness.clock, concurrency=4, platforms=Platforms(
            kube.read_secret, list_max_age=0, clock=Elapsed(harness.clock)))
        controller.start(workers=False)
        assert controller.synced(5)
        harness.controller = controller
        return controller

    yield take_over
    for kube in kubes:
        kube.close()


def test_secrets_whose_handover_failed_are_swept_by_the_next_leader(
        harness: Harness, next_leader: Any) -> None:
    harness.write("rs", 3, 1)
    harness.api.inject_error("patch", "secrets", times=3)  # every handover fails
    assert len(harness.sync("rs").created) == 3
    names = harness.names("rs")
    assert secrets(harness) == dict.fromkeys(names, "RunnerSet")
    gone, finished, running = names
    harness.running(running)  # ... its Secret is handed over, not deleted
    harness.stop(finished)  # ... a marker: its pod stays until the next write
    next_leader()
    evict(harness, gone)  # (nothing deletes its Secret now)
    young = harness.sync("rs")  # the first pass sweeps: too young to be taken for left
    (refill,) = young.created  # (``gone``'s slot, lost from outside)
    assert young.errors == [] and secrets(harness) == {**dict.fromkeys(names, "RunnerSet"),
                                                       refill: "Pod"}
    harness.clock.advance(SECRET_GRACE.total_seconds())  # (and EVERY: the sweep is due)
    assert harness.sync("rs").errors == []
    assert secrets(harness) == {finished: "Pod", running: "Pod", refill: "Pod"}
    harness.sync("rs")  # not due again before EVERY
    # A list a sweep (each controller's first pass, then this one), of metadata only: never
    # a Secret's data.
    assert harness.api.metadata_lists == ["secrets"] * 3
    assert harness.api.call_count("list", "secrets") == 3


def test_a_young_secret_and_another_sets_are_left_alone(
        harness: Harness, next_leader: Any) -> None:
    """A Secret younger than a creation may take may be a creation under way (its pod comes
    next); another set's Secrets (by label, by owner) are not this set's to sweep."""
    harness.write("rs", 1, 1)
    harness.write("other", 1, 1)
    harness.api.inject_error("patch", "secrets", times=2)
    harness.sync("rs")
    harness.sync("other")
    (mine,), (theirs,) = harness.names("rs"), harness.names("other")
    next_leader()
    for pod in (mine, theirs):
        evict(harness, pod)
    harness.clock.advance(SECRET_GRACE.total_seconds() - 1)
    harness.sync("rs")
    assert mine in secrets(harness) and theirs in secrets(harness, "other")
    harness.clock.advance(EVERY.total_seconds())
    harness.sync("rs")
    assert mine not in secrets(harness)
    assert secrets(harness, "other") == {theirs: "RunnerSet"}  # its own set's next sweep


def test_a_sweep_the_role_refuses_is_said_once_and_the_set_still_served(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """A Role without ``list`` on secrets (one written before it was needed): the sweep is
    housekeeping, not the set's health — Ready stays as the runners make it, the log says it
    once, and each sweep tries again."""
    harness.api.inject_error("list", "secrets", code=403, reason="Forbidden", times=10**6,
                             message='secrets is forbidden: User "system:serviceaccount:'
                                     'gitscale-system:gitscale-controller" cannot list '
                                     'resource "secrets"')
    caplog.set_level(logging.WARNING, "gitscale.controller")
    harness.write("rs", 1, 1)
    assert len(harness.sync("rs").created) == 1
    harness.clock.advance(EVERY.total_seconds())
    report = harness.sync("rs")
    assert report.errors == [] and harness.api.call_count("list", "secrets") == 2
    ready = next(c for c in harness.status("rs")["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
    said = [r.getMessage() for r in caplog.records if "not swept" in r.getMessage()]
    assert len(said) == 1 and "cannot list resource" in said[0], said
    assert said[0].startswith("default/rs: JIT Secrets left behind not swept (tried again in "
                              "5 minutes): list Secrets of RunnerSet default/rs: 403 Forbidden")


def test_a_replica_that_takes_the_lease_again_sweeps_at_once(harness: Harness) -> None:
    """It led before, swept, and lost the Lease; the replica that led meanwhile may have left
    Secrets behind: taking the Lease again, its next pass sweeps, whenever it last did."""
    harness.write("rs", 1, 1)
    harness.sync("rs")
    harness.sync("rs")
    assert harness.api.call_count("list", "secrets") == 1  # (not due again before EVERY)
    harness.controller._follow()
    harness.controller._lead()
    harness.sync("rs")
    assert harness.api.call_count("list", "secrets") == 2
