"""Others writing while the controller acts, through the real ``kubernetes`` client against the
local API server: Argo CD or Flux applying the set while a pass reads it (a resourceVersion
conflict), a human editing the template while runners run.

(r, p) is a spec write of replicas r and patch ID p.
"""
from __future__ import annotations

import logging
from typing import Any

import pytest

from gitscale.controller.observe import FINALIZER
from tests.controller.harness import NS, Harness


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
