"""The forecast's pure core: the cushion (the jobs that arrived within one reach, the rises of
the level; a fall and the first commit count nothing), the reach (window + lead − wait), the
span the stretches start in (now − jitter to now + lead + jitter, on each past week), weekday
and time-of-day alignment, the quantile over weeks, the time zone across a daylight-saving
change, the fallback, the history a reader must keep, the detail text, and what the decision
does with it (demand + cushion inside the bounds, the reason, the scale-down delay, the
patch-0 fall, the cushion still there when its jobs come)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitscale.core.decide import decide
from gitscale.core.forecast import Forecast, ForecastPolicy, arrivals, forecast, quantile
from gitscale.core.model import Current, Demand, Reason
from gitscale.core.policy import Policy

UTC = timezone.utc
MONDAY = datetime(2026, 1, 19, tzinfo=UTC)  # day 15 of a trace that began Monday 2026-01-05
POLICY = ForecastPolicy()  # lookback 14d, quantile 0.9, lead 1m, jitter 2m, wait 30s, UTC
BEFORE_NINE = MONDAY + timedelta(hours=8, minutes=59)  # 09:00 is one lead ahead
# at BEFORE_NINE the stretches start from 08:57 (now − jitter) to 09:02 (now + lead + jitter)
SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)


def t(day: datetime, hour: int, minute: int, second: int = 0) -> float:
    return (day + timedelta(hours=hour, minutes=minute, seconds=second)).timestamp()


def series(*points: tuple[float, int]) -> tuple[list[float], list[int]]:
    ordered = sorted(points)
    return [p[0] for p in ordered], [p[1] for p in ordered]


def jobs_arrived(times: Sequence[float], levels: Sequence[int], first: float, last: float,
                 reach: float) -> int:
    """The reference for ``arrivals``, by brute force: every stretch [s, s + reach) with s in
    [first, last], counting the rises at the commits inside it (the first commit has none).
    The count changes only where s passes a commit time (that commit leaves) or a commit
    time − reach (it enters), and is constant in between; so evaluating at ``first``,
    ``last`` and every such point inside [first, last] sees every value it takes."""
    rises = [(times[i], max(levels[i] - levels[i - 1], 0)) for i in range(1, len(times))]
    starts = {first, last} | {x for when in times for x in (when, when - reach)
                              if first <= x <= last}
    return max(sum(rise for when, rise in rises if s <= when < s + reach) for s in starts)


# --- arrivals(): the jobs that arrived, from the rises of the level -------------------------

@pytest.mark.parametrize(("times", "levels", "first", "last", "reach", "expected"), [
    pytest.param([0, 10], [0, 5], 0, 20, 30, 5, id="a-rise-is-the-jobs-that-arrived"),
    pytest.param([10, 20], [50, 60], 0, 30, 60, 10, id="the-first-commit-counts-nothing"),
    pytest.param([0, 10, 20, 30], [0, 5, 3, 7], 0, 0, 100, 9,
                 id="a-fall-counts-nothing-and-takes-nothing-back"),
    pytest.param([0, 100], [30, 50], 50, 60, 100, 20,
                 id="the-commit-before-the-stretch-is-the-base"),
    pytest.param([0, 10, 50], [0, 10, 20], 0, 60, 41, 20, id="rises-within-reach-are-summed"),
    pytest.param([0, 10, 50], [0, 10, 20], 0, 60, 40, 10,
                 id="rises-reach-apart-are-not-summed"),
    pytest.param([0, 10, 20], [0, 10, 20], 15, 15, 100, 10,
                 id="a-rise-before-the-first-start-is-not-counted"),
    pytest.param([0, 30], [0, 10], 0, 5, 40, 10, id="a-stretch-from-last-reaches-past-it"),
    pytest.param([0, 30], [0, 10], 0, 5, 25, 0, id="but-no-further-than-reach"),
    pytest.param([0, 10, 20, 100, 105, 110], [0, 5, 5, 10, 30, 60], 0, 200, 20, 55,
                 id="the-busiest-stretch-not-the-first"),
    pytest.param([], [], 0, 10, 5, 0, id="no-commits"),
])
def test_the_jobs_that_arrived_are_the_rises_within_one_reach(
        times: list[float], levels: list[int], first: float, last: float, reach: float,
        expected: int) -> None:
    assert arrivals(times, levels, first, last, reach) == expected
    assert jobs_arrived(times, levels, first, last, reach) == expected  # (the reference too)


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[float], list[int], float, float, float]:
    count = draw(st.integers(0, 12))
    times = sorted(draw(st.lists(st.integers(0, 300), min_size=count, max_size=count)))
    levels = draw(st.lists(st.integers(0, 30), min_size=count, max_size=count))
    first = draw(st.integers(-30, 330))
    last = first + draw(st.integers(0, 120))
    reach = draw(st.integers(1, 150))
    return [float(x) for x in times], levels, float(first), float(last), float(reach)


@settings(max_examples=400, deadline=None)
@given(history=histories())
def test_arrivals_agrees_with_trying_every_stretch(
        history: tuple[list[float], list[int], float, float, float]) -> None:
    """Commits may share a second; stretches may start before the first commit or after the
    last; a stretch from ``last`` reaches commits after it."""
    assert arrivals(*history) == jobs_arrived(*history)


# --- forecast(): the same weekday and wall-clock time of past weeks -------------------------

# The two Mondays before: jobs arrive at 09:00 and a minute later, then all complete by 09:20.
# Week 1: 30, then 50 more (level 80). Week 2: 40, then 80 more (level 120).
WEEK1, WEEK2 = MONDAY - timedelta(days=14), MONDAY - timedelta(days=7)
BURSTS = series((t(WEEK1, 0, 0), 0),
                (t(WEEK1, 9, 0), 30), (t(WEEK1, 9, 1), 80), (t(WEEK1, 9, 20), 0),
                (t(WEEK2, 9, 0), 40), (t(WEEK2, 9, 1), 120), (t(WEEK2, 9, 20), 0))


@pytest.mark.parametrize(("now", "policy", "window", "samples", "extra"), [
    # default window 1m: reach 1m + 1m − 30s = 90s holds both rises of a Monday
    pytest.param(BEFORE_NINE, POLICY, MINUTE, (80, 120), 120, id="q0.9-of-two-is-the-larger"),
    pytest.param(BEFORE_NINE, replace(POLICY, quantile=0.5), MINUTE, (80, 120), 80,
                 id="q0.5-of-two-is-the-smaller"),
    # window 10s: reach 40s, the rises 60s apart are not summed; 30s: reach 60s, still not
    pytest.param(BEFORE_NINE, POLICY, 10 * SECOND, (50, 80), 80,
                 id="rises-farther-apart-than-reach-are-not-summed"),
    pytest.param(BEFORE_NINE, POLICY, 30 * SECOND, (50, 80), 80,
                 id="rises-exactly-reach-apart-are-not-summed"),
    pytest.param(BEFORE_NINE, POLICY, 31 * SECOND, (80, 120), 120,
                 id="a-second-more-of-window-sums-them"),
    pytest.param(BEFORE_NINE, replace(POLICY, wait=9 * SECOND), 10 * SECOND, (80, 120), 120,
                 id="a-shorter-wait-reaches-further"),
    pytest.param(BEFORE_NINE, replace(POLICY, wait=45 * SECOND), MINUTE, (80, 120), 120,
                 id="wait-45s-reach-75s"),
    pytest.param(BEFORE_NINE, replace(POLICY, wait=75 * SECOND), MINUTE, (50, 80), 80,
                 id="wait-75s-reach-45s"),
    # 08:55: stretches start 08:53–08:58 (now − 2m to now + 1m + 2m) and reach 90s, to 08:59:30
    pytest.param(BEFORE_NINE - 4 * MINUTE, POLICY, MINUTE, (0, 0), 0,
                 id="the-lead-not-yet-reaching-the-burst"),
    # lead 5m: the stretches start 08:53–09:02 (and reach 1m + 5m − 30s = 5m30s)
    pytest.param(BEFORE_NINE - 4 * MINUTE, replace(POLICY, lead=5 * MINUTE), MINUTE,
                 (80, 120), 120, id="a-longer-lead-looks-further"),
    # 09:02: the stretches start from 09:00 (now − jitter): both rises, as before 09:00
    pytest.param(MONDAY + timedelta(hours=9, minutes=2), POLICY, MINUTE, (80, 120), 120,
                 id="the-span-starts-a-jitter-before-now"),
    # 09:03: from 09:01, the first rise is more than a jitter ago: only the second
    pytest.param(MONDAY + timedelta(hours=9, minutes=3), POLICY, MINUTE, (50, 80), 80,
                 id="a-rise-more-than-a-jitter-ago-is-not-counted"),
    pytest.param(MONDAY + timedelta(hours=9, minutes=19), POLICY, MINUTE, (0, 0), 0,
                 id="the-fall-at-09-20-counts-nothing"),
    pytest.param(BEFORE_NINE + timedelta(days=1), POLICY, MINUTE, (0, 0), 0,
                 id="tuesday-is-not-monday"),
])
def test_the_cushion_is_the_quantile_of_the_jobs_past_weeks_saw_arrive(
        now: datetime, policy: ForecastPolicy, window: timedelta, samples: tuple[int, int],
        extra: int) -> None:
    found = forecast(*BURSTS, policy, now, window)
    assert found.extra == extra, found.detail
    weekday = f"{now + policy.lead:%A}"  # a Monday, but for the Tuesday
    assert found.detail.endswith(f", on the last 2 {weekday}s ({samples[0]}, {samples[1]})")


# One rise at 09:00:00 on each past Monday (80, then 120), all gone at 09:20.
ONE = series((t(WEEK1, 0, 0), 0), (t(WEEK1, 9, 0), 80), (t(WEEK1, 9, 20), 0),
             (t(WEEK2, 9, 0), 120), (t(WEEK2, 9, 20), 0))


def clock(hour: int, minute: int, second: int = 0) -> datetime:
    return MONDAY + timedelta(hours=hour, minutes=minute, seconds=second)


@pytest.mark.parametrize(("now", "jitter", "lead", "extra"), [
    pytest.param(clock(8, 59), 2 * MINUTE, MINUTE, 120, id="burst-one-lead-ahead"),
    # the last stretch starts at now + lead + jitter: 09:00
    pytest.param(clock(8, 57), 2 * MINUTE, MINUTE, 120, id="burst-lead-plus-jitter-ahead"),
    # the last starts at 08:59 and reaches 40s, to 08:59:40
    pytest.param(clock(8, 56), 2 * MINUTE, MINUTE, 0, id="burst-a-minute-further"),
    # the first stretch starts at now − jitter: 09:00
    pytest.param(clock(9, 2), 2 * MINUTE, MINUTE, 120, id="burst-a-jitter-ago"),
    pytest.param(clock(9, 3), 2 * MINUTE, MINUTE, 0, id="burst-more-than-a-jitter-ago"),
    pytest.param(clock(9, 3), 3 * MINUTE, MINUTE, 120, id="jitter-3m-sees-3m-ago"),
    pytest.param(clock(8, 56), 3 * MINUTE, MINUTE, 120, id="jitter-3m-sees-lead-plus-3m-ahead"),
    pytest.param(clock(9, 0), timedelta(0), MINUTE, 120, id="jitter-0-the-burst-now"),
    pytest.param(clock(9, 1), timedelta(0), MINUTE, 0, id="jitter-0-a-minute-ago"),
    pytest.param(clock(8, 59), timedelta(0), MINUTE, 120, id="jitter-0-one-lead-ahead"),
    pytest.param(clock(8, 58), timedelta(0), MINUTE, 0, id="jitter-0-two-minutes-ahead"),
    pytest.param(clock(8, 58, 30), timedelta(0), MINUTE, 120,
                 id="jitter-0-within-reach-past-the-lead"),
    # lead 5m (reach 10s + 5m − 30s = 280s): the stretches start from now all the same
    pytest.param(clock(8, 59, 30), timedelta(0), 5 * MINUTE, 120,
                 id="a-long-lead-still-starts-at-now"),
    pytest.param(clock(9, 0, 1), timedelta(0), 5 * MINUTE, 0,
                 id="a-long-lead-looks-no-further-back"),
])
def test_the_stretches_start_from_now_minus_jitter_to_now_plus_lead_plus_jitter(
        now: datetime, jitter: timedelta, lead: timedelta, extra: int) -> None:
    """A pass every 10 s (reach 10 s + lead − 30 s: 40 s at lead 1m). On the past Mondays the
    stretches start from now − jitter (the runners for jobs not yet come stay) to
    now + lead + jitter (a write's runners are ready when they come): the 09:00 burst is
    counted from just after 09:00 − jitter − lead − reach until 09:00 + jitter."""
    found = forecast(*ONE, replace(POLICY, jitter=jitter, lead=lead), now, 10 * SECOND)
    assert found.extra == extra, found.detail


@st.composite
def mondays(draw: st.DrawFn) -> tuple[list[float], list[int], ForecastPolicy, datetime,
                                      timedelta]:
    """Commits around 09:00 (±10 min) on the two past Mondays, after a first one at midnight;
    a policy and a window with reach > 0; now within 5 min of 09:00 on day 15."""
    points = [(t(WEEK1, 0, 0), draw(st.integers(0, 30)))]
    for day in (WEEK1, WEEK2):
        count = draw(st.integers(0, 8))
        offsets = draw(st.lists(st.integers(-600, 600), min_size=count, max_size=count))
        points += [(t(day, 9, 0) + x, draw(st.integers(0, 30))) for x in offsets]
    lead = draw(st.integers(0, 300)) * SECOND
    window = draw(st.integers(1, 120)) * SECOND
    wait = draw(st.integers(0, int((lead + window).total_seconds()) - 1)) * SECOND
    policy = replace(POLICY, lead=lead, wait=wait, jitter=draw(st.integers(0, 300)) * SECOND,
                     quantile=draw(st.sampled_from([0.5, 0.9, 1.0])))
    now = MONDAY + timedelta(hours=9, seconds=draw(st.integers(-300, 300)))
    return *series(*points), policy, now, window


@settings(max_examples=300, deadline=None)
@given(case=mondays())
def test_the_cushion_agrees_with_trying_every_stretch_of_the_span(
        case: tuple[list[float], list[int], ForecastPolicy, datetime, timedelta]) -> None:
    """In UTC a past Monday's wall time is now less whole weeks: on each, every stretch of
    reach = window + lead − wait from now − jitter to now + lead + jitter (the reference
    above), then the nearest rank over the two."""
    times, levels, policy, now, window = case
    reach = (window + policy.lead - policy.wait).total_seconds()
    samples = []
    for weeks in (2, 1):
        when = (now - timedelta(days=7 * weeks)).timestamp()
        samples.append(jobs_arrived(times, levels, when - policy.jitter.total_seconds(),
                                    when + (policy.lead + policy.jitter).total_seconds(), reach))
    nearest = {0.5: min, 0.9: max, 1.0: max}[policy.quantile]  # the rank ⌈q × 2⌉ of two
    found = forecast(times, levels, policy, now, window)
    assert found.extra == nearest(samples), found.detail
    assert found.detail.endswith(f", on the last 2 Mondays ({samples[0]}, {samples[1]})")


ASKED = "forecast +120: q0.9 of the jobs that arrived within 90s"


@pytest.mark.parametrize(("now", "policy", "window", "detail"), [
    pytest.param(BEFORE_NINE, POLICY, MINUTE, f"{ASKED}, from 08:57–09:02 UTC, on the last 2 "
                 "Mondays (80, 120)", id="default"),
    pytest.param(BEFORE_NINE, POLICY, 30 * SECOND, "forecast +80: q0.9 of the jobs that arrived "
                 "within 1m, from 08:57–09:02 UTC, on the last 2 Mondays (50, 80)",
                 id="window-30s"),
    pytest.param(BEFORE_NINE, replace(POLICY, quantile=0.5, jitter=5 * MINUTE), MINUTE,
                 "forecast +80: q0.5 of the jobs that arrived within 90s, from 08:54–09:05 UTC, "
                 "on the last 2 Mondays (80, 120)", id="q0.5-jitter-5m"),
    # from now − jitter, to now + lead + jitter: a longer lead moves only the end
    pytest.param(BEFORE_NINE, replace(POLICY, lead=2 * MINUTE), MINUTE, "forecast +120: q0.9 of "
                 "the jobs that arrived within 150s, from 08:57–09:03 UTC, on the last 2 Mondays "
                 "(80, 120)", id="lead-2m"),
    # seconds when either end has them (both ends alike)
    pytest.param(BEFORE_NINE + 30 * SECOND, POLICY, MINUTE, f"{ASKED}, from 08:57:30–09:02:30 "
                 "UTC, on the last 2 Mondays (80, 120)", id="now-at-half-a-minute"),
    pytest.param(BEFORE_NINE, replace(POLICY, jitter=30 * SECOND), MINUTE, f"{ASKED}, from "
                 "08:58:30–09:00:30 UTC, on the last 2 Mondays (80, 120)", id="jitter-30s"),
    pytest.param(BEFORE_NINE, replace(POLICY, lead=90 * SECOND), MINUTE, "forecast +120: q0.9 "
                 "of the jobs that arrived within 2m, from 08:57:00–09:02:30 UTC, on the last 2 "
                 "Mondays (80, 120)", id="lead-90s-one-end-with-seconds"),
    pytest.param(BEFORE_NINE, replace(POLICY, lookback=timedelta(days=7)), MINUTE,
                 f"{ASKED}, from 08:57–09:02 UTC, on the last Monday (120)", id="one-week"),
])
def test_the_detail_says_what_was_counted(now: datetime, policy: ForecastPolicy,
                                          window: timedelta, detail: str) -> None:
    assert forecast(*BURSTS, policy, now, window).detail == detail


@pytest.mark.parametrize(("policy", "window", "detail"), [
    pytest.param(replace(POLICY, wait=70 * SECOND), 10 * SECOND,
                 "forecast: none needed, a write's runners come within wait 70s",
                 id="reach-0"),
    pytest.param(replace(POLICY, wait=2 * MINUTE), 10 * SECOND,
                 "forecast: none needed, a write's runners come within wait 2m",
                 id="reach-negative"),
    pytest.param(replace(POLICY, lead=timedelta(0)), 30 * SECOND,
                 "forecast: none needed, a write's runners come within wait 30s",
                 id="no-lead-a-window-of-the-wait"),
])
def test_no_reach_needs_no_cushion(policy: ForecastPolicy, window: timedelta,
                                   detail: str) -> None:
    """When a write's runners come within the wait, no runner is needed ahead of demand."""
    assert policy.reach(window) <= timedelta(0)
    assert forecast(*BURSTS, policy, BEFORE_NINE, window) == Forecast(0, detail)


def test_the_reach_is_window_plus_lead_minus_wait() -> None:
    assert POLICY.reach(10 * SECOND) == 40 * SECOND
    assert POLICY.reach(MINUTE) == 90 * SECOND
    assert replace(POLICY, lead=2 * MINUTE, wait=timedelta(0)).reach(30 * SECOND) == \
        150 * SECOND


@pytest.mark.parametrize(("history_days", "lookback", "extra"), [
    pytest.param(13.9, 14, None, id="less-than-the-lookback"),
    pytest.param(14.1, 14, 120, id="the-lookback-covered"),
    pytest.param(7.5, 7, 120, id="one-week"),
    pytest.param(20, 21, None, id="three-weeks-asked"),
])
def test_less_history_than_the_lookback_falls_back(history_days: float, lookback: int,
                                                   extra: int | None) -> None:
    now = BEFORE_NINE
    first = now - timedelta(days=history_days)
    week1 = [(t(WEEK1, 9, 0, 20), 80), (t(WEEK1, 9, 20), 0)]
    times, levels = series((first.timestamp(), 0), (t(WEEK2, 9, 0, 20), 120),
                           (t(WEEK2, 9, 20), 0),
                           *(week1 if first.timestamp() < t(WEEK1, 9, 0) else []))
    policy = replace(POLICY, lookback=timedelta(days=lookback))
    found = forecast(times, levels, policy, now)
    assert found.extra == extra
    if extra is None:
        assert found.detail == (f"forecast: {history_days:.1f}d of history, needs {lookback}d: "
                                "reactive until then")
        # not enough history is said even where no cushion would be needed
        assert forecast(times, levels, replace(policy, wait=2 * MINUTE), now).extra is None


def test_no_history_at_all_falls_back() -> None:
    """A new set, one quiet for longer than the history read, or one renamed (its commits
    name the old name): said as such, not as 0.0 days of history."""
    found = forecast([], [], POLICY, MONDAY)
    assert found.extra is None and found.detail == (
        "forecast: no scaling commit of this set in the history read (a new set, one that has "
        "not scaled in that time, or a renamed one: its commits name the old name, which "
        "`previousNames: [OLD]` on the set makes its own), needs 14d: reactive until then")


def test_a_first_commit_at_the_burst_shows_no_rise() -> None:
    """The oldest commit read has no commit before it: the level it records may have held for
    long, so it counts as no arrival (week 1 sees 0 of its 80)."""
    times, levels = series((t(WEEK1, 9, 0), 80), (t(WEEK1, 9, 20), 0),
                           (t(WEEK2, 9, 0), 120), (t(WEEK2, 9, 20), 0))
    found = forecast(times, levels, replace(POLICY, quantile=0.5), BEFORE_NINE)
    assert found.extra == 0 and found.detail.endswith(" Mondays (0, 120)")


def test_the_pattern_follows_the_wall_clock_across_a_dst_change() -> None:
    """A 09:00 Europe/Berlin burst: 08:00 UTC in winter, 07:00 UTC after 2026-03-29."""
    berlin = ZoneInfo("Europe/Berlin")
    policy = replace(POLICY, timezone="Europe/Berlin")
    monday = datetime(2026, 3, 30, tzinfo=berlin)  # the first Monday of summer time
    before = [monday - timedelta(days=14), monday - timedelta(days=7)]  # winter time
    times, levels = series((before[0].timestamp() - 3600, 0),
                           *[((d + timedelta(hours=9, seconds=20)).timestamp(), 50)
                             for d in before],
                           *[((d + timedelta(hours=9, minutes=20)).timestamp(), 0)
                             for d in before])
    at_nine = datetime(2026, 3, 30, 6, 59, tzinfo=UTC)  # 08:59 in Berlin, summer time
    found = forecast(times, levels, policy, at_nine)
    assert found.extra == 50, found.detail
    assert found.detail.endswith(
        ", from 08:57–09:02 Europe/Berlin, on the last 2 Mondays (50, 50)")
    # in UTC the same wall time is an hour off: the burst is not there
    assert forecast(times, levels, POLICY, at_nine).extra == 0
    assert forecast(times, levels, policy, at_nine - timedelta(hours=1)).extra == 0


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([3, 1, 2], 0.9, 3), ([3, 1, 2], 0.5, 2), ([3, 1, 2], 0.34, 2), ([3, 1, 2], 0.33, 1),
    ([5], 0.1, 5), ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.9, 9), ([4, 4], 1.0, 4),
])
def test_quantile_is_nearest_rank(values: list[int], q: float, expected: int) -> None:
    assert quantile(values, q) == expected


