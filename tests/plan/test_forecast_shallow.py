"""A forecast on a shallow checkout (what `actions/checkout` makes without ``fetch-depth``):
gitscale reads the history the checkout holds and never deepens it (the checkout is the
user's), but the plan says plainly that the checkout is shallow and how to fetch it whole,
rather than "7.0d of history". A clone of a URL is deepened as before (test_forecast_sync)."""
from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from tests.helpers import RUNNERSET, git, make_repo, run, simple_config
from tests.record.test_series import START, scaling_commit

POLICY = "{maxReplicas: 50, forecast: {lookback: 14d}}"
NOW = START + timedelta(days=21, hours=8, minutes=59)  # a Monday, 09:00 one lead ahead


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config repo with a 09:00 burst of 40 jobs on three past Mondays."""
    monkeypatch.setenv("GITSCALE_CACHE_DIR", "")
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": POLICY}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 0, running: 0}\n",
    })
    for day in (0, 7, 14):
        scaling_commit(checkout, START + timedelta(days=day, hours=9), 40, 0)
        scaling_commit(checkout, START + timedelta(days=day, hours=9, minutes=20), 0, 0)
    git(checkout, "push", "--quiet", "origin", "main")
    return checkout


def plan_line(capsys: pytest.CaptureFixture[str], repo: Path, tmp_path: Path) -> str:
    demand = tmp_path / "q0.yaml"
    demand.write_text("linux: {queued: 0, running: 0}\n")
    code, out, err = run(capsys, "plan", "--repo", str(repo), "--demand", str(demand),
                         "--now", NOW.isoformat())
    assert code in (0, 2), err
    return out.splitlines()[0]


def test_the_whole_checkout_forecasts(capsys: pytest.CaptureFixture[str], repo: Path,
                                      tmp_path: Path) -> None:
    assert "forecast +40" in plan_line(capsys, repo, tmp_path)


def test_a_shallow_checkout_says_so_and_is_left_as_it_is(
        capsys: pytest.CaptureFixture[str], repo: Path, tmp_path: Path) -> None:
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "--quiet", "--depth", "1", f"file://{repo}", str(shallow))
    held = git(shallow, "rev-parse", "--git-path", "shallow")
    before = (shallow / held).read_text()
    line = plan_line(capsys, shallow, tmp_path)
    assert "forecast +" not in line, line
    # the newest cut of its history: the last scaling commit, on day 14 at 09:20
    assert re.search(r"forecast: the checkout is shallow, its history from 2026-01-19T09:20:00Z "
                     r"\(7\.0d\), needs 14d: fetch it whole \(git fetch --unshallow; "
                     r"actions/checkout: fetch-depth: 0\): reactive until then", line), line
    assert (shallow / held).read_text() == before  # not deepened behind the user's back
    # fetched whole, as the hint says: the forecast
    git(shallow, "fetch", "--quiet", "--unshallow")
    assert "forecast +40" in plan_line(capsys, shallow, tmp_path)


def test_a_shallow_checkout_that_holds_the_lookback_forecasts(
        capsys: pytest.CaptureFixture[str], repo: Path, tmp_path: Path) -> None:
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "--quiet", "--shallow-since=2026-01-05T09:10:00Z", f"file://{repo}",
        str(shallow))
    assert git(shallow, "rev-parse", "--is-shallow-repository") == "true"
    line = plan_line(capsys, shallow, tmp_path)
    assert "forecast +40" in line and "shallow" not in line, line


def test_the_workflow_init_writes_checks_out_the_history_a_forecast_needs(
        capsys: pytest.CaptureFixture[str], repo: Path, tmp_path: Path) -> None:
    """The checkout as actions/checkout makes it from the written step: ``fetch-depth``
    commits deep (its default: 1), 0 for the whole history."""
    code, _, err = run(capsys, "init", str(tmp_path / "scaffold"), "--gitops", "flux")
    assert code == 0, err
    workflow = yaml.safe_load((tmp_path / "scaffold/.github/workflows/gitscale.yml").read_text())
    (job,) = workflow["jobs"].values()
    step = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    depth = int(step["with"].get("fetch-depth", 1))
    work = tmp_path / "work"
    git(tmp_path, "clone", "--quiet", *([f"--depth={depth}"] if depth else []),
        f"file://{repo}", str(work))
    assert "forecast +40" in plan_line(capsys, work, tmp_path)


@pytest.mark.parametrize("fetch", [
    pytest.param(["--unshallow"], id="unshallow"),
    pytest.param(["--shallow-since=2026-01-05T08:00:00Z"], id="deepened"),
])
def test_a_shallow_checkout_fetched_whole_later_is_read_again(
        capsys: pytest.CaptureFixture[str], repo: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, fetch: list[str]) -> None:
    """The state cache keeps the series a shallow checkout held, keyed by its HEAD; once the
    user fetches the rest (HEAD unchanged, and after a new commit too), it is read again whole:
    the cached series holds only what was there before the cut."""
    monkeypatch.setenv("GITSCALE_CACHE_DIR", str(tmp_path / "cache"))
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "--quiet", "--depth", "1", f"file://{repo}", str(shallow))
    assert "the checkout is shallow" in plan_line(capsys, shallow, tmp_path)
    assert "the checkout is shallow" in plan_line(capsys, shallow, tmp_path)  # (from the cache)
    git(shallow, "fetch", "--quiet", *fetch)
    assert "forecast +40" in plan_line(capsys, shallow, tmp_path)
    git(shallow, "commit", "--quiet", "--allow-empty", "-m", "a human commit")
    assert "forecast +40" in plan_line(capsys, shallow, tmp_path)
