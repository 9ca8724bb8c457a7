"""Hostile or unlucky inputs, as the SRE paged for them meets them: a name too long for a label,
odd templates, the schema's largest values, creations a quota, an admission webhook or RBAC
refuses, GitHub answering JIT registrations with errors or garbage, Buildkite answering HTML.
Each time the controller neither crashes nor spins (one pass, then its backoff), says what is
wrong once — Ready's message, an Event, one log line — with no secret and no traceback, and
keeps serving its other sets. Against the local API server and the GitHub/Buildkite fakes."""
from __future__ import annotations

import base64
import itertools
import logging
from typing import Any

import pytest

from gitscale.controller import status as st
from gitscale.controller.create import CREATE_RETRY
from gitscale.runnerset_api import PATCH_ID_MAX, REPLICAS_MAX
from tests.controller.buildkite_fake import FakeBuildkite
from tests.controller.harness import NS, TOKEN, Harness, github_spec
from tests.controller.test_buildkite import TOKEN as BK_TOKEN
from tests.controller.test_buildkite import with_api
from tests.kubeapi.errors import APIError, webhook_denied

JIT = "generate-jitconfig"
KYVERNO = ("\n\nresource Pod/default/x was blocked due to the following policies\n\n"
           "require-team:\n  check-team: 'validation error: label team is required'")


def ready(harness: Harness, name: str) -> dict[str, Any]:
    return dict(st.ready_of(harness.status(name)))


def said(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    """What the controller logged about set ``name`` (no traceback, ever)."""
    assert "Traceback" not in caplog.text
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(f"{NS}/{name}:")
            and r.levelno >= logging.WARNING]


def warnings(harness: Harness, name: str) -> list[dict[str, Any]]:
    return [e for e in harness.events(name) if e["type"] == "Warning"]