def test_the_quantile_is_over_the_weeks_of_the_lookback() -> None:
    """Four past Mondays with 10, 40, 20 and 30 jobs at 09:00: q0.5 is 20, q0.75 30, q0.9 40;
    a lookback of 2 weeks sees only the last two (20, 30)."""
    points: list[tuple[float, int]] = [(t(MONDAY - timedelta(days=29), 0, 0), 0)]
    for weeks, jobs in zip((4, 3, 2, 1), (10, 40, 20, 30)):
        day = MONDAY - timedelta(days=7 * weeks)
        points += [(t(day, 9, 0), jobs), (t(day, 9, 20), 0)]
    times, levels = series(*points)
    policy = replace(POLICY, lookback=timedelta(days=28))
    for q, extra in ((0.5, 20), (0.75, 30), (0.9, 40)):
        found = forecast(times, levels, replace(policy, quantile=q), BEFORE_NINE)
        assert found.extra == extra and found.detail.endswith(" Mondays (10, 40, 20, 30)")
    found = forecast(times, levels, POLICY, BEFORE_NINE)
    assert found.extra == 30 and found.detail.endswith(" Mondays (20, 30)")


# --- days: which past days hold the pattern ------------------------------------------------

def every_day(levels: dict[int, int]) -> tuple[list[float], list[int]]:
    """A rise at 09:00 on each of the 14 days before MONDAY (day −14 … −1): ``levels[d]``
    jobs on day −d (0 when not given), all gone at 09:20; a first commit at midnight."""
    points: list[tuple[float, int]] = [(t(MONDAY - timedelta(days=14), 0, 0), 0)]
    for back in range(14, 0, -1):
        day = MONDAY - timedelta(days=back)
        points += [(t(day, 9, 0), levels.get(back, 0)), (t(day, 9, 20), 0)]
    return series(*points)


