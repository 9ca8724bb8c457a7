"""Credentials GitHub refuses for good (a GitHub App whose key was revoked, a revoked token),
through the real ``kubernetes`` client against the local API server and the GitHub fake: the
refusal is given time — a backoff from the failing pass's retry up to 5 minutes, not a token
exchange per pass —, said in the log once per streak, still said by Ready on every pass, and a
credential rotated in its Secret is tried on the next pass (``refusals.py``)."""
from __future__ import annotations

import base64
import gc
import logging
import weakref
from typing import Any

import kubernetes
import pytest

from gitscale.controller.github import GitHub
from gitscale.controller.platforms import CREDENTIALS_MAX_AGE
from gitscale.controller.refusals import CREDENTIALS_RETRY, CREDENTIALS_RETRY_MAX
from tests.controller.harness import NS, TOKEN, Harness, github_spec
from tests.controller.test_github import _app_key

EXCHANGE = "access_tokens"


def app_secret(harness: Harness, pem: str) -> None:
    """The set's credentials Secret: GitHub App 4242, installation 77, key ``pem``."""
    harness.api.mutate_object("secrets", "gh-creds", lambda o: o.update(data={
        k: base64.b64encode(v.encode()).decode() for k, v in {
            "github_app_id": "4242", "github_app_installation_id": "77",
            "github_app_private_key": pem}.items()}), NS)


def token_secret(harness: Harness, token: str) -> None:
    harness.api.mutate_object("secrets", "gh-creds", lambda o: o.update(data={
        "github_token": base64.b64encode(token.encode()).decode()}), NS)


def ready(harness: Harness, name: str) -> dict[str, Any]:
    return next(c for c in harness.status(name)["conditions"] if c["type"] == "Ready")


