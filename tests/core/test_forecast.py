"""The forecast's pure core: the quantile, the lead, weekday and time-of-day alignment, the time
zone across a daylight-saving change, the sampling of a step series, and the fallback."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from gitscale.core.decide import decide
from gitscale.core.forecast import ForecastPolicy, forecast, level_at, peak, quantile
from gitscale.core.model import Current, Demand, Reason
from gitscale.core.policy import Policy

UTC = timezone.utc
MONDAY = datetime(2026, 1, 19, tzinfo=UTC)  # day 15 of a trace that began Monday 2026-01-05
POLICY = ForecastPolicy()  # lookback 14d, quantile 0.9, lead 2m, UTC


def t(day: datetime, hour: int, minute: int, second: int = 0) -> float:
    return (day + timedelta(hours=hour, minutes=minute, seconds=second)).timestamp()


def series(*points: tuple[float, int]) -> tuple[list[float], list[int]]:
    ordered = sorted(points)
    return [p[0] for p in ordered], [p[1] for p in ordered]


# A 09:00 burst on the two Mondays before: 80 jobs one week, 120 the other.
WEEK1, WEEK2 = MONDAY - timedelta(days=14), MONDAY - timedelta(days=7)
BURSTS = series((t(WEEK1, 0, 0), 0), (t(WEEK1, 9, 0, 20), 80), (t(WEEK1, 9, 20), 0),
                (t(WEEK2, 9, 0, 20), 120), (t(WEEK2, 9, 20), 0))


@pytest.mark.parametrize(("now", "policy", "level"), [
    pytest.param(MONDAY + timedelta(hours=8, minutes=58), POLICY, 120, id="q0.9-of-two-is-max"),
    pytest.param(MONDAY + timedelta(hours=8, minutes=58), replace(POLICY, quantile=0.5), 80,
                 id="q0.5-of-two-is-min"),
    pytest.param(MONDAY + timedelta(hours=8, minutes=57), POLICY, 0, id="lead-not-yet-reached"),
    pytest.param(MONDAY + timedelta(hours=8, minutes=57),
                 replace(POLICY, lead=timedelta(minutes=3)), 120, id="a-longer-lead-looks-further"),
    pytest.param(MONDAY + timedelta(hours=9, minutes=25), POLICY, 0, id="after-the-burst"),
    pytest.param(MONDAY + timedelta(days=1, hours=8, minutes=58), POLICY, 0,
                 id="tuesday-is-not-monday"),
])
def test_the_forecast_reads_the_same_weekday_and_time(now: datetime, policy: ForecastPolicy,
                                                      level: int) -> None:
    found = forecast(*BURSTS, policy, now)
    assert found.level == level, found.detail


def test_the_detail_names_the_numbers_it_used() -> None:
    found = forecast(*BURSTS, POLICY, MONDAY + timedelta(hours=8, minutes=58))
    assert found.detail == ("forecast 120: q0.9 of demand at 09:00 UTC on the last 2 Mondays "
                            "(80, 120), 2m ahead")


@pytest.mark.parametrize(("history_days", "lookback", "level"), [
    pytest.param(13.9, 14, None, id="less-than-the-lookback"),
    pytest.param(14.1, 14, 120, id="the-lookback-covered"),
    pytest.param(7.5, 7, 120, id="one-week"),
    pytest.param(20, 21, None, id="three-weeks-asked"),
])
def test_less_history_than_the_lookback_falls_back(history_days: float, lookback: int,
                                                   level: int | None) -> None:
    now = MONDAY + timedelta(hours=8, minutes=58)
    first = now - timedelta(days=history_days)
    times, levels = series((first.timestamp(), 0), (t(WEEK2, 9, 0, 20), 120),
                           (t(WEEK2, 9, 20), 0), *([(t(WEEK1, 9, 0, 20), 80)]
                                                   if first.timestamp() < t(WEEK1, 9, 0) else []))
    found = forecast(times, levels, replace(POLICY, lookback=timedelta(days=lookback)), now)
    assert found.level == level
    if level is None:
        assert found.detail == (f"forecast: {history_days:.1f}d of history, needs {lookback}d: "
                                "reactive until then")


def test_no_history_at_all_falls_back() -> None:
    found = forecast([], [], POLICY, MONDAY)
    assert found.level is None and "0.0d of history" in found.detail


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
    at_nine = datetime(2026, 3, 30, 6, 58, tzinfo=UTC)  # 08:58 in Berlin, summer time
    found = forecast(times, levels, policy, at_nine)
    assert found.level == 50, found.detail
    assert "09:00 Europe/Berlin" in found.detail
    # in UTC the same wall time is an hour off: the burst is not there
    assert forecast(times, levels, POLICY, at_nine).level == 0
    assert forecast(times, levels, policy, at_nine - timedelta(hours=1)).level == 0


def test_sampling_a_rise_holds_and_a_fall_is_spread() -> None:
    times, levels = series((0, 0), (100, 40), (200, 40), (700, 0))
    assert level_at(times, levels, 50) == 0  # a rise is at its commit, not before
    assert level_at(times, levels, 100) == 40
    assert level_at(times, levels, 450) == 20  # half way through a fall of 40 over 500 s
    assert level_at(times, levels, 800) == 0
    assert peak(times, levels, 60, 120) == 40  # a commit inside the bin
    assert peak(times, levels, 440, 500) == 21  # the level at the bin's start
    assert peak(times, levels, -100, -10) == 0  # before the first commit


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([3, 1, 2], 0.9, 3), ([3, 1, 2], 0.5, 2), ([3, 1, 2], 0.34, 2), ([3, 1, 2], 0.33, 1),
    ([5], 0.1, 5), ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.9, 9), ([4, 4], 1.0, 4),
])
def test_quantile_is_nearest_rank(values: list[int], q: float, expected: int) -> None:
    assert quantile(values, q) == expected


BASE = Policy(min_replicas=0, max_replicas=100, scale_down_delay=timedelta(minutes=5),
              forecast=POLICY)


def test_the_target_is_the_larger_of_demand_and_forecast_capped_by_max() -> None:
    now = MONDAY + timedelta(hours=8, minutes=58)
    predicted = forecast(*BURSTS, POLICY, now)
    current = Current(0, 3)
    decision = decide(current, Demand(0, 0), BASE, now, forecast=predicted)
    assert (decision.replicas, decision.reason) == (100, Reason.FORECAST)  # 120 capped at 100
    assert decision.detail.startswith("forecast 120: q0.9") and "capped at max 100" in \
        decision.detail
    busy = decide(current, Demand(130, 0), BASE, now, forecast=predicted)
    assert busy.reason is Reason.SCALE_UP and busy.replicas == 100
    small = decide(Current(0, 3), Demand(0, 0), replace(BASE, max_replicas=200), now,
                   forecast=forecast(*BURSTS, replace(POLICY, quantile=0.5), now))
    assert small.replicas == 80


def test_a_fallback_is_reactive_and_says_so() -> None:
    now = MONDAY + timedelta(hours=8, minutes=58)
    predicted = forecast([now.timestamp() - 86400], [0], POLICY, now)
    decision = decide(Current(0, 3), Demand(2, 0), BASE, now, forecast=predicted)
    assert (decision.replicas, decision.reason) == (2, Reason.SCALE_UP)
    assert "forecast: 1.0d of history, needs 14d: reactive until then" in decision.detail


def test_a_schedule_caps_the_forecast_as_it_caps_demand() -> None:
    from gitscale.core.policy import Schedule

    now = MONDAY + timedelta(hours=8, minutes=58)
    window = Schedule("cap", MONDAY, timedelta(days=1), max_replicas=30)
    policy = replace(BASE, schedules=(window,))
    decision = decide(Current(0, 3), Demand(0, 0), policy, now,
                      forecast=forecast(*BURSTS, POLICY, now))
    assert decision.replicas == 30