# Mondays (−14, −7) 10 and 20; the other workdays 30…110; the weekend days 200+
DAYS_SEEN = every_day({14: 10, 13: 30, 12: 40, 11: 50, 10: 60, 9: 200, 8: 210,
                       7: 20, 6: 70, 5: 80, 4: 90, 3: 110, 2: 220, 1: 230})


@pytest.mark.parametrize(("days", "now", "lookback", "samples", "named"), [
    pytest.param("weekday", BEFORE_NINE, 14, [10, 20], "2 Mondays", id="weekday"),
    pytest.param("workdays", BEFORE_NINE, 14, [10, 30, 40, 50, 60, 20, 70, 80, 90, 110],
                 "10 workdays", id="workdays-on-a-monday"),
    pytest.param("workdays", BEFORE_NINE, 7, [20, 70, 80, 90, 110], "5 workdays",
                 id="workdays-a-week"),
    # on the Sunday before, 13 days back reach the Monday the history starts: its weekend
    # days are the Saturday and Sunday a week before (−9, −8) and the Saturday (−2)
    pytest.param("workdays", BEFORE_NINE - timedelta(days=1), 13, [200, 210, 220],
                 "3 weekend days", id="workdays-on-a-sunday"),
    pytest.param("daily", BEFORE_NINE, 14, [10, 30, 40, 50, 60, 200, 210, 20, 70, 80, 90, 110,
                                            220, 230], "14 days", id="daily"),
    pytest.param("daily", BEFORE_NINE, 1, [230], "day", id="daily-one-day"),
])
def test_days_picks_the_past_days_the_pattern_is_read_from(
        days: str, now: datetime, lookback: int, samples: list[int], named: str) -> None:
    policy = replace(POLICY, days=days, lookback=timedelta(days=lookback))  # type: ignore[arg-type]
    found = forecast(*DAYS_SEEN, policy, now)
    assert found.detail.endswith(f"on the last {named} ({', '.join(map(str, samples))})"), \
        found.detail
    assert found.extra == quantile(samples, POLICY.quantile)