def test_a_name_too_long_for_a_label_is_an_invalid_spec_said_once(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """A RunnerSet may be named with up to 253 characters, a label value holds 63: its pods
    (labelled with its name) could never be made. Said at once, Stalled, nothing tried — not a
    creation refused pass after pass for ever."""
    caplog.set_level(logging.INFO, "gitscale.controller")
    name = "ci-" + "x" * 61  # 64
    harness.write(name, 2, 1)
    harness.write("ok", 1, 1)
    for _ in range(2):
        report = harness.sync(name)
        harness.clock.advance(CREATE_RETRY * 2)
    assert report.created == [] and harness.api.call_count("create", "pods") == 0
    assert harness.github.calls == []  # no registration, not even a dry run's
    cond = ready(harness, name)
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec")
    assert cond["message"] == (
        "metadata.name is 64 characters: each runner pod carries it as the value of its label "
        "gitscale.dev/runnerset, which holds at most 63; give the RunnerSet a name of 63 "
        "characters or fewer")
    assert st.condition_of(harness.status(name), st.STALLED)["status"] == "True"
    assert [e["reason"] for e in warnings(harness, name)] == ["InvalidSpec"]
    assert said(caplog, name) == [f"{NS}/{name}: {cond['message']}"]
    assert len(harness.sync("ok").created) == 1  # the others are served


def test_a_quota_met_midway_through_the_largest_scale_up_stops_its_creations(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """replicas and patchID at the schema's maximum, a ResourceQuota of 20 pods: the dry run
    passes, the 21st pod is refused. The pass's creations not started then are not tried
    (before: 10,000 pods asked for and 9,980 GitHub registrations made and undone in one
    pass); the next passes wait their backoff, then a dry run registers nothing."""
    caplog.set_level(logging.INFO, "gitscale.controller")
    harness.api.quota(NS, pods=20)
    harness.write("big", REPLICAS_MAX, PATCH_ID_MAX)
    report = harness.sync("big")
    in_flight = 8  # the harness's --concurrency: creations started before the refusal came
    assert len(report.created) == 20 and len(harness.pods("big")) == 20
    creations = harness.api.call_count("create", "pods")
    assert creations <= 1 + 20 + in_flight  # the dry run, the 20, those already in flight
    assert harness.github.count("POST", JIT) <= 20 + in_flight
    assert len(harness.github.runners) == 20  # every registration of a refused pod undone
    cond = ready(harness, "big")
    assert (cond["status"], cond["reason"]) == ("False", "QuotaExceeded")
    assert cond["message"].startswith(f"{REPLICAS_MAX - 20} of {REPLICAS_MAX} runner(s) "
                                      "missing: create pod default/big-")
    assert "exceeded quota: compute-resources, requested: pods=1, used: pods=20, limited: " \
           "pods=20" in cond["message"]
    assert "more runner(s) not tried after that; creations failed 1 pass(es) in a row, " \
           "tried again from 2026-11-23T09:00:10Z" in cond["message"]
    status = harness.status("big")
    assert (status["observedPatchID"], status["appliedPatchID"]) == (PATCH_ID_MAX, 0)
    assert report.requeue_after == CREATE_RETRY
    harness.sync("big")  # within the backoff: nothing tried, nothing said again
    assert harness.api.call_count("create", "pods") == creations
    assert len(said(caplog, "big")) == 1
    harness.clock.advance(CREATE_RETRY)
    harness.sync("big")  # the dry run is refused: nothing registered
    assert harness.api.call_count("create", "pods") == creations + 1
    assert len(harness.github.runners) == 20 and "(a dry run: no runner registered)" in ready(
        harness, "big")["message"]


def deny(code: int, reason: str) -> Any:
    def check(namespace: str, obj: dict[str, Any], existing: list[dict[str, Any]]) -> None:
        if obj["metadata"]["labels"].get("gitscale.dev/runnerset") == "rs":
            raise webhook_denied("validate.kyverno.svc-fail", KYVERNO, code, reason)
    return check


@pytest.mark.parametrize("code, reason, shown", [
    pytest.param(400, "", "400 Bad Request", id="webhook-400-no-reason"),
    pytest.param(422, "Invalid", "422 Invalid", id="webhook-422"),
])
def test_a_pod_an_admission_webhook_denies(harness: Harness, caplog: pytest.LogCaptureFixture,
                                          code: int, reason: str, shown: str) -> None:
    caplog.set_level(logging.INFO, "gitscale.controller")
    harness.api.admit("pods", deny(code, reason))
    harness.write("rs", 3, 1)
    harness.write("ok", 1, 1)
    report = harness.sync("rs")
    assert report.created == [] and harness.github.count("POST", JIT) == 0  # none registered
    cond = ready(harness, "rs")
    assert cond["reason"] == "CreateFailed"
    assert f'{shown}: admission webhook "validate.kyverno.svc-fail" denied the request: ' \
           in cond["message"] and "label team is required" in cond["message"]
    assert [e["reason"] for e in warnings(harness, "rs")] == ["CreateFailed"]
    harness.sync("rs")
    assert len(said(caplog, "rs")) == 1 and harness.api.call_count("create", "pods") == 1
    assert len(harness.sync("ok").created) == 1


@pytest.mark.parametrize("code, reason, message, words", [
    pytest.param(403, "Forbidden", 'secrets is forbidden: User "system:serviceaccount:'
                 'gitscale-system:gitscale-controller" cannot create resource "secrets" in API '
                 'group "" in the namespace "default"', 'cannot create resource "secrets"',
                 id="rbac"),
    pytest.param(400, "", 'admission webhook "secrets.example.com" denied the request: '
                 "Secrets must be SealedSecrets", "Secrets must be SealedSecrets", id="webhook"),
])
def test_a_jit_secret_the_api_refuses_registers_no_runner(
        harness: Harness, caplog: pytest.LogCaptureFixture, code: int, reason: str,
        message: str, words: str) -> None:
    """Where the platform registers runners, the Secret is tried as a dry run too, before any
    registration: a Role without ``create`` on secrets, or a webhook that denies them, costs
    no registration made and undone per pass (GitHub's content-creation limit is shared)."""
    caplog.set_level(logging.INFO, "gitscale.controller")
    harness.api.inject_error("create", "secrets", code=code, reason=reason, message=message,
                             times=10**6)
    harness.write("rs", 3, 1)
    for _ in range(3):
        report = harness.sync("rs")
        harness.clock.advance(CREATE_RETRY * 4)
    assert report.created == [] and harness.names("rs") == []
    assert harness.github.count("POST", JIT) == 0 and harness.github.runners == {}
    cond = ready(harness, "rs")
    assert cond["reason"] == "CreateFailed" and words in cond["message"]
    assert "(a dry run: no runner registered)" in cond["message"]
    assert TOKEN not in caplog.text + str(harness.status("rs"))


@pytest.mark.parametrize("code, reason, message", [
    pytest.param(403, "Forbidden", 'secrets is forbidden: User "system:serviceaccount:'
                 'gitscale-system:gitscale-controller" cannot patch resource "secrets" in API '
                 'group "" in the namespace "default"', id="rbac"),
    pytest.param(400, "", 'admission webhook "secrets.example.com" denied the request: '
                 "Secrets may not change owner", id="webhook"),
])
def test_a_jit_secret_handover_the_api_refuses_is_one_log_line_a_pass(
        harness: Harness, caplog: pytest.LogCaptureFixture, code: int, reason: str,
        message: str) -> None:
    """The runners are made (their pods run); their Secrets, refused their new owner (a Role
    without ``patch`` on secrets, a webhook), stay the set's for the next passes to hand
    over. The first pass says so in one line with its creations, not a line per runner and
    another for the creations; the next pass says them once in Ready."""
    caplog.set_level(logging.INFO, "gitscale.controller")
    harness.api.inject_error("patch", "secrets", code=code, reason=reason, message=message,
                             times=10**6)
    harness.write("rs", 3, 1)
    assert len(harness.sync("rs").created) == 3
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert lines[0].startswith("default/rs: created 3 runner(s) for patch 1; 3 JIT Secret(s) "
                               "not handed to their pod yet (the next passes try again): ")
    assert lines[0].count(message) == 1 and "(and 2 more runners alike)" in lines[0]
    caplog.clear()
    harness.sync("rs")  # the handovers tried again, refused again
    cond = ready(harness, "rs")
    assert cond["reason"] == "ApplyFailed" and cond["message"].count(message) == 1, cond
    assert [r.getMessage().count(message) for r in caplog.records] == [1]
    assert TOKEN not in caplog.text + str(harness.status("rs"))


@pytest.mark.parametrize("code, raw, reason, words", [
    pytest.param(404, None, "CreateFailed", "answered 404: Not Found (check the set's "
                 "spec.github.configURL, and that its credentials", id="404"),
    pytest.param(403, None, "CredentialsRefused",
                 "answered 403: Resource not accessible by integration", id="403"),
    pytest.param(500, None, "PlatformUnavailable", "answered 500", id="500"),
    pytest.param(201, b'{"runner": {"id": 5}, "encoded_jit', "CreateFailed",
                 "returned invalid or truncated JSON (status 201, 34 bytes)", id="truncated"),
    pytest.param(201, b'{"runner": "5", "encoded_jit_config": null}', "CreateFailed",
                 "the answer has no runner.id or encoded_jit_config", id="wrong-shape"),
    pytest.param(201, b'{"encoded_jit_config": "' + b"A" * (33 * 2**20) + b'"}',
                 "CreateFailed", "answered 201 with a body over 32 MiB", id="huge"),
])
def test_github_answering_a_registration_badly(
        harness: Harness, caplog: pytest.LogCaptureFixture, code: int, raw: bytes | None,
        reason: str, words: str) -> None:
    """GitHub's generate-jitconfig for one org fails; a set of another org is served. No
    Secret, no pod, said once, backed off: nothing more is asked before the backoff ends."""
    caplog.set_level(logging.INFO, "gitscale.controller")
    harness.github.outage(code, method="POST", path=f"orgs/acme/actions/runners/{JIT}",
                          message="Resource not accessible by integration" if code == 403
                          else "Not Found" if code == 404 else "", raw=raw)
    harness.write("rs", 3, 1)
    other = github_spec(harness.github.url)
    other["github"]["configURL"] = f"{harness.github.url}/other-org"
    harness.write("ok", 1, 1, spec=other)
    report = harness.sync("rs")
    assert report.created == [] and harness.names("rs") == []
    asked = harness.github.count("POST", JIT)
    assert 1 <= asked <= 3  # (those started together)
    assert harness.api.objects("secrets", NS, label_selector="gitscale.dev/runnerset") == []
    cond = ready(harness, "rs")
    assert cond["reason"] == reason and words in cond["message"], cond
    assert report.requeue_after == CREATE_RETRY
    harness.sync("rs")  # within the backoff
    assert harness.github.count("POST", JIT) == asked and len(said(caplog, "rs")) == 1
    assert len(harness.sync("ok").created) == 1
    harness.github.outage(None)
    harness.clock.advance(CREATE_RETRY)
    assert len(harness.sync("rs").created) >= 1  # slow start: 1, 2… after a refusal


@pytest.fixture
def buildkite() -> Any:
    server = FakeBuildkite(BK_TOKEN).start()
    try:
        yield server
    finally:
        server.stop()


def test_buildkite_answering_an_html_page_is_said_once_and_the_graceful_rule_holds(
        harness: Harness, buildkite: FakeBuildkite, caplog: pytest.LogCaptureFixture) -> None:
    """A proxy's sign-in page instead of the agents API: BusyKnown says so, the log says it
    once (before: nothing in the log), agents count as idle unless their pod says otherwise,
    and the API is asked no more than once a pass."""
    caplog.set_level(logging.INFO, "gitscale.controller")
    harness.api.create_object("secrets", {"metadata": {"name": "bk-api"}, "data": {
        "token": base64.b64encode(BK_TOKEN.encode()).decode()}}, NS)
    buildkite.raw = (200, "text/html; charset=utf-8",
                     b"<!DOCTYPE html><html><head><title>Sign in</title></head></html>")
    harness.write("bk", 2, 0, spec=with_api(buildkite.url))
    harness.sync("bk")
    for pod in harness.names("bk"):
        harness.api.set_pod_phase(NS, pod, "Running")
    for _ in range(3):
        report = harness.sync("bk")
        harness.clock.advance(30)
    assert report.errors == [] and harness.status("bk")["idle"] == 2
    busy = st.condition_of(harness.status("bk"), "BusyKnown")
    assert (busy["status"], busy["reason"]) == ("False", "AgentsAPIUnavailable")
    assert "returned an HTML page (status 200, 63 bytes)" in busy["message"]
    (line,) = said(caplog, "bk")
    assert line.startswith("default/bk: idle and busy not known (buildkite (") and \
        "returned an HTML page" in line and BK_TOKEN not in caplog.text
    assert len(buildkite.calls) <= 3
    buildkite.raw = None  # the proxy lets it through again: a later failure is said anew
    harness.sync("bk")
    assert st.condition_of(harness.status("bk"), "BusyKnown")["status"] == "True"


@pytest.mark.parametrize("containers, init, runs_in", [
    pytest.param([{"name": "main", "image": "i"}, {"name": "side", "image": "s"}], None,
                 "main", id="two-containers-none-named-runner"),
    pytest.param([{"name": "main", "image": "i"}], [{"name": "runner", "image": "s"}],
                 "main", id="init-container-named-runner"),
])
def test_the_runner_container_of_an_odd_template(harness: Harness, containers: Any,
                                                 init: Any, runs_in: str) -> None:
    """Named ``runner``, else the first container — never an init container."""
    spec = github_spec(harness.github.url)
    spec["template"]["spec"] = {"containers": containers, **(
        {"initContainers": init} if init else {})}
    harness.write("rs", 1, 1, spec=spec)
    assert len(harness.sync("rs").created) == 1
    pod = harness.pod(harness.names("rs")[0])["spec"]
    envs = {c["name"]: [e["name"] for e in c.get("env") or []]
            for c in pod["containers"] + pod.get("initContainers", [])}
    assert envs.pop(runs_in) == ["ACTIONS_RUNNER_INPUT_JITCONFIG"]
    assert all(v == [] for v in envs.values())


@pytest.mark.parametrize("template, words, reason", [
    pytest.param({"containers": []}, "spec.template.spec.containers needs at least one "
                 "container with a name and an image", "InvalidSpec", id="no-containers"),
    pytest.param({"containers": [{"name": "runner", "image": "i"}],
                  "initContainers": [{"name": "runner", "image": "s"}]},
                 'spec.containers[0].name: Duplicate value: "runner"', "CreateFailed",
                 id="init-container-of-the-same-name"),
])
def test_a_template_no_pod_can_be_made_of(harness: Harness, caplog: pytest.LogCaptureFixture,
                                          template: Any, words: str, reason: str) -> None:
    caplog.set_level(logging.INFO, "gitscale.controller")
    spec = github_spec(harness.github.url)
    spec["template"]["spec"] = template
    harness.write("rs", 2, 1, spec=spec)
    harness.sync("rs")
    harness.sync("rs")
    cond = ready(harness, "rs")
    assert cond["reason"] == reason and words in cond["message"]
    assert harness.github.runners == {} and harness.names("rs") == []
    assert len(said(caplog, "rs")) == 1



@pytest.mark.parametrize("status, reason", [
    pytest.param(429, "TooManyRequests", id="throttled-by-priority-and-fairness"),
    pytest.param(408, "Timeout", id="request-timeout"),
    pytest.param(500, "InternalError", id="server-error"),
])
def test_one_request_throttled_or_failed_does_not_stop_the_others(
        harness: Harness, status: int, reason: str) -> None:
    """A 429 (API priority and fairness), a 408 or a 500 is one request's: the other
    creations of the pass go on (a refusal every creation would meet, a quota, stops them)."""
    calls = itertools.count()

    def once(namespace: str, obj: dict[str, Any], existing: list[dict[str, Any]]) -> None:
        if next(calls) == 5:  # (the dry run is call 0)
            raise APIError(status, reason, "Too many requests, please try again later.")

    harness.api.admit("pods", once)
    harness.write("rs", 100, 1)
    report = harness.sync("rs")
    assert len(report.created) == 99, report.errors
    assert not any("not tried" in e for e in report.errors), report.errors
