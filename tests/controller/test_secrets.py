"""The controller's credentials never reach its log or a RunnerSet's status: those it reads are
held for masking (``gitscale.redact``), and the JIT configs it hands to runner pods, one per
runner and never held, never leave the Secret they go in."""
from __future__ import annotations

import logging
from typing import Any

import pytest

from gitscale.redact import known_secrets
from tests.controller.github_fake import _Handler
from tests.controller.harness import TOKEN, Harness


def ready(harness: Harness, name: str) -> dict[str, Any]:
    return next(c for c in harness.status(name)["conditions"] if c["type"] == "Ready")


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
