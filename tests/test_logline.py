"""The line run, serve and a notification write on stderr: the time, then what happened."""
from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest

from gitscale.logline import log


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
