"""`gitscale controller`'s log: every line masked, the libraries' warnings included."""
from __future__ import annotations

import json
import logging
from typing import Callable, Iterator

import pytest

from gitscale.commands.controller import _logging
from gitscale.redact import MASK, hold

TOKEN = "ghs_masked_in_every_logger_0123456789"


@pytest.fixture
def controller_logging() -> Iterator[Callable[..., None]]:
    """Sets up the controller's logging when called (in the test's body: the handler keeps the
    stderr it was made with, which capsys replaces for the call), and undoes it after."""
    root, ours = logging.getLogger(), logging.getLogger("gitscale")
    levels, made = (root.level, ours.level), []
    yield lambda *log_format: made.append(_logging(*log_format))
    for handler in made:
        root.removeHandler(handler)
    root.setLevel(levels[0])
    ours.setLevel(levels[1])


def test_a_library_warning_quoting_a_held_secret_is_masked(
        controller_logging: Callable[[], None], capsys: pytest.CaptureFixture[str]) -> None:
    controller_logging()
    hold(TOKEN)
    logging.getLogger("urllib3.connectionpool").warning(
        "Retrying after connection broken by %r", f"Authorization: Bearer {TOKEN}")
    logging.getLogger("kubernetes.client.rest").info("not shown: %s", TOKEN)
    err = capsys.readouterr().err
    assert "Retrying after connection broken by" in err and f"Bearer {MASK}" in err, err
    assert TOKEN not in err and "not shown" not in err, err


def test_gitscale_lines_from_info_are_masked(
        controller_logging: Callable[[], None], capsys: pytest.CaptureFixture[str]) -> None:
    controller_logging()
    hold(TOKEN)
    logging.getLogger("gitscale.controller").info("ci-runners/linux: refused %s", TOKEN)
    try:
        raise RuntimeError(f"token {TOKEN}")
    except RuntimeError:
        logging.getLogger("gitscale.controller").exception("a pass crashed")
    err = capsys.readouterr().err
    assert f"ci-runners/linux: refused {MASK}" in err and f"RuntimeError: token {MASK}" in err
    assert TOKEN not in err, err


def test_json_lines_are_masked_whole_a_traceback_kept_in_the_message(
        controller_logging: Callable[[str], None], capsys: pytest.CaptureFixture[str]) -> None:
    controller_logging("json")
    hold(TOKEN)
    logging.getLogger("urllib3.connectionpool").warning("Retrying: Bearer %s", TOKEN)
    try:
        raise RuntimeError(f"token {TOKEN}")
    except RuntimeError:
        logging.getLogger("gitscale.controller.loop").exception("ci-runners/linux: crashed")
    err = capsys.readouterr().err
    assert TOKEN not in err, err
    retrying, crashed = (json.loads(line) for line in err.splitlines())
    assert {k: v for k, v in retrying.items() if k != "time"} == {
        "level": "warning", "component": "controller", "msg": f"Retrying: Bearer {MASK}",
        "logger": "urllib3.connectionpool"}
    assert crashed["level"] == "error" and crashed["logger"] == "gitscale.controller.loop"
    message, *trace = crashed["msg"].split("\n")
    assert message == "ci-runners/linux: crashed"
    assert trace[0] == "Traceback (most recent call last):"
    assert trace[-1] == f"RuntimeError: token {MASK}"