def test_workdays_learn_a_burst_later_than_every_past_monday() -> None:
    """Day 15's burst comes at 09:04, later than both past Mondays' (09:00) by more than the
    jitter; other workdays had theirs at 09:03–09:05. At 09:03 (stretches from 09:01) the
    Mondays saw nothing left to come, the workdays did."""
    points: list[tuple[float, int]] = [(t(WEEK1, 0, 0), 0)]
    for back in range(14, 0, -1):
        day = MONDAY - timedelta(days=back)
        if day.weekday() >= 5:
            continue
        minute = 0 if day.weekday() == 0 else 3 + back % 3
        points += [(t(day, 9, minute), 60), (t(day, 9, 20), 0)]
    history = series(*points)
    at = MONDAY + timedelta(hours=9, minutes=3)
    assert forecast(*history, POLICY, at).extra == 0
    assert forecast(*history, replace(POLICY, days="workdays"), at).extra == 60


@pytest.mark.parametrize(("days", "lookback", "history_days", "extra"), [
    pytest.param("workdays", 7, 6.9, None, id="workdays-a-week-not-yet"),
    pytest.param("workdays", 7, 7.1, 110, id="workdays-a-week"),
    pytest.param("daily", 1, 0.9, None, id="daily-a-day-not-yet"),
    pytest.param("daily", 1, 1.1, 230, id="daily-a-day"),
    pytest.param("daily", 3, 3.1, 230, id="daily-three-days"),
])
def test_days_need_history_back_to_the_oldest_day_they_read(
        days: str, lookback: int, history_days: float, extra: int | None) -> None:
    """The fallback asks for history back to the oldest day read: a week for workdays (on a
    Monday, the five workdays before), one day for daily."""
    times, levels = DAYS_SEEN
    first = (BEFORE_NINE - timedelta(days=history_days)).timestamp()
    kept = [(when, level) for when, level in zip(times, levels) if when >= first]
    history = series((first, 0), *kept)
    policy = replace(POLICY, days=days, lookback=timedelta(days=lookback))  # type: ignore[arg-type]
    found = forecast(*history, policy, BEFORE_NINE)
    assert found.extra == extra, found.detail
    if extra is None:
        assert found.detail == (f"forecast: {history_days:.1f}d of history, needs {lookback}d: "
                                "reactive until then")


