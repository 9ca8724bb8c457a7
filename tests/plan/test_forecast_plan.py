"""`gitscale plan` on a config repo whose history holds two weeks of a weekday 09:00 burst
(built by benchmarks/forecast_repo.py with git fast-import): the plan before 09:00 on day 15
scales up with the reason ``forecast`` and its numbers, and before two weeks of history it
says that it is reactive."""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from gitscale.core.forecast import ForecastPolicy, forecast
from tests.helpers import run

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("forecast_repo", BENCHMARKS / "forecast_repo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("forecast_repo", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[tuple[float, int]]]:
    root = tmp_path_factory.mktemp("forecast")
    series = builder().build(root / "remote.git", days=14, seed=1)
    return f"file://{root / 'remote.git'}", series


def plan(capsys: pytest.CaptureFixture[str], url: str, now: str, tmp_path: Path,
         *extra: str) -> tuple[int, str]:
    demand = tmp_path / "demand.yaml"
    demand.write_text("linux: {queued: 0, running: 0}\n")
    code, out, err = run(capsys, "plan", "--repo", url, "--demand", str(demand), "--now", now,
                         *extra)
    assert code in (0, 2), err
    return code, out


def test_before_nine_on_day_15_the_plan_scales_up_for_the_burst(
        capsys: pytest.CaptureFixture[str], history: tuple[str, list[tuple[float, int]]],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITSCALE_CACHE_DIR", str(tmp_path / "cache"))
    url, series = history
    now = builder().day(15, 8, 58)
    expected = forecast([t for t, _ in series], [v for _, v in series], ForecastPolicy(), now)
    assert expected.level is not None and expected.level > 20
    code, out = plan(capsys, url, now.isoformat(), tmp_path, "--output", "json")
    assert code == 2
    change, = json.loads(out)["changes"]
    assert change["reason"] == "forecast"
    assert change["to"]["replicas"] == expected.level
    assert change["detail"].startswith(f"forecast {expected.level}: q0.9 of demand at 09:00 "
                                       "UTC on the last 2 Mondays")
    # a second run reads the series from the state cache: the same answer
    code, again = plan(capsys, url, now.isoformat(), tmp_path, "--output", "json")
    assert json.loads(again)["changes"] == json.loads(out)["changes"]


def test_with_less_history_the_plan_is_reactive_and_says_so(
        capsys: pytest.CaptureFixture[str], history: tuple[str, list[tuple[float, int]]],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITSCALE_CACHE_DIR", "")
    url, _ = history
    code, out = plan(capsys, url, builder().day(12, 8, 58).isoformat(), tmp_path)
    line = out.splitlines()[0]
    assert line.startswith(("~ linux", "  linux")), out
    assert re.search(r"forecast: 1[01]\.\dd of history, needs 14d: reactive until then", line)