def warned(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_revoked_app_key_is_exchanged_with_backoff_and_a_rotated_one_at_once(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """Twenty passes 30 s apart over ten minutes, the App's key revoked (every exchange 401):
    exchanges at 0, 10, 30, 70, 150 and 310 s (the backoff: 10 s doubling, up to 5 minutes),
    not twenty; one warning for the streak; Ready CredentialsRefused on every pass. The key
    rotated in the Secret is tried on the very next pass, and the runners made."""
    pem, public = _app_key()
    revoked, _ = _app_key()
    harness.github.app = ("4242", public)
    app_secret(harness, revoked)
    caplog.set_level(logging.INFO, "gitscale.controller")
    harness.write("rs", 3, 1)
    for _ in range(20):
        report = harness.sync("rs")
        assert report.created == []
        cond = ready(harness, "rs")
        assert (cond["status"], cond["reason"]) == ("False", "CredentialsRefused"), cond
        assert "answered 401" in cond["message"]
        harness.clock.advance(30)
    # 0, 30 (10 s over), 60 (30 over: 20 s), 90 (70 over: 40 s), 150, 330 (310 over: 160 s)
    assert harness.github.count("POST", EXCHANGE) == 6
    assert len(warned(caplog)) == 1, warned(caplog)
    assert warned(caplog)[0].startswith("default/rs: credentials refused: github app 4242: POST")
    assert "tried again in 10s, or at once when their Secret changes" in warned(caplog)[0]
    assert "tried again after a backoff of up to 5m, at once when Secret default/gh-creds " \
        "changes" in cond["message"]

    app_secret(harness, pem)  # rotated: the App's current key
    harness.catch_up()
    asked = harness.github.count("POST", EXCHANGE)
    assert len(harness.sync("rs").created) == 3  # (no clock advance: at once)
    assert harness.github.count("POST", EXCHANGE) == asked + 1
    assert ready(harness, "rs")["status"] == "True"
    harness.sync("rs")  # the new client accepted: the streak is over, said once
    ended = [r.getMessage() for r in caplog.records if "accepted again" in r.getMessage()]
    assert ended == ["default/gh-creds: credentials accepted again, after 6 refusal(s) over 10m"]
    assert len(warned(caplog)) == 1 and "BEGIN" not in caplog.text


def test_a_revoked_token_lists_runners_with_backoff_and_starts_over_after_working(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """A token revoked under running runners (each pass wants the runner list): the list is
    asked for at the backoff's pace, for every set of the Secret at once, and the runners are
    left alone (busy for all anyone knows). Fixed on GitHub's side (the Secret unchanged), it
    works after the wait; revoked again later, the backoff starts over from its first step."""
    harness.write("rs", 2, 1)
    harness.write("other", 1, 1)
    assert len(harness.sync("rs").created) == 2 and len(harness.sync("other").created) == 1
    for name in harness.names("rs") + harness.names("other"):
        harness.running(name)
    harness.sync("rs")
    caplog.set_level(logging.INFO, "gitscale.controller")
    harness.github.tokens = {"ghp-only-the-new-one"}
    lists = harness.github.count("GET", "actions/runners$")
    for _ in range(10):  # 100 s
        harness.clock.advance(10)
        for name in ("rs", "other"):
            assert harness.sync(name).deleted == []
            assert ready(harness, name)["reason"] == "CredentialsRefused"
    # tries at 10, 20 (10 s over), 40 (20 over), 80 (40 over): not 20 lists, one a pass
    assert harness.github.count("GET", "actions/runners$") - lists == 4
    assert len(harness.names("rs")) == 2 and len(warned(caplog)) == 1, warned(caplog)
    assert TOKEN not in caplog.text

    harness.github.tokens.add(TOKEN)  # GitHub takes the token again
    harness.clock.advance(CREDENTIALS_RETRY_MAX)
    harness.sync("rs")
    assert ready(harness, "rs")["status"] == "True"
    harness.clock.advance(60)
    harness.sync("other")  # the streak over (a client accepted since)
    harness.github.tokens = set()  # revoked again, a while later
    lists = harness.github.count("GET", "actions/runners$")
    harness.sync("rs")
    harness.clock.advance(CREDENTIALS_RETRY)  # the first step again, not 5 minutes
    harness.sync("rs")
    assert harness.github.count("GET", "actions/runners$") - lists == 2
    said = warned(caplog)
    assert len(said) == 2 and "(still" not in said[1], said  # a new streak, said again


def test_a_token_rotated_in_its_secret_during_the_backoff_is_tried_at_once(
        harness: Harness) -> None:
    harness.github.tokens = {"ghp-rotated"}
    harness.write("rs", 1, 1)
    for _ in range(4):  # refused, then waits of 10, 20, 40 s: the last pass within one
        assert harness.sync("rs").created == []
        harness.clock.advance(5)
    calls = len(harness.github.calls)
    assert harness.sync("rs").created == [] and len(harness.github.calls) == calls
    token_secret(harness, "ghp-rotated")
    harness.catch_up()
    assert len(harness.sync("rs").created) == 1
    assert ready(harness, "rs")["status"] == "True"


@pytest.mark.parametrize("group", [None, "gpu"])
def test_credentials_that_may_read_runners_but_not_register_them_are_not_taken_as_accepted(
        harness: Harness, caplog: pytest.LogCaptureFixture, group: str | None) -> None:
    """An App with "Self-hosted runners: Read" only: the runner list (and the runner group's
    id) answered, every registration 403. Forty passes 30 s apart: one warning, no "accepted
    again" (a read does not vouch for a refused write), the registrations tried at a backoff
    growing to 5 minutes, not every pass; and a set of the same Secret scaling down meanwhile
    lists and unregisters its runners, its Ready not made CredentialsRefused by calls it never
    made."""
    spec = None
    if group is not None:
        spec = github_spec(harness.github.url, runnerGroup=group)
    harness.write("rs", 2, 1, spec=spec)
    harness.write("other", 2, 1, spec=spec)
    assert len(harness.sync("rs").created) == 2 and len(harness.sync("other").created) == 2
    for name in harness.names("rs") + harness.names("other"):
        harness.running(name)
    caplog.set_level(logging.INFO, "gitscale.controller")
    harness.github.outage(403, method="POST", path="generate-jitconfig",
                          message="Resource not accessible by integration")
    harness.write("rs", 4, 1)  # two more wanted: every pass would register them
    harness.write("other", 1, 0)  # one fewer: unregistered while registrations are refused
    registrations = harness.github.count("POST", "generate-jitconfig")
    tried = []
    for i in range(40):
        before = harness.github.count("POST", "generate-jitconfig")
        harness.sync("rs")
        if harness.github.count("POST", "generate-jitconfig") > before:
            tried.append(i * 30)
        cond = ready(harness, "rs")
        assert (cond["status"], cond["reason"]) == ("False", "CredentialsRefused"), cond
        if i == 0:
            harness.sync("other")
            cond = ready(harness, "other")
            assert cond["reason"] != "CredentialsRefused", cond
        harness.clock.advance(30)
    assert len(harness.names("other")) == 1  # (a running idle runner unregistered)
    assert harness.github.count("DELETE", "actions/runners/") >= 1
    said = warned(caplog)
    assert [m for m in said if "credentials refused" in m and "(still" not in m] == said[:1]
    assert "Resource not accessible by integration" in said[0]
    assert len(said) <= 2, said  # (a reminder after REMIND_EVERY: 30 minutes)
    assert "accepted again" not in caplog.text
    # 10 s doubling up to 5 minutes, met by 30 s passes: not one a pass
    gaps = [b - a for a, b in zip(tried, tried[1:])]
    assert len(tried) <= 9 and gaps[-2:] == [300, 300], tried
    # (the first pass sends both of its registrations at once; later ones one, slow start)
    assert harness.github.count("POST", "generate-jitconfig") - registrations <= len(tried) + 1


def test_a_refusal_holds_no_client_and_goes_with_the_last_set_that_met_it(
        harness: Harness) -> None:
    """The refusal of a set's credentials names the refused client, without keeping it (nor
    its connection pool) alive; once the set is deleted, nothing of it is kept."""
    harness.github.tokens = {"ghp-not-this-one"}
    harness.write("rs", 1, 1)
    assert harness.sync("rs").created == []
    platforms = harness.controller.ctx.platforms
    refusals = platforms._refusals._by_key
    assert len(refusals) == 1 and not any(
        isinstance(v, GitHub) for r in refusals.values() for v in vars(r).values())
    (made,) = [m for got in platforms._used.values() for m in got.values() if m is not None]
    client = weakref.ref(made.client)
    del made
    custom = kubernetes.client.CustomObjectsApi(harness.controller.kube.api)
    custom.delete_namespaced_custom_object("gitscale.dev", "v1alpha1", NS, "runnersets", "rs")
    harness.sync("rs")  # (no pod: the finalizer goes at once)
    harness.catch_up()
    harness.sync("rs")  # gone
    gc.collect()
    assert refusals == {} and client() is None


def test_an_app_refused_a_permission_keeps_its_token_for_the_next_attempts(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """A GitHub App with "Self-hosted runners: Read" only: every registration 403. The
    refusal is of one kind of call, not of the credential: the client (its installation token,
    its runner list) serves on, and the registrations are tried at the backoff's pace — not
    one token exchange (and one runner list read) per refused attempt. A token is exchanged
    only when the client is made again, with its Secret read (every ``CREDENTIALS_MAX_AGE``):
    then a permission granted on the installation meanwhile is in the new token. Granted, the
    runners are made and the streak ends, said once."""
    pem, public = _app_key()
    harness.github.app = ("4242", public)
    app_secret(harness, pem)
    harness.github.outage(403, method="POST", path="generate-jitconfig",
                          message="Resource not accessible by integration")
    caplog.set_level(logging.INFO, "gitscale.controller")
    harness.write("rs", 2, 1)
    tried = []
    for i in range(20):  # ten minutes, a pass every 30 s
        before = harness.github.count("POST", "generate-jitconfig")
        assert harness.sync("rs").created == []
        if harness.github.count("POST", "generate-jitconfig") > before:
            tried.append(i * 30)
        assert ready(harness, "rs")["reason"] == "CredentialsRefused"
        harness.clock.advance(30)
    # 10 s doubling, met by 30 s passes: at 0, 30 (10 s over), 60 (20 s), 120 (40 s), 210
    # (80 s), 390 (160 s) — six refused attempts
    assert tried == [0, 30, 60, 120, 210, 390], tried
    # exchanged when the client was made (at 0 and every 5 minutes after), not per attempt
    assert harness.github.count("POST", EXCHANGE) == 1 + 570 // int(CREDENTIALS_MAX_AGE)
    said = warned(caplog)
    assert len(said) == 1 and "Resource not accessible by integration" in said[0], said

    harness.github.outage(None)  # the permission granted on the installation
    harness.clock.advance(CREDENTIALS_RETRY_MAX)
    assert len(harness.sync("rs").created) == 2
    assert ready(harness, "rs")["status"] == "True"
    harness.sync("rs")
    ended = [r.getMessage() for r in caplog.records if "accepted again" in r.getMessage()]
    assert len(ended) == 1, ended


def test_a_refused_token_names_the_secret_and_key_it_was_read_from(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """The person paged finds the credential from the message alone: the Secret and its key,
    in Ready and in the log; never the token."""
    harness.write("rs", 1, 1)
    harness.sync("rs")
    for name in harness.names("rs"):
        harness.running(name)
    harness.sync("rs")
    caplog.set_level(logging.INFO, "gitscale.controller")
    harness.github.tokens = {"ghp-only-the-new-one"}
    harness.clock.advance(10)
    harness.sync("rs")
    message = ready(harness, "rs")["message"]
    assert "answered 401: Bad credentials" in message, message
    assert f"(the credential of Secret {NS}/gh-creds: key github_token)" in message, message
    assert f"Secret {NS}/gh-creds: key github_token" in warned(caplog)[0]
    assert TOKEN not in message and TOKEN not in caplog.text