BERLIN = ZoneInfo("Europe/Berlin")


@pytest.mark.parametrize(("policy", "now", "oldest"), [
    # the oldest stretch starts at now − jitter on the oldest week's same wall time
    pytest.param(POLICY, BEFORE_NINE, WEEK1 + timedelta(hours=8, minutes=57), id="default"),
    pytest.param(replace(POLICY, lead=5 * MINUTE), BEFORE_NINE,
                 WEEK1 + timedelta(hours=8, minutes=57), id="a-lead-moves-only-the-end"),
    pytest.param(replace(POLICY, jitter=timedelta(0)), BEFORE_NINE,
                 WEEK1 + timedelta(hours=8, minutes=59), id="jitter-0"),
    pytest.param(replace(POLICY, jitter=10 * MINUTE, lookback=timedelta(days=7)), BEFORE_NINE,
                 WEEK2 + timedelta(hours=8, minutes=49), id="one-week-jitter-10m"),
    # 08:59 in Berlin (a pass's clock is UTC) on the first Monday of summer time; two Mondays
    # before, winter time: the same wall time is an hour later in UTC
    pytest.param(replace(POLICY, timezone="Europe/Berlin"),
                 datetime(2026, 3, 30, 6, 59, tzinfo=UTC),
                 datetime(2026, 3, 16, 8, 57, tzinfo=BERLIN), id="berlin-into-summer-time"),
    # and the other way: on the first Monday of winter time, two Mondays before are an hour
    # *earlier* in UTC than 14 days before now
    pytest.param(replace(POLICY, timezone="Europe/Berlin"),
                 datetime(2026, 10, 26, 7, 59, tzinfo=UTC),
                 datetime(2026, 10, 12, 8, 57, tzinfo=BERLIN), id="berlin-into-winter-time"),
])
def test_history_needed_reaches_the_oldest_stretch(policy: ForecastPolicy, now: datetime,
                                                   oldest: datetime) -> None:
    """What a reader must keep: every commit from the oldest stretch's start on (``trim``
    keeps the one before, the level the first rise is against), and not days more."""
    needed = policy.history_needed(now).timestamp()
    assert oldest.timestamp() - 86400 <= needed <= oldest.timestamp()


