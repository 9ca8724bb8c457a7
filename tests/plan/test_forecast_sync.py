"""A forecast in a long-running clone (`run`, `serve`): the history deepened once stays joined
to the tip across syncs, so a pass reads only the new commits and fetches nothing more."""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from gitscale.config.load import load_config
from gitscale.plan.cache import StateCache
from gitscale.plan.forecasts import read_forecasts
from gitscale.repo.opening import open_workspace
from tests.helpers import git
from tests.record.test_series import START, forecast_repo, scaling_commit


def fetches(trace: Path) -> list[str]:
    return [line.split("trace: built-in: ", 1)[1] for line in trace.read_text().splitlines()
            if "trace: built-in: git fetch" in line]


def test_a_deepened_clone_syncs_without_deepening_again(tmp_path: Path) -> None:
    checkout = forecast_repo(tmp_path, "{maxReplicas: 50, forecast: {lookback: 7d}}")
    url = f"file://{tmp_path / 'remote.git'}"
    now = START + timedelta(days=14, hours=8, minutes=59)
    config = load_config(checkout)
    trace = tmp_path / "trace"
    cache = StateCache()
    with open_workspace(url, None, sparse=True) as ws:
        ws.git.env["GIT_TRACE"] = str(trace)
        first = read_forecasts(ws, config, cache, now)
        assert first["linux"].extra == 40, first["linux"].detail
        assert [f for f in fetches(trace) if "--shallow-since=" in f], fetches(trace)
        for step in range(1, 4):  # three passes, each after a new scaling commit
            scaling_commit(checkout, now + timedelta(seconds=10 * step), step, 0)
            git(checkout, "push", "--quiet", "origin", "main")
            ws.sync()
            read_forecasts(ws, config, cache, now + timedelta(seconds=10 * step))
            times, levels = cache.series.of("linux")
            assert list(levels[-3:])[-1] == step  # the new commit was read
        history = int(git(ws.root, "rev-list", "--count", "HEAD"))
    deepening = [f for f in fetches(trace) if "--shallow-since=" in f]
    assert len(deepening) == 1, deepening  # once, not once per pass
    syncs = [f for f in fetches(trace) if "--shallow-since=" not in f]
    assert len(syncs) == 3 and not any("--depth" in f for f in syncs), syncs
    assert cache.series.logs == 4  # the first read, then one `git log LAST..HEAD` per pass
    assert history >= 5  # the commits read are still there behind the tip


def test_a_cron_of_fresh_clones_reads_the_history_once(tmp_path: Path) -> None:
    """A CLI run over a URL clones one commit and deepens it to the time the forecast needs;
    the next run (a minute later, nothing new) takes the series from the state cache. The
    deepened clone's cut is the oldest commit after that time, here hours after it: it says
    nothing of what was read (everything since that time), so it must not make each run
    until the clock passes it read the whole history again."""
    checkout = forecast_repo(tmp_path, "{maxReplicas: 50, forecast: {lookback: 7d}}",
                             before=[START - timedelta(days=7, hours=-9)])
    url = f"file://{tmp_path / 'remote.git'}"
    config = load_config(checkout)
    cache = StateCache()
    now = START + timedelta(days=14, hours=8, minutes=59)
    for minute in range(3):  # a cron every minute: a fresh clone each time
        with open_workspace(url, None, sparse=True) as ws:
            found = read_forecasts(ws, config, cache, now + timedelta(minutes=minute))
        assert found["linux"].extra == 40, found["linux"].detail
    assert cache.series.logs == 1
