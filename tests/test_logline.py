"""The line run, serve and a notification write on stderr: the time, then what happened; or,
with ``GITSCALE_LOG_FORMAT=json``, one JSON object a message, every value masked."""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import pytest

from gitscale import logline
from gitscale.errors import InputError
from gitscale.logline import FORMAT_ENV, level_of, log, log_format, start, warn
from gitscale.redact import MASK, forget_held, hold, secret_forms


def test_a_line_is_the_time_in_utc_then_the_message(capsys: pytest.CaptureFixture[str]) -> None:
    before = datetime.now(timezone.utc).replace(microsecond=0)
    log("pass at 2026-11-21T09:00:00Z: no change")
    after = datetime.now(timezone.utc)
    out, err = capsys.readouterr()
    assert out == ""
    found = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) (.*)\n", err)
    assert found is not None, err
    assert before <= datetime.fromisoformat(found.group(1)) <= after
    assert found.group(2) == "pass at 2026-11-21T09:00:00Z: no change"


def json_lines(err: str) -> list[dict[str, str]]:
    """Each line of ``err`` as the JSON object it must be."""
    return [json.loads(line) for line in err.splitlines()]


def test_json_is_one_object_a_message_with_its_lines_kept(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FORMAT_ENV, "json")
    assert start("run") == "json"
    before = datetime.now(timezone.utc)
    log("pass failed (1 in a row): git push failed\nhint: ask an admin", level="error")
    log("warning: --reservation 1m is shorter than --resync 5m")
    log("linux: demand read again", runner_set="linux")
    after = datetime.now(timezone.utc)
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 3, err
    first, warned, about = json_lines(err)
    assert list(first) == ["time", "level", "component", "msg"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["time"])
    stamp = datetime.fromisoformat(first["time"])
    assert before.replace(microsecond=before.microsecond // 1000 * 1000) <= stamp <= after
    assert first == {"time": first["time"], "level": "error", "component": "run",
                     "msg": "pass failed (1 in a row): git push failed\nhint: ask an admin"}
    assert (warned["level"], warned["msg"]) == (
        "warning", "warning: --reservation 1m is shorter than --resync 5m")
    assert (about["level"], about["set"]) == ("info", "linux")


@pytest.mark.parametrize("secret", [
    pytest.param("plain-secret-0123456789", id="plain"),
    pytest.param('quo"te\\back-0123456789', id="json-escaped"),
    pytest.param("caf\u00e9-secret-0123456789", id="not-ascii"),
])
def test_json_masks_every_value_of_the_object(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        secret: str) -> None:
    monkeypatch.setenv(FORMAT_ENV, "json")
    start("serve")
    hold(secret)
    try:
        log(f"push failed: remote said {secret}\nhint: token {secret}", level="error",
            runner_set=f"set-{secret}")
    finally:
        forget_held()
    err = capsys.readouterr().err
    (line,) = json_lines(err)
    assert line["msg"] == f"push failed: remote said {MASK}\nhint: token {MASK}"
    assert line["set"] == f"set-{MASK}"
    for form in secret_forms(secret):
        assert form not in err, form


def test_text_stays_the_default_line(capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FORMAT_ENV, "text")
    assert start("run") == "text"
    log("pass failed: git push failed\nhint: ask an admin", level="error", runner_set="linux")
    err = capsys.readouterr().err
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ pass failed: git push failed\n"
                        r"hint: ask an admin\n", err), err


@pytest.mark.parametrize("value", ["xml", "JSONL", "plain text"])
def test_an_unknown_format_is_an_error_naming_the_variable_and_the_formats(
        monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(FORMAT_ENV, value)
    with pytest.raises(InputError) as caught:
        start("run")
    assert str(caught.value) == (f"GITSCALE_LOG_FORMAT: {value.lower()!r} is not a log "
                                 "format: use text or json (default text)")
    assert log_format() == "text"  # (a command that never started its log: text)


def test_the_level_rule() -> None:
    assert level_of("warning: the cache is not written") == "warning"
    assert level_of("pass at 2026-11-21T09:00:00Z: no change") == "info"
    assert level_of("a warning: in the middle") == "info"


def test_a_process_that_never_started_its_log_writes_text(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-shot `reconcile`'s notification line: text, whatever the variable says (its
    other output is text too)."""
    monkeypatch.setitem(logline._component, "name", None)
    monkeypatch.setenv(FORMAT_ENV, "json")
    log("notify argocd failed: 401")
    warn("state cache /c: unreadable")
    err = capsys.readouterr().err
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ notify argocd failed: 401\n"
                        r"warning: state cache /c: unreadable\n", err), err


def test_a_warning_outside_the_log_is_an_object_of_level_warning_in_json(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FORMAT_ENV, "json")
    start("serve")
    warn("state cache /c: unreadable")
    (line,) = json_lines(capsys.readouterr().err)
    assert (line["level"], line["component"], line["msg"]) == (
        "warning", "serve", "warning: state cache /c: unreadable")
