"""Argo CD's health check for RunnerSets (deploy/argocd/argocd-cm-patch.yaml), run as Argo CD
runs it: the Lua script with the object as the global ``obj``, in a real Lua (lupa)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import lupa  # a test dependency (pyproject's `test` extra): missing is a failure, not a skip
import pytest
import yaml

from gitscale.controller import status as st
from gitscale.controller.decide import Status
from tests.controller.harness import NS, Harness

PATCH = Path(__file__).resolve().parents[2] / "deploy" / "argocd" / "argocd-cm-patch.yaml"
KEY = "resource.customizations.health.gitscale.dev_RunnerSet"
T0 = datetime(2026, 11, 23, 9, 0, tzinfo=timezone.utc)


def health(obj: dict[str, Any]) -> tuple[str, str]:
    script = yaml.safe_load(PATCH.read_text())["data"][KEY]
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute(script)
    return str(result["status"]), str(result["message"])


def runnerset(status: dict[str, Any] | None, generation: int = 3) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "gitscale.dev/v1alpha1", "kind": "RunnerSet",
                           "metadata": {"name": "linux", "namespace": "ci-runners",
                                        "generation": generation},
                           "spec": {"replicas": 300, "patchID": 7}}
    if status is not None:
        obj["status"] = status
    return obj


def written(counts: Status | None, problem: st.Problem | None = None, *,
            failing: tuple[tuple[str, int], ...] = (), since: datetime = T0,
            now: datetime = T0, generation: int = 3) -> dict[str, Any]:
    """A status exactly as the controller writes it."""
    before = st.build(None, counts, st.conditions(counts, problem, failing, None, since), since)
    return st.build(before, counts, st.conditions(counts, problem, failing, before, now), now,
                    generation=generation)


def counts(wanted: int, idle: int, waiting: int = 0) -> Status:
    return Status(idle + waiting, 0, idle, 0, waiting, 7, wanted, 0, waiting)


def test_the_patch_is_a_configmap_merge_for_argocd_cm() -> None:
    doc = yaml.safe_load(PATCH.read_text())
    assert (doc["kind"], doc["metadata"]["name"], doc["metadata"]["namespace"]) == (
        "ConfigMap", "argocd-cm", "argocd")
    assert list(doc["data"]) == [KEY]


@pytest.mark.parametrize(("status", "expected", "words"), [
    pytest.param(written(counts(300, 300)), "Healthy", "300 of 300 runner(s)", id="ready"),
    pytest.param(written(counts(300, 85), st.Problem("CreateFailed", "create pod: 500")),
                 "Progressing", "215 of 300 runner(s) missing", id="short"),
    pytest.param(written(counts(300, 299, waiting=1)), "Progressing", "replaced once its backoff",
                 id="backoff"),
    pytest.param(written(counts(300, 85), st.Problem("QuotaExceeded", "exceeded quota"),
                         now=T0 + timedelta(minutes=6)),
                 "Degraded", "no progress for 5m", id="failed-quota-for-6-minutes"),
    pytest.param(written(None, st.Problem("InvalidSpec", "spec.template is missing",
                                          person=True)),
                 "Degraded", "spec.template is missing", id="failed-invalid-spec"),
    pytest.param(written(counts(300, 300), failing=(("linux-0a1b2c", 4),)), "Degraded",
                 "keep failing", id="runners-failing"),
    pytest.param(written(counts(300, 300), generation=2), "Progressing", "generation 3",
                 id="old-generation"),
    pytest.param(None, "Progressing", "waiting for the gitscale controller", id="no-status"),
])
def test_health(status: dict[str, Any] | None, expected: str, words: str) -> None:
    state, message = health(runnerset(status))
    assert state == expected
    assert words in message


def test_health_of_a_real_set_from_short_to_ready(harness: Harness) -> None:
    harness.write("rs", 4, 1)
    harness.api.inject_error("create", "pods", times=2, skip=1)  # (the first is a dry run)
    harness.sync("rs")
    obj = harness.api.get_object("runnersets", "rs", NS)
    assert obj is not None and health(obj) == ("Progressing", health(obj)[1])
    assert "2 of 4 runner(s) missing" in health(obj)[1]
    harness.clock.advance(10)  # refused creations are tried again after 10 s
    harness.sync("rs")
    obj = harness.api.get_object("runnersets", "rs", NS)
    assert obj is not None and health(obj)[0] == "Healthy"