# --- decide(): demand + cushion -------------------------------------------------------------

BASE = Policy(min_replicas=0, max_replicas=100, scale_down_delay=timedelta(minutes=5),
              forecast=POLICY)
PAST = "(the past Mondays)"


def cushion(extra: int | None) -> Forecast:
    if extra is None:
        return Forecast(None, "forecast: 1.0d of history, needs 14d: reactive until then")
    return Forecast(extra, f"forecast +{extra}: {PAST}")


@pytest.mark.parametrize(("have", "demand", "extra", "policy", "replicas", "reason"), [
    pytest.param(0, Demand(0, 0), 40, BASE, 40, Reason.FORECAST, id="the-cushion-alone"),
    pytest.param(0, Demand(10, 0), 40, BASE, 50, Reason.SCALE_UP, id="demand-plus-cushion"),
    pytest.param(0, Demand(0, 0), 120, BASE, 100, Reason.FORECAST, id="capped-at-max"),
    pytest.param(0, Demand(90, 0), 40, BASE, 100, Reason.SCALE_UP,
                 id="demand-and-cushion-capped-at-max"),
    # demand alone asks for no more than the set has: the scale-up is the forecast's
    pytest.param(10, Demand(0, 10), 40, BASE, 50, Reason.FORECAST,
                 id="demand-has-its-runners"),
    pytest.param(20, Demand(3, 7), 40, BASE, 50, Reason.FORECAST,
                 id="demand-below-what-the-set-has"),
    pytest.param(9, Demand(1, 9), 40, BASE, 50, Reason.SCALE_UP,
                 id="demand-one-above-what-the-set-has"),
    pytest.param(0, Demand(5, 0), 3, replace(BASE, buffer=2), 10, Reason.SCALE_UP,
                 id="demand-buffer-and-cushion"),
    pytest.param(0, Demand(0, 0), 40, replace(BASE, max_step_up=10), 10, Reason.FORECAST,
                 id="step-limited"),
    pytest.param(0, Demand(2, 0), 0, BASE, 2, Reason.SCALE_UP, id="a-cushion-of-0-is-reactive"),
    pytest.param(0, Demand(2, 0), None, BASE, 2, Reason.SCALE_UP, id="a-fallback-is-reactive"),
])
def test_the_target_is_demand_plus_the_cushion_inside_the_bounds(
        have: int, demand: Demand, extra: int | None, policy: Policy, replicas: int,
        reason: Reason) -> None:
    decision = decide(Current(have, 3), demand, policy, BEFORE_NINE, forecast=cushion(extra))
    assert decision.write and (decision.replicas, decision.reason) == (replicas, reason)
    # only a scale-up demand asked for starts the scale-down delay
    assert decision.patch_id == 4 and decision.scaled_up == (reason is Reason.SCALE_UP)
    said = f"demand {demand.assigned} (queued {demand.queued}, running {demand.running})"
    if policy.buffer:
        said += f" + buffer {policy.buffer}"
    if extra:
        assert decision.detail.startswith(f"{said} + forecast +{extra}: {PAST}")
    else:
        assert decision.detail.startswith(f"{said}; {cushion(extra).detail}")


