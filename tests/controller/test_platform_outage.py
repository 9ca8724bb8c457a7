"""GitHub and Buildkite failing (a 5xx, a secondary rate limit, no answer — at the GitHub App's
token exchange too) while the controller registers and unregisters runners, through the real ``kubernetes`` client against the local API server
and the platforms' fakes: no busy runner removed, nothing created beyond replicas, the
platform given time rather than asked again by every pass (``outage.py``), and Ready saying
``PlatformUnavailable`` — an outage, not a refused pod.

(r, p) is a spec write of replicas r and patch ID p.
"""
from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from gitscale.clients.github_app import NOT_REFUSED
from gitscale.controller.outage import OUTAGE_WAIT
from tests.controller.buildkite_fake import FakeBuildkite
from tests.controller.github_fake import DROP
from tests.controller.harness import NS, Harness, buildkite_spec
from tests.controller.test_github import _app_key
from tests.controller.test_refused_credentials import app_secret
from tests.controller.test_secrets import assert_masked


def ready(harness: Harness, name: str) -> dict[str, Any]:
    return dict(harness.status(name)["conditions"][0])


def test_300_runners_to_0_while_github_fails_its_deletes(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """A 300-runner set, 30 of them busy, written (0, 0) while GitHub answers every DELETE
    with a 503: one burst of requests (as many as are in flight), then none from any pass
    until GitHub's wait is over; no runner removed without its unregistration, none busy ever;
    then the 270 idle ones go in one pass, and the busy ones stay until their jobs are done."""
    harness.write("rs", 300, 1)
    assert len(harness.sync("rs").created) == 300
    names = harness.names("rs")
    busy = set(names[::10])
    for name in names:
        harness.running(name, busy=name in busy)
    harness.sync("rs")
    harness.github.outage(503, method="DELETE")
    harness.write("rs", 0, 0)
    caplog.set_level(logging.INFO, "gitscale.controller")

    report = harness.sync("rs")
    sent = harness.github.count("DELETE")
    assert 1 <= sent <= 8  # the removals in flight when the first 503 came back (concurrency)
    assert report.deleted == [] and len(harness.pods("rs")) == 300
    cond = ready(harness, "rs")
    assert (cond["status"], cond["reason"]) == ("False", "PlatformUnavailable")
    # One failure, said once: the DELETEs that got a 503 and those not sent after it alike
    assert cond["message"].count("answered 503") == 1, cond["message"]
    assert cond["message"].endswith("(1 failure(s) in a row) (and 269 more runners alike)")
    (event,) = [e for e in harness.events("rs") if e["type"] == "Warning"]
    assert event["reason"] == "PlatformUnavailable" and event["message"] == cond["message"]
    assert [r.getMessage().count("answered 503") for r in caplog.records
            if r.levelno >= logging.WARNING] == [1]

    before = len(harness.github.calls)
    for _ in range(3):  # passes within the wait (pod events, the error retry) ask GitHub nothing
        harness.clock.advance(1)
        report = harness.sync("rs")
        assert report.deleted == [] and "is not asked again before" in " ".join(report.errors)
    assert len(harness.github.calls) == before
    assert ready(harness, "rs")["reason"] == "PlatformUnavailable"

    harness.github.outage(None)
    harness.clock.advance(OUTAGE_WAIT)
    report = harness.sync("rs")
    assert sorted(report.deleted) == sorted(set(names) - busy) and report.errors == []
    assert set(harness.names("rs")) == busy  # never a busy one
    status = harness.status("rs")
    assert (status["replicas"], status["busy"], status["idle"]) == (30, 30, 0)
    assert ready(harness, "rs") | {"lastTransitionTime": ""} == {
        "type": "Ready", "status": "True", "reason": "Reconciled", "lastTransitionTime": "",
        "observedGeneration": 2, "message": "30 of 0 runner(s): 0 pending, 0 idle, 30 busy; the "
        "surplus goes as its runners finish their jobs (never a busy runner)"}
    for name in sorted(busy)[:3]:  # their jobs done: gone on the pass their pods bring
        harness.stop(name)
    assert sorted(harness.sync("rs").deleted) == sorted(busy)[:3]
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) <= 2, [r.getMessage() for r in warned]  # the failure, the wait: once each
    assert not [r for r in caplog.records if r.exc_info]


