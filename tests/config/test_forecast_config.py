"""policy.forecast in gitscale.yaml: defaults, the zone of the schedules, and bad values refused
with the file and line (exit 1, nothing written)."""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from gitscale.config.load import load_config
from gitscale.core.forecast import ForecastPolicy
from tests.helpers import RUNNERSET, make_repo
from tests.test_bad_input import assert_refused


def config(policy: str) -> str:
    return ("runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
            "    source: {file: demand.yaml}\n    policy:\n      maxReplicas: 50\n"
            f"      forecast: {policy}\n")


def repo(tmp_path: Path, policy: str) -> Path:
    return make_repo(tmp_path, {"gitscale.yaml": config(policy),
                                "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=2),
                                "demand.yaml": "linux: {queued: 1, running: 0}\n"})


@pytest.mark.parametrize(("policy", "expected"), [
    pytest.param("{}", ForecastPolicy(), id="defaults"),
    pytest.param("{lookback: 21d, quantile: 0.75, lead: 90s}",
                 ForecastPolicy(timedelta(days=21), 0.75, timedelta(seconds=90)), id="all"),
    pytest.param("{jitter: 5m, wait: 0s}",
                 ForecastPolicy(jitter=timedelta(minutes=5), wait=timedelta(0)),
                 id="jitter-and-wait"),
    pytest.param("{quantile: 1}", ForecastPolicy(quantile=1.0), id="an-integer-quantile"),
    pytest.param("{timezone: Europe/Berlin}", ForecastPolicy(timezone="Europe/Berlin"),
                 id="zone"),
    pytest.param("{days: workdays}", ForecastPolicy(days="workdays"), id="workdays"),
    pytest.param("{days: workdays, lookback: 7d}",
                 ForecastPolicy(timedelta(days=7), days="workdays"), id="workdays-a-week"),
    pytest.param("{days: daily, lookback: 2d}", ForecastPolicy(timedelta(days=2), days="daily"),
                 id="daily-two-days"),
])
def test_forecast_policies(tmp_path: Path, policy: str, expected: ForecastPolicy) -> None:
    checkout = repo(tmp_path, policy)
    assert load_config(checkout).sets[0].policy.forecast == expected


def test_the_zone_defaults_to_the_schedules(tmp_path: Path) -> None:
    text = config("{}") + ("      schedules:\n        - {name: day, start: \"2026-01-05T08:00:00Z\","
                           " duration: 10h, timezone: America/New_York, minReplicas: 1}\n")
    checkout = make_repo(tmp_path, {"gitscale.yaml": text,
                                    "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=2),
                                    "demand.yaml": "linux: {queued: 1, running: 0}\n"})
    forecast = load_config(checkout).sets[0].policy.forecast
    assert forecast is not None and forecast.timezone == "America/New_York"


@pytest.mark.parametrize(("policy", "words"), [
    pytest.param("{lookback: 14days}", ["forecast.lookback", "does not match"], id="bad-duration"),
    pytest.param("{lookback: 3d}", ["between 7d and 91d"], id="too-short"),
    pytest.param("{lookback: 120d}", ["between 7d and 91d"], id="too-long"),
    pytest.param("{days: workdays, lookback: 5d}",
                 ["between 7d and 91d: the forecast reads past workdays and weekend days"],
                 id="workdays-too-short"),
    pytest.param("{days: daily, lookback: 12h}", ["between 1d and 91d: the forecast reads past "
                                                  "days"], id="daily-too-short"),
    pytest.param("{days: weekdays}", ["forecast.days", "weekday", "workdays", "daily"],
                 id="unknown-days"),
    pytest.param("{quantile: 1.5}", ["quantile", "1.5"], id="quantile-above-1"),
    pytest.param("{quantile: 0}", ["quantile"], id="quantile-0"),
    pytest.param("{quantile: .nan}", ["forecast.quantile: nan is not a number"],
                 id="quantile-nan"),
    pytest.param("{quantile: .NaN}", ["forecast.quantile: nan is not a number"],
                 id="quantile-NaN"),
    pytest.param("{quantile: .inf}", ["quantile", "inf"], id="quantile-inf"),
    pytest.param("{quantile: -.inf}", ["quantile", "-inf"], id="quantile-minus-inf"),
    pytest.param("{lead: 7h}", ["longer than 6h"], id="long-lead"),
    pytest.param("{jitter: 7h}", ["forecast jitter '7h' is longer than 6h"], id="long-jitter"),
    pytest.param("{wait: 2h}", ["forecast wait '2h' is longer than 1h"], id="long-wait"),
    pytest.param("{wait: soon}", ["forecast.wait", "does not match"], id="bad-wait"),
    pytest.param("{timezone: Mars/Olympus}", ["unknown timezone 'Mars/Olympus'"], id="zone"),
    pytest.param("{timezone: posixrules}", ["timezone 'posixrules' is this machine's zone"],
                 id="zone-of-the-machine"),
    pytest.param("{lookbak: 14d}", ["unknown key 'lookbak'", "lookback, quantile"],
                 id="unknown-key"),
    pytest.param("14d", ["forecast", "object"], id="not-a-mapping"),
])
def test_bad_forecast_policies_name_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              policy: str, words: list[str]) -> None:
    assert_refused(capsys, repo(tmp_path, policy), "gitscale.yaml:7", *words)


def test_a_float_elsewhere_is_still_refused(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": config("{quantile: 0.9}").replace("maxReplicas: 50", "maxReplicas: 5.0"),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=2),
        "demand.yaml": "linux: {queued: 1, running: 0}\n"})
    assert_refused(capsys, checkout, "gitscale.yaml:6", "not an integer")


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_a_number_that_is_not_finite_is_refused_where_an_integer_goes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": config("{}").replace("maxReplicas: 50", f"maxReplicas: {value}"),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=2),
        "demand.yaml": "linux: {queued: 1, running: 0}\n"})
    assert_refused(capsys, checkout, "gitscale.yaml:6", "maxReplicas")