def test_the_min_runners_serve_as_the_cushion() -> None:
    """min 5, nothing running, a cushion of 3: 5 idle runners are already more."""
    decision = decide(Current(5, 0), Demand(0, 0), replace(BASE, min_replicas=5), BEFORE_NINE,
                      forecast=cushion(3))
    assert not decision.write and decision.replicas == 5


def test_a_cushion_from_the_history_capped_by_max() -> None:
    decision = decide(Current(0, 3), Demand(0, 0), BASE, BEFORE_NINE,
                      forecast=forecast(*BURSTS, POLICY, BEFORE_NINE))
    assert (decision.replicas, decision.reason) == (100, Reason.FORECAST)  # 0 + 120, max 100
    assert decision.detail == (
        "demand 0 (queued 0, running 0) + forecast +120: q0.9 of the jobs that arrived within "
        "90s, from 08:57–09:02 UTC, on the last 2 Mondays (80, 120), capped at max 100")


def test_a_schedule_caps_the_cushion_as_it_caps_demand() -> None:
    from gitscale.core.policy import Schedule

    window = Schedule("cap", MONDAY, timedelta(days=1), max_replicas=30)
    decision = decide(Current(0, 3), Demand(5, 0), replace(BASE, schedules=(window,)),
                      BEFORE_NINE, forecast=cushion(40))
    assert decision.replicas == 30 and decision.reason is Reason.SCALE_UP


@pytest.mark.parametrize(("extra", "policy", "last_up", "replicas"), [
    # a minute after a scale-up demand asked for, the delay holds, cushion or not
    pytest.param(40, BASE, MINUTE, None, id="a-cushion-does-not-cancel-the-delay"),
    pytest.param(1, BASE, MINUTE, None, id="nor-a-cushion-of-1"),
    pytest.param(0, BASE, MINUTE, None, id="a-cushion-of-0"),
    pytest.param(None, BASE, MINUTE, None, id="a-fallback"),
    pytest.param(40, replace(BASE, forecast=None), MINUTE, None, id="a-reactive-set"),
    # once it has run out, the fall to demand + cushion is written with patch 0
    pytest.param(40, BASE, 6 * MINUTE, 50, id="after-the-delay-the-cushion-falls"),
    pytest.param(0, BASE, 6 * MINUTE, 10, id="after-the-delay-the-cushion-ends"),
])
def test_the_scale_down_delay_follows_the_scale_ups_demand_asked_for(
        extra: int | None, policy: Policy, last_up: timedelta, replicas: int | None) -> None:
    """100 runners, 10 jobs run. Within 5m of the last scale-up demand asked for, the delay
    holds the 100 whatever the cushion (PRODUCT §3); after it, the count falls to demand +
    cushion at once, with patch 0 (nothing waits)."""
    now = BEFORE_NINE
    current = Current(100, 7, last_scale_up=now - last_up)
    predicted = None if policy.forecast is None else cushion(extra)
    decision = decide(current, Demand(0, 10), policy, now, forecast=predicted)
    if replicas is None:
        assert not decision.write and decision.replicas == 100
        assert "scale-down held until 2026-01-19T09:03:00+00:00" in decision.detail
    else:
        assert decision.write and decision.reason is Reason.SCALE_DOWN
        if policy.forecast is not None:
            assert (decision.replicas, decision.patch_id) == (replicas, 0)  # nothing waits
        assert "held" not in decision.detail


