"""Durations as gitscale reads them, days included."""
from __future__ import annotations

from datetime import timedelta

import pytest

from gitscale.timeutil import parse_duration


@pytest.mark.parametrize(("text", "value"), [
    ("90s", timedelta(seconds=90)), ("10m", timedelta(minutes=10)), ("1h30m", timedelta(hours=1.5)),
    ("14d", timedelta(days=14)), ("1d12h", timedelta(days=1, hours=12)),
    ("2d3h4m5s", timedelta(days=2, hours=3, minutes=4, seconds=5)), ("366d", timedelta(days=366)),
])
def test_durations(text: str, value: timedelta) -> None:
    assert parse_duration(text) == value


@pytest.mark.parametrize(("text", "words"), [
    ("14days", "is not a duration"), ("d", "is not a duration"), ("1h1d", "is not a duration"),
    ("367d", "longer than a year"), ("99999999999999d", "longer than a year"), ("", "not a duration"),
])
def test_bad_durations(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_duration(text)
