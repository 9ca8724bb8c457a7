"""`gitscale plan` on a config repo whose history holds two weeks of a weekday 09:00 burst
(built by benchmarks/forecast_repo.py with git fast-import): the plan before 09:00 on day 15
scales up with the reason ``forecast`` by the cushion the design asks (the jobs the past
Mondays saw arrive, counted by brute force), and before two weeks of history it says that it
is reactive."""
from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from gitscale.core.forecast import ForecastPolicy, forecast
from tests.core.test_forecast import jobs_arrived
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
    now = builder().day(15, 8, 59)  # 09:00 one lead (1m) ahead
    # What the design asks, by brute force over the commits the repo holds (the first point
    # of ``series`` is the init commit's time, which records no demand): on each past Monday
    # the most jobs that arrived within reach = 1m (a CLI pass's window) + 1m lead - 30s wait
    # = 90s of each other, the stretch starting from 08:57 (now − 2m jitter) to 09:02 (now +
    # 1m lead + 2m jitter); q0.9 of two Mondays is the larger
    times, levels = [t for t, _ in series[1:]], [v for _, v in series[1:]]
    samples = []
    for day in (1, 8):
        nine = builder().day(day, 9, 0).timestamp()
        samples.append(jobs_arrived(times, levels, nine - 180, nine + 120, 90))
    extra = max(samples)
    assert extra > 20  # the bursts of 100–140 jobs: a good part of them within 90s
    assert forecast(times, levels, ForecastPolicy(), now).extra == extra
    code, out = plan(capsys, url, now.isoformat(), tmp_path, "--output", "json")
    assert code == 2
    change, = json.loads(out)["changes"]
    assert change["reason"] == "forecast"
    assert change["to"]["replicas"] == min(0 + extra, 200)  # demand 0 + the cushion, max 200
    assert change["detail"].startswith(
        f"demand 0 (queued 0, running 0) + forecast +{extra}: q0.9 of the jobs that arrived "
        f"within 90s, from 08:57–09:02 UTC, on the last 2 Mondays ({samples[0]}, {samples[1]})")
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


def test_a_plan_days_ahead_leaves_the_next_plans_their_history(
        capsys: pytest.CaptureFixture[str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`plan --now` ten days ahead (what will the forecast do then?) shares the state cache
    with the passes on time. Its read of the history forgets what its own window does not
    reach; a pass on time after it must read that again, not forecast from a series that
    stops short ("11.3d of history, needs 14d: reactive until then" in a repo holding 14)."""
    monkeypatch.setenv("GITSCALE_CACHE_DIR", str(tmp_path / "cache"))
    remote = tmp_path / "remote.git"
    builder().build(remote, days=14, seed=1)
    url = f"file://{remote}"
    on_time = builder().day(15, 8, 59).isoformat()
    _, first = plan(capsys, url, on_time, tmp_path)
    assert "forecast +" in first.splitlines()[0], first
    work = tmp_path / "work"
    git_cli("clone", "--quiet", url, str(work))
    (work / "NOTES.md").write_text("a person's commit: HEAD moves\n")
    git_cli("-C", str(work), "add", "NOTES.md")
    git_cli("-C", str(work), "-c", "user.name=p", "-c", "user.email=p@example.com",
            "commit", "--quiet", "-m", "notes")
    git_cli("-C", str(work), "push", "--quiet", "origin", "HEAD:main")
    plan(capsys, url, builder().day(25, 8, 59).isoformat(), tmp_path)
    _, again = plan(capsys, url, on_time, tmp_path)
    assert again.splitlines()[0] == first.splitlines()[0]


def git_cli(*args: str) -> None:
    subprocess.run(["git", *args], check=True, capture_output=True)
