"""How serve tells a failure streak and the deliveries it drops (a clock passed in)."""
from __future__ import annotations

import pytest

from gitscale.streak import Dropped, Streak, duration, told


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_streak_is_said_once_then_on_a_new_error_then_as_a_reminder() -> None:
    clock = Clock()
    streak = Streak(remind=1800, clock=clock)
    said = []
    for at, error in [(0, "down"), (2, "down"), (6, "down"), (14, "refused"), (30, "refused"),
                      (1814, "refused"), (1900, "refused")]:
        clock.now = at
        said.append(streak.failed(error))
    assert said == [True, False, False, True, False, True, False]
    clock.now = 1960
    assert streak.ended() == (7, "32m40s")
    assert streak.ended() is None  # over: the next failure starts a new streak
    assert streak.failed("refused")  # said again, though it is the error said last


def test_dropped_events_are_said_at_once_then_at_most_every_interval_with_a_count() -> None:
    clock = Clock()
    dropped = Dropped(every=600, clock=clock)
    first = dropped.add(2, "job 1")
    assert first is not None and (first.count, first.example) == (2, "job 1")
    clock.now = 10
    assert dropped.add(1, "job 4") is None
    assert dropped.add(0, "") is None
    clock.now = 700
    later = dropped.add(3, "job 9")
    assert later is not None and (later.count, later.example) == (4, "job 4")
    assert dropped.total == 6


@pytest.mark.parametrize("seconds, said", [
    pytest.param(0, "0s", id="zero"), pytest.param(59.9, "59s", id="seconds"),
    pytest.param(65, "1m05s", id="minutes"), pytest.param(1800, "30m", id="round-minutes"),
    pytest.param(3700, "1h01m", id="hours"), pytest.param(7200, "2h", id="round-hours"),
])
def test_durations_are_said_briefly(seconds: float, said: str) -> None:
    assert duration(seconds) == said


@pytest.mark.parametrize(("ended", "one", "many", "said"), [
    pytest.param((1, "5s"), "poll", "polls", "1 failed poll in 5s", id="one"),
    pytest.param((3, "2m00s"), "try", "tries", "3 failed tries in 2m00s", id="several"),
    pytest.param((2, "1s"), "push", "pushes", "2 failed pushes in 1s", id="irregular"),
])
def test_an_ended_streak_is_told_in_the_right_number(ended: tuple[int, str], one: str,
                                                     many: str, said: str) -> None:
    assert told(ended, one, many) == said
