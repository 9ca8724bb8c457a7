"""Schedules' RRULEs: refused when they cannot fire, evaluated in bounded time, and with the
same answers as walking the rule from its start."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from dateutil.rrule import rrulestr
from hypothesis import given, settings
from hypothesis import strategies as st

from gitscale.core.recurrence import RecurrenceError, check, cycle_years, last_start

START = datetime(2026, 1, 5, 8, tzinfo=timezone.utc)


@pytest.mark.parametrize(("rule", "words"), [
    pytest.param("FREQ=DAILY;INTERVAL=0", "INTERVAL=0", id="interval-0"),
    pytest.param("FREQ=DAILY;INTERVAL=-3", "INTERVAL=-3", id="interval-negative"),
    pytest.param("FREQ=DAILY;INTERVAL=1000000000", "INTERVAL=1000000000", id="absurd-interval"),
    pytest.param("FREQ=HOURLY;INTERVAL=25", "use FREQ=DAILY", id="hourly-beyond-a-day"),
    pytest.param("FREQ=DAILY;COUNT=-1", "COUNT=-1", id="count-negative"),
    pytest.param("FREQ=DAILY;COUNT=0", "COUNT=0", id="count-0"),
    pytest.param("FREQ=DAILY;BYMONTHDAY=30;BYMONTH=2", "never fires", id="february-30"),
    pytest.param("FREQ=HOURLY;BYMONTHDAY=31;BYMONTH=4,6,9,11", "never fires", id="april-31"),
    pytest.param("FREQ=YEARLY;BYYEARDAY=1;BYMONTH=6", "never fires", id="yearday-in-june"),
    pytest.param("FREQ=WEEKLY;BYWEEKNO=1;BYMONTH=7", "never fires", id="week-1-in-july"),
    pytest.param("FREQ=DAILY;UNTIL=20250101T000000Z", "before the schedule's start",
                 id="until-before-start"),
    pytest.param("FREQ=MONTHLY;BYMONTHDAY=1;UNTIL=20260120T000000Z", "never fires",
                 id="until-before-first-occurrence"),
    pytest.param("FREQ=DAILY;COUNT=1\nEXDATE:20260105T080000Z", "never fires",
                 id="exdate-takes-the-only-one"),
    pytest.param("FREQ=DAILY;COUNT=1000000", "COUNT=1000000", id="absurd-count"),
    pytest.param("FREQ=MINUTELY", "FREQ=MINUTELY", id="minutely"),
    pytest.param("DTSTART:20260101T000000Z\nRRULE:FREQ=DAILY", "DTSTART", id="dtstart"),
    pytest.param("RRULE:FREQ=DAILY\nEXRULE:FREQ=DAILY", "EXRULE", id="exrule"),
    pytest.param("RRULE:FREQ=DAILY\nRRULE:FREQ=WEEKLY", "one RRULE", id="two-rules"),
    pytest.param("FREQ=SOMETIMES", "not an RRULE", id="not-a-rule"),
    pytest.param("FREQ=YEARLY;BYEASTER=0", "BYEASTER", id="byeaster"),
])
def test_rules_that_cannot_fire_or_make_no_sense_are_refused(rule: str, words: str) -> None:
    with pytest.raises(RecurrenceError, match=words.replace("(", r"\(")):
        check(rule, START, None)


@pytest.mark.parametrize("rule", [
    "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR",
    "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29",  # every four years
    "FREQ=MONTHLY;BYDAY=-1FR",
    "FREQ=HOURLY;INTERVAL=6",
    "FREQ=DAILY;COUNT=3",
    "RRULE:FREQ=DAILY\nEXDATE:20260106T080000Z",
    "FREQ=MONTHLY;BYMONTHDAY=31",  # only the long months
])
def test_rules_that_fire_are_accepted(rule: str) -> None:
    check(rule, START, "Europe/Berlin")


def test_a_rule_firing_once_in_28_years_is_accepted() -> None:
    """February 29th on a Monday: the first is 2044. It fires, so it is not refused."""
    check("FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO", START, None)


def test_the_cycle_covers_the_calendar_and_the_grid() -> None:
    assert cycle_years("DAILY", 1) == 400
    assert cycle_years("WEEKLY", 7) == 400 * 7  # 20,871 weeks in 400 years: 7 does not divide
    assert cycle_years("HOURLY", 24) == 400


def test_a_schedule_started_long_ago_walks_only_its_window() -> None:
    """Hourly since 1971: the answer is the same as walking from the start (which walked half
    a million hours on each pass)."""
    start = datetime(1971, 1, 1, 0, 30, tzinfo=timezone.utc)
    now = datetime(2026, 11, 23, 9, 45, tzinfo=timezone.utc)
    got = last_start("FREQ=HOURLY;BYHOUR=9,10", start, None, now, timedelta(minutes=30))
    assert got == datetime(2026, 11, 23, 9, 30, tzinfo=timezone.utc)


FREQS = st.sampled_from(["YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY"])


@st.composite
def rules(draw: st.DrawFn) -> str:
    freq = draw(FREQS)
    limit = {"YEARLY": 1, "MONTHLY": 4, "WEEKLY": 3, "DAILY": 5, "HOURLY": 8}[freq]
    parts = [f"FREQ={freq}", f"INTERVAL={draw(st.integers(1, limit))}"]
    if draw(st.booleans()):
        parts.append("BYDAY=" + ",".join(draw(st.lists(
            st.sampled_from(["MO", "TU", "WE", "TH", "FR", "SA", "SU"]), min_size=1,
            max_size=3, unique=True))))
    if draw(st.booleans()) and freq in ("YEARLY", "MONTHLY", "DAILY", "HOURLY"):
        parts.append(f"BYMONTHDAY={draw(st.sampled_from([1, 15, 28, 31, -1]))}")
    if draw(st.booleans()):
        parts.append(f"BYMONTH={draw(st.integers(1, 12))}")
    if draw(st.booleans()) and freq != "HOURLY":
        parts.append(f"BYHOUR={draw(st.integers(0, 23))}")
    if draw(st.booleans()):
        parts.append(f"WKST={draw(st.sampled_from(['MO', 'SU', 'WE']))}")
    if draw(st.booleans()):
        parts.append("UNTIL=20281231T000000Z")
    return ";".join(parts)


@settings(max_examples=150, deadline=None)
@given(rule=rules(),
       start=st.datetimes(datetime(2020, 1, 1), datetime(2026, 1, 1)),
       later=st.timedeltas(timedelta(0), timedelta(days=3 * 365)),
       hours=st.integers(1, 72),
       zone=st.sampled_from([None, "Europe/Berlin", "America/New_York"]))
def test_bounded_evaluation_agrees_with_walking_from_the_start(
        rule: str, start: datetime, later: timedelta, hours: int, zone: str | None) -> None:
    start = start.replace(tzinfo=timezone.utc, microsecond=0)
    try:
        check(rule, start, zone)
    except RecurrenceError:
        return
    now = start + later
    duration = timedelta(hours=hours)
    from zoneinfo import ZoneInfo

    first = start.astimezone(ZoneInfo(zone)) if zone else start
    walked = rrulestr(rule, dtstart=first)
    # the latest occurrence whose moment has come (a wall time may come twice, or never)
    occurrence = walked.before(now.astimezone(first.tzinfo) + timedelta(hours=3), inc=True)
    while occurrence is not None and occurrence.timestamp() > now.timestamp():
        occurrence = walked.before(occurrence)
    expected = occurrence if occurrence is not None and now < occurrence + duration else None
    assert last_start(rule, start, zone, now, duration) == expected


@pytest.mark.parametrize(("start", "now", "active"), [
    # a nightly window at 01:45 for 2 h, on the night the clocks go back (2026-11-01 06:00Z:
    # 02:00 EDT → 01:00 EST): 01:00–02:00 comes twice; its 01:45 is the first one (EDT,
    # 05:45Z), the window 05:45Z–03:45 EST (08:45Z)
    pytest.param("2026-10-01T01:45:00-04:00", "2026-11-01T05:40:00+00:00", False,
                 id="fall-back-before-the-start"),
    pytest.param("2026-10-01T01:45:00-04:00", "2026-11-01T05:50:00+00:00", True,
                 id="fall-back-first-pass-of-the-hour"),
    # 01:30 EST, the hour again: the wall clock is before 01:45, the start is an hour past
    # (the window was read as over, and came back at 01:45 EST)
    pytest.param("2026-10-01T01:45:00-04:00", "2026-11-01T06:30:00+00:00", True,
                 id="fall-back-second-pass-before-the-wall-time"),
    pytest.param("2026-10-01T01:45:00-04:00", "2026-11-01T06:50:00+00:00", True,
                 id="fall-back-second-pass-after-the-wall-time"),
    pytest.param("2026-10-01T01:45:00-04:00", "2026-11-01T08:50:00+00:00", False,
                 id="fall-back-window-over"),
    # 02:30 on the night the clocks go forward (2026-03-08 07:00Z: 02:00 EST → 03:00 EDT)
    # does not exist: RFC 5545 reads it with the offset before the gap, 02:30 EST = 03:30 EDT
    pytest.param("2026-02-01T02:30:00-05:00", "2026-03-08T07:10:00+00:00", False,
                 id="spring-forward-start-in-the-gap-not-yet"),
    pytest.param("2026-02-01T02:30:00-05:00", "2026-03-08T07:30:00+00:00", True,
                 id="spring-forward-start-in-the-gap-begun"),
])
def test_a_start_in_a_repeated_or_skipped_hour_is_a_moment(start: str, now: str,
                                                           active: bool) -> None:
    """An occurrence starts at one moment, whatever the wall clock does around it: a window
    begun in the first pass of a repeated hour holds through the second pass too."""
    from gitscale.core.policy import Schedule

    daily = Schedule("nightly", datetime.fromisoformat(start), timedelta(hours=2), "FREQ=DAILY",
                     "America/New_York")
    assert daily.active(datetime.fromisoformat(now)) is active


def test_a_recurring_window_agrees_with_a_one_off_at_the_same_moment() -> None:
    from gitscale.core.policy import Schedule

    moment = datetime.fromisoformat("2026-11-01T01:45:00-04:00")  # the first 01:45
    once = Schedule("once", moment, timedelta(hours=2), None, "America/New_York")
    daily = Schedule("daily", moment - timedelta(days=3), timedelta(hours=2), "FREQ=DAILY",
                     "America/New_York")
    for minutes in range(-10, 190, 5):
        at = moment + timedelta(minutes=minutes)
        # both inactive everywhere would agree too: the window is 05:45Z–03:45 EST (08:45Z)
        assert once.active(at) is (0 <= minutes < 180), at
        assert daily.active(at) == once.active(at), at
