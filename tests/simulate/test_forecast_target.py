"""The forecast's outcome target as a regression test: on day 15 of the weekly trace (14 days
of a weekday 09:00 burst of 100–140 jobs), pod start 45 s, sync 10 s, decisions every 10 s,
{maxReplicas: 200, scaleDownDelay: 5m, forecast: {}}: p95 wait ≤ 30 s at runner-minutes ≤ 1.30×
the oracle's, where the listener waits a pod start (45 s) and reactive gitscale ~60 s (15 days
simulated at a 10 s cadence: ~10 s).

It depends on the day drawn: a day-15 burst that comes earlier than on both past Mondays, or
holds more jobs, is served reactively for the difference, and one that comes later holds the
forecast's runners idle. Seed 4 meets both targets (README, "Outcomes": the figures over
twenty seeds, `benchmarks/forecast_seeds.py`). When the past Mondays are copies of day 15 the
forecast is exact, and what is left is the cushion's own cost: runners kept idle ahead of the
jobs that arrive within one reach (1.06–1.19× over seeds 1–20, p95 ≤ 30 s on all)."""
from __future__ import annotations

import functools
from dataclasses import replace


from gitscale.core.forecast import ForecastPolicy
from gitscale.simulate.report import Metrics, metrics
from gitscale.simulate.harness import Settings
from gitscale.simulate.strategies import run_all
from gitscale.simulate.trace import WEEKLY_HOURS, Job, Trace, synthetic
from tests.simulate.util import TARGET

DAY_15 = 14 * 86400.0
SETTINGS = Settings(interval=10, sync_delay=10, pod_start=45, report_from=DAY_15)


def repeated(trace: Trace) -> Trace:
    """The trace with its first two Mondays replaced by copies of day 15 (its background too)."""
    day = 86400.0
    monday = [j for j in trace.jobs if j.arrival >= DAY_15]
    kept = [j for j in trace.jobs if j.arrival < DAY_15 and not (j.arrival < day
                                                                  or 7 * day <= j.arrival < 8 * day)]
    copies = [(j.arrival - shift, j.duration) for shift in (DAY_15, 7 * day) for j in monday]
    jobs = sorted(copies + [(j.arrival, j.duration) for j in kept + monday])
    return Trace("repeat", trace.start, tuple(Job(i, "default", a, d)
                                              for i, (a, d) in enumerate(jobs)), trace.hours)


@functools.cache
def day_15(seed: int, repeat: bool = False,
           policy: ForecastPolicy = ForecastPolicy()) -> dict[str, Metrics]:
    trace = synthetic("weekly", seed=seed, hours=WEEKLY_HOURS, sets=["default"])
    if repeat:
        trace = repeated(trace)
    forecasting = replace(TARGET, forecast=policy)
    rows = metrics(run_all(trace, [("forecast", {"default": forecasting})],
                           SETTINGS, baselines=False), trace, DAY_15)
    return {row.policy if row.name == "gitscale" else row.name: row for row in rows}


def test_the_trace_is_two_weeks_of_a_weekday_burst_and_day_15() -> None:
    trace = synthetic("weekly", seed=4, hours=WEEKLY_HOURS, sets=["default"])
    per_day = [sum(1 for j in trace.jobs if d * 86400 <= j.arrival < (d + 1) * 86400)
               for d in range(15)]
    assert all(100 <= n <= 150 for n in per_day[:5] + per_day[7:12] + per_day[14:])
    assert all(n <= 5 for n in per_day[5:7] + per_day[12:14])  # quiet weekends
    rows = day_15(4)
    assert rows["oracle"].jobs == per_day[14]


def test_day_15_meets_the_forecast_target() -> None:
    rows = day_15(4)
    assert rows["forecast"].wait_p95 <= 30
    assert rows["forecast"].vs_oracle <= 1.30


def test_an_exact_repeat_meets_the_target_at_the_cushions_cost() -> None:
    """The scaling's own cost, apart from the day-to-day variation: the cushion keeps a runner
    idle for each job the past Mondays saw arrive within reach = 10 s + 1m − 30 s = 40 s, the
    stretches starting from 2m (jitter) before now to 1m (lead) + 2m after, so the jobs wait
    at most about the 30 s it allows, and the runners it keeps ready before each arrival (and
    for a jitter after) cost a little over the oracle's (which starts each runner as its job
    arrives): 1.06–1.19× on seeds 1–20 (`benchmarks/forecast_seeds.py --days repeat`), 1.10×
    on seed 4 here. The first design (a level: the past weeks' demand) gave 1.00×: it held
    the past weeks' runners for as long as their jobs ran, however many of today's came."""
    rows = day_15(4, repeat=True)
    assert rows["oracle"].jobs == day_15(4)["oracle"].jobs
    assert rows["forecast"].wait_p95 <= 30
    assert rows["forecast"].vs_oracle <= 1.16


def test_every_past_workday_meets_the_target_where_two_mondays_do_not() -> None:
    """Seed 18: day 15's burst brought more jobs within one reach than either past Monday's
    (126 against 119 and 102), and the jobs beyond the cushion waited a pass, the sync and a
    pod start (p95 36 s). ``days: workdays`` reads the ten past workdays, some of which were as
    dense: p95 ≤ 30 s, still ≤ 1.30× (19 of 20 seeds, README "Outcomes")."""
    assert day_15(18)["forecast"].wait_p95 > 30
    rows = day_15(18, policy=ForecastPolicy(days="workdays"))
    assert rows["forecast"].wait_p95 <= 30
    assert rows["forecast"].vs_oracle <= 1.30