# After the past Mondays' first rise: at 09:02 the stretches start 09:00–09:05 and reach 40s
# (window 10s): the busiest holds the second rise (50, 80), not the first's 30 and 40 too;
# 10 jobs still run, and the delay after the last scale-up has run out.
FALLING = MONDAY + timedelta(hours=9, minutes=2)
LAST_UP = FALLING - timedelta(minutes=6)


@pytest.mark.parametrize(("demand", "policy", "replicas", "patch"), [
    pytest.param(Demand(0, 10), BASE, 90, 0, id="forecast-fall-nothing-waits-patch-0"),
    pytest.param(Demand(3, 10), BASE, 93, 8, id="jobs-wait-patch-plus-1"),
    pytest.param(Demand(0, 10), replace(BASE, forecast=None), 10, 8,
                 id="a-reactive-set-keeps-patch-plus-1"),
])
def test_a_forecasts_fall_is_written_with_patch_0_when_nothing_waits(
        demand: Demand, policy: Policy, replicas: int, patch: int) -> None:
    """A forecast's count falls on nearly every pass: written with patch + 1 (which removes no
    runner) each time, the patch-0 self-correction would not come before the fall pauses, and
    the idle runners the forecast made for jobs that did not come would all stay until then."""
    predicted: Forecast | None = forecast(*BURSTS, POLICY, FALLING, 10 * SECOND)
    assert predicted is not None and predicted.extra == 80, predicted.detail
    if policy.forecast is None:
        predicted = None
    current = Current(100, 7, last_scale_up=LAST_UP)
    decision = decide(current, demand, policy, FALLING, forecast=predicted)
    assert decision.write and decision.reason is Reason.SCALE_DOWN
    assert (decision.replicas, decision.patch_id) == (replicas, patch)
    after = current.after(decision, demand, FALLING)
    again = decide(after, demand, policy, FALLING + 10 * SECOND, forecast=predicted)
    if patch == 0:
        assert "patch 0 lets the controller remove the idle runners" in decision.detail
        assert not again.write  # the self-correction is done: no second commit for it
    elif demand.queued == 0:
        assert (again.patch_id, again.reason) == (0, Reason.QUIET_RESET)  # one pass later


def test_the_cushion_is_there_when_the_jobs_it_counts_arrive() -> None:
    """An exact repeat with jitter 0: 20 jobs at 09:00, 2 more at 09:01. A job at 09:00 may
    wait 30 s: its runner must come from a write by 09:00:30 − lead = 08:59:30. The cushion
    first sees the 20 at 08:58:30 (the stretch from now + lead reaches 40 s, past 09:00), and
    every count written from then to 08:59:30 must still hold a runner for each: the stretches
    start from now (a stretch from now + lead would lose them at 08:59:10, and the fall to 2
    would be written with patch 0, removing the idle runners before their jobs come)."""
    times, levels = series((t(WEEK1, 0, 0), 0),
                           *[p for day in (WEEK1, WEEK2)
                             for p in ((t(day, 9, 0), 20), (t(day, 9, 1), 22),
                                       (t(day, 9, 20), 0))])
    policy = replace(POLICY, jitter=timedelta(0))
    current, nothing = Current(0, 0), Demand(0, 0)
    now, last = MONDAY + timedelta(hours=8, minutes=58), MONDAY + timedelta(hours=8, minutes=59,
                                                                             seconds=30)
    written = []
    while now <= last:  # a pass every 10 s, nothing queued or running yet
        predicted = forecast(times, levels, policy, now, 10 * SECOND)
        decision = decide(current, nothing, replace(BASE, forecast=policy), now,
                          forecast=predicted)
        current = current.after(decision, nothing, now)
        written.append(current.replicas)
        now += 10 * SECOND
    assert written == [0] * 3 + [20] * 7  # 08:58:00–08:58:20, then 08:58:30–08:59:30


def test_a_forecast_scale_up_does_not_hold_its_own_fall() -> None:
    """A holiday: the cushion rises to 20 (no demand), then ends. Its own scale-up started no
    delay, so the 20 idle runners go at once, with patch 0."""
    up = decide(Current(0, 3), Demand(0, 0), BASE, BEFORE_NINE, forecast=cushion(20))
    assert (up.replicas, up.reason, up.scaled_up) == (20, Reason.FORECAST, False)
    after = Current(0, 3).after(up, Demand(0, 0), BEFORE_NINE)
    assert after.last_scale_up is None
    down = decide(after, Demand(0, 0), BASE, BEFORE_NINE + MINUTE, forecast=cushion(0))
    assert (down.write, down.replicas, down.patch_id) == (True, 0, 0)