def test_github_down_is_said_once_in_ready_its_event_and_the_log(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """Every call failing: a pass whose runner list is not asked for (GitHub's wait) while its
    creations wait out the backoff of an earlier pass's refusal has the same failure from
    both, worded with two waits. Ready, its Event and the log line say it once, with the
    latest wait."""
    harness.write("rs", 3, 1)
    harness.sync("rs")
    for name in harness.names("rs"):
        harness.running(name)
    harness.sync("rs")
    caplog.set_level(logging.INFO, "gitscale.controller")
    harness.github.outage(503)
    harness.write("rs", 5, 2)
    messages = []
    for _ in range(5):  # GitHub's waits (5 s, 10 s) and the creations' backoff (10 s) overlap
        harness.clock.advance(3)
        harness.sync("rs")
        messages.append(ready(harness, "rs")["message"])
    assert all(m.count("answered 503") == 1 for m in messages), messages
    assert any("(2 failure(s) in a row)" in m for m in messages)  # (the case of two waits)
    warned = [e["message"] for e in harness.events("rs") if e["type"] == "Warning"]
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warned and logged
    assert all(m.count("answered 503") == 1 for m in warned + logged), warned + logged


def test_registrations_while_github_fails_back_off_for_every_set_of_its_credentials(
        harness: Harness) -> None:
    """generate-jitconfig answers 502: the set says PlatformUnavailable (not CreateFailed: no
    pod was refused), and another set of the same credentials asks GitHub nothing while it is
    given time; once it answers, both are completed, to their replicas and no further."""
    harness.github.outage(502, method="POST", path="generate-jitconfig")
    harness.write("a", 3, 1)
    report = harness.sync("a")
    assert report.created == [] and harness.pods("a") == []
    assert 1 <= harness.github.count("POST", "generate-jitconfig") <= 3
    cond = ready(harness, "a")
    assert (cond["status"], cond["reason"]) == ("False", "PlatformUnavailable")
    assert "answered 502" in cond["message"]

    asked = len(harness.github.calls)
    harness.write("b", 2, 1)
    report = harness.sync("b")
    assert report.created == [] and len(harness.github.calls) == asked
    cond = ready(harness, "b")
    assert cond["reason"] == "PlatformUnavailable" and "is not asked again before" in cond[
        "message"]

    harness.github.outage(None)
    harness.clock.advance(60)  # past GitHub's wait and the sets' own creation backoff
    assert len(harness.sync("a").created) == 3 and len(harness.sync("b").created) == 2
    for name, replicas in (("a", 3), ("b", 2)):
        assert len(harness.pods(name)) == replicas
        assert ready(harness, name)["status"] == "True"
    assert len(harness.github.runners) == 5  # no registration left over from the outage


def test_a_secondary_rate_limit_on_registration_is_an_outage_not_refused_credentials(
        harness: Harness) -> None:
    """GitHub's secondary limit may come as a bare 403 (no retry-after, requests remaining):
    its message says so. It is waited out (a minute, GitHub's advice), never taken for a
    refused token (which would have the Secret read again on every pass)."""
    harness.github.outage(403, method="POST", path="generate-jitconfig",
                          message="You have exceeded a secondary rate limit. Please wait a few "
                                  "minutes before you try again.")
    harness.write("rs", 2, 1)
    report = harness.sync("rs")
    assert report.created == []
    cond = ready(harness, "rs")
    assert (cond["status"], cond["reason"]) == ("False", "PlatformUnavailable")
    assert "rate limited until" in cond["message"]
    asked = len(harness.github.calls)
    harness.clock.advance(30)  # the set's own backoff is over, the limit is not
    assert harness.sync("rs").created == [] and len(harness.github.calls) == asked
    secrets = [line for line in harness.api.log if "/secrets/gh-creds" in line]
    assert len(secrets) == 1  # read once, not again as if refused


@pytest.fixture
def buildkite() -> Iterator[FakeBuildkite]:
    server = FakeBuildkite("bkua_outage_token").start()
    try:
        yield server
    finally:
        server.stop()


def test_the_buildkite_agents_api_down_is_asked_once_a_wait_not_every_pass(
        harness: Harness, buildkite: FakeBuildkite) -> None:
    harness.api.create_object("secrets", {"metadata": {"name": "bk-api"}, "data": {
        "token": base64.b64encode(b"bkua_outage_token").decode()}}, NS)
    spec = buildkite_spec()
    spec["buildkite"].update(organization="acme", apiTokenSecret="bk-api", apiURL=buildkite.url)
    harness.write("bk", 2, 1, spec=spec)
    harness.sync("bk")
    busy, idle = harness.names("bk")
    for name in (busy, idle):
        harness.api.set_pod_phase(NS, name, "Running")
    buildkite.connect(busy, busy=True)
    buildkite.connect(idle)
    harness.sync("bk")
    buildkite.down = 502
    harness.clock.advance(20)  # the list read before is too old now
    harness.sync("bk")
    asked = len(buildkite.calls)
    for _ in range(3):
        harness.clock.advance(1)
        harness.sync("bk")
    assert len(buildkite.calls) == asked  # not asked again within its wait
    cond = next(c for c in harness.status("bk")["conditions"] if c["type"] == "BusyKnown")
    assert (cond["status"], cond["reason"]) == ("False", "AgentsAPIUnavailable")
    assert "answered 502" in cond["message"] and "not asked again" in cond["message"]
    assert harness.names("bk") == sorted((busy, idle))  # a scale-up write never removes
    buildkite.down = None
    harness.clock.advance(OUTAGE_WAIT)
    harness.sync("bk")
    cond = next(c for c in harness.status("bk")["conditions"] if c["type"] == "BusyKnown")
    assert cond["status"] == "True" and len(buildkite.calls) > asked


PORTAL = b"<!DOCTYPE html><html><body>Sign in to the guest network</body></html>"


@pytest.mark.parametrize(("code", "raw", "said"), [
    pytest.param(503, None, "access_tokens answered 503: could not get an installation token",
                 id="503"),
    pytest.param(DROP, None, "access_tokens failed: the connection to 127.0.0.1", id="dropped"),
    pytest.param(200, PORTAL, "access_tokens answered 200 (text/html; charset=utf-8) with an "
                 "HTML page, not GitHub's answer", id="captive-portal"),
    pytest.param(201, b'{"id": 1}', "access_tokens answered 201 (application/json) with JSON "
                 "without token or expires_at", id="json-without-token"),
])
def test_github_failing_at_the_app_token_exchange_is_an_outage_not_refused_credentials(
        harness: Harness, caplog: pytest.LogCaptureFixture, code: int, raw: bytes | None,
        said: str) -> None:
    """GitHub answers the App's token exchange 503, drops the connection, or a proxy (a
    captive portal) answers it with its own page: the set says PlatformUnavailable — GitHub
    down, as a 503 of the runner list is said —, never CredentialsRefused (an on-call engineer
    would rotate a good key); no set of the credentials exchanges again before GitHub's wait
    is over, the Secret is not read again as if refused, and once GitHub answers, the runners
    are made."""
    pem, public = _app_key()
    harness.github.app = ("4242", public)
    app_secret(harness, pem)
    kind = "text/html; charset=utf-8" if raw == PORTAL else "application/json"
    harness.github.outage(code, method="POST", path="access_tokens", raw=raw,
                          headers={"Content-Type": kind})
    caplog.set_level(logging.INFO, "gitscale")
    harness.write("rs", 3, 1)
    assert harness.sync("rs").created == [] and harness.pods("rs") == []
    cond = ready(harness, "rs")
    assert (cond["status"], cond["reason"]) == ("False", "PlatformUnavailable"), cond
    assert said in cond["message"] and "GitHub is not asked again before" in cond["message"]
    (event,) = [e for e in harness.events("rs") if e["type"] == "Warning"]
    assert event["reason"] == "PlatformUnavailable"
    assert "credentials refused" not in caplog.text.lower()
    assert_masked(harness, caplog.text, NOT_REFUSED, [pem, pem.splitlines()[1], public])
    exchanges = harness.github.count("POST", "access_tokens")
    assert exchanges == 1

    harness.write("other", 2, 1)  # another set of the same credentials: GitHub's wait too
    for name in ("rs", "other"):
        harness.clock.advance(1)
        assert harness.sync(name).created == []
        assert ready(harness, name)["reason"] == "PlatformUnavailable"
    assert harness.github.count("POST", "access_tokens") == exchanges
    secrets = [line for line in harness.api.log if "/secrets/gh-creds" in line]
    assert len(secrets) == 1  # read once: not dropped and read again as refused credentials

    harness.github.outage(None)
    harness.clock.advance(60)  # past GitHub's wait and the sets' own creation backoff
    assert len(harness.sync("rs").created) == 3 and len(harness.sync("other").created) == 2
    assert harness.github.count("POST", "access_tokens") == exchanges + 1
    for name in ("rs", "other"):
        assert ready(harness, name)["status"] == "True"
    assert not [r for r in caplog.records if r.exc_info]
    assert "BEGIN" not in caplog.text and "credentials refused" not in caplog.text.lower()
