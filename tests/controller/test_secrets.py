"""The controller's credentials never reach its log or a RunnerSet's status: those it reads are
held for masking (``gitscale.redact``), and the JIT configs it hands to runner pods, one per
runner and never held, never leave the Secret they go in."""
from __future__ import annotations

import base64
import logging
from typing import Any

import pytest

from gitscale.redact import known_secrets
from tests.controller.github_fake import _Handler
from tests.controller.harness import TOKEN, Harness


def ready(harness: Harness, name: str) -> dict[str, Any]:
    return next(c for c in harness.status(name)["conditions"] if c["type"] == "Ready")


def assert_masked(harness: Harness, log: str, said: str, secrets: list[str]) -> None:
    """``said`` (with its ``***``) is in the set's Ready message and in the log; no secret is
    in its status or the log."""
    message = ready(harness, "rs")["message"]
    assert said in message, message
    assert said in log, log
    shown = str(harness.status("rs")) + log
    assert secrets and not [s for s in secrets if s in shown]


def test_the_token_read_is_held_and_no_jit_config_is(harness: Harness) -> None:
    """The token of the credentials Secret is held as it is read (every re-read holds it again:
    the most recent stay held); the JIT configs are not: one per runner would fill the registry,
    and push out the credentials, in a controller that runs for months."""
    harness.write("rs", 3, 0)
    assert len(harness.sync("rs").created) == 3
    held = known_secrets()
    assert TOKEN in held
    jit = {f"jit-{r.name}-{r.id}" for r in harness.github.runners.values()}
    assert len(jit) == 3 and not jit & held


def test_a_token_github_echoes_is_masked_in_status_and_log(
        harness: Harness, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """GitHub (or a proxy before it) refuses the token and quotes it in its error."""
    reply = _Handler._reply

    def echoing(self: _Handler, code: int, body: Any = None,
                headers: dict[str, str] | None = None) -> None:
        if code == 401:
            body = {"message": f"Bad credentials: {self.headers.get('Authorization')}"}
        reply(self, code, body, headers)

    monkeypatch.setattr(_Handler, "_reply", echoing)
    harness.github.tokens = {"ghp-the-token-github-now-wants"}
    caplog.set_level(logging.INFO, "gitscale")
    harness.write("rs", 2, 0)
    assert harness.sync("rs").created == []
    assert "answered 401: Bad credentials: ***" in ready(harness, "rs")["message"]
    assert "Bad credentials: ***" in caplog.text
    assert TOKEN not in str(harness.status("rs")) + caplog.text


def test_a_credential_an_api_quotes_is_masked_in_status_and_log(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """Whatever brings a credential the controller holds into a message — here an admission
    webhook whose refusal quotes it, escaped as JSON would — the RunnerSet's status and the
    controller's log show ``***``: both pass through ``redact``, not only the HTTP client's
    own errors."""
    harness.write("rs", 1, 0)
    assert len(harness.sync("rs").created) == 1  # the credentials are read (and held)
    harness.api.inject_error("create", "pods", code=400, reason="BadRequest", times=1000,
                             message='admission webhook "policy.example.com" denied the '
                                     f'request: env {{"GITHUB_TOKEN": "{TOKEN}"}} is not '
                                     "allowed")
    caplog.set_level(logging.INFO, "gitscale")
    harness.write("rs", 3, 0)
    assert harness.sync("rs").created == []
    assert_masked(harness, caplog.text, '{"GITHUB_TOKEN": "***"} is not allowed', [TOKEN])
    harness.api.clear_errors()


def test_a_controller_log_line_is_masked_traceback_and_all(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """The filter is on the controller's logger: every handler gets the record masked (its
    message, arguments and the traceback of its exception)."""
    harness.write("rs", 1, 0)
    harness.sync("rs")
    log = logging.getLogger("gitscale.controller")
    try:
        raise ValueError(f"a library quoting {TOKEN!r}")
    except ValueError:
        log.exception("%s: something failed with %s", "default/rs", TOKEN)
    assert "default/rs: something failed with ***" in caplog.text
    assert "ValueError: a library quoting '***'" in caplog.text
    assert TOKEN not in caplog.text


def test_a_jit_config_quoted_by_a_refusal_of_its_secret_is_masked(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    """An admission webhook refuses the runner's Secret and quotes the object: its JIT
    config, as the Secret carries it (base64) and decoded, shows ``***`` in status and log."""
    quoted: list[str] = []

    def webhook(verb: str, resource: str, query: dict[str, str]) -> None:
        if (verb, resource) != ("create", "secrets") or query.get("dryRun"):
            return  # (the dry run's placeholder config passes the policy)
        with harness.github.lock:
            runner = max(harness.github.runners.values(), key=lambda r: r.id)
        jit = f"jit-{runner.name}-{runner.id}"
        encoded = base64.b64encode(jit.encode()).decode()
        quoted.extend((jit, encoded))
        harness.api.inject_error("create", "secrets", code=400, reason="BadRequest",
                                 message='admission webhook "policy.example.com" denied the '
                                         f'request: data.jitconfig "{encoded}" ({jit}) is '
                                         "not allowed")

    harness.api.on_call(webhook)
    caplog.set_level(logging.INFO, "gitscale")
    harness.write("rs", 1, 0)
    assert harness.sync("rs").created == []
    assert_masked(harness, caplog.text, 'data.jitconfig "***" (***) is not allowed', quoted)
    assert harness.github.runners == {}  # refused: unregistered


def test_a_masked_refusal_of_a_secret_keeps_its_retry_after(harness: Harness) -> None:
    """The masked copy of a Secret's refusal that quotes the JIT config is the same answer: it
    keeps the ``Retry-After`` the API server asked for (the set's creations wait that long,
    not 10 s) and whether the API server was reachable."""
    def webhook(verb: str, resource: str, query: dict[str, str]) -> None:
        if (verb, resource) != ("create", "secrets") or query.get("dryRun"):
            return
        with harness.github.lock:
            runner = max(harness.github.runners.values(), key=lambda r: r.id)
        harness.api.inject_error("create", "secrets", code=429, reason="TooManyRequests",
                                 message=f"too many requests for jit-{runner.name}-{runner.id}",
                                 retry_after=45)

    harness.api.on_call(webhook)
    harness.write("rs", 1, 0)
    report = harness.sync("rs")
    assert report.created == [] and "too many requests for ***" in report.errors[0], report
    assert report.requeue_after == 45.0, report.requeue_after
