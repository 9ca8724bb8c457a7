"""The forecasts of a pass: each forecast set's history read (incrementally) and predicted.

Sets without ``policy.forecast`` cost nothing: with none in the config no git command runs.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from gitscale.config.load import Config
from gitscale.core.forecast import DEFAULT_WINDOW, Forecast, forecast
from gitscale.plan.cache import StateCache
from gitscale.repo.workspace import Workspace


def read_forecasts(ws: Workspace, config: Config, cache: StateCache, now: datetime,
                   window: timedelta = DEFAULT_WINDOW) -> dict[str, Forecast]:
    """Each forecast set's ``Forecast`` at ``now``, from the repo's scaling commits (kept in
    ``cache.series`` between passes and, through the state cache, between CLI runs).
    ``window``: the time until the next pass (`run`'s interval, `reconcile --every`), which a
    forecast's count must serve (``DEFAULT_WINDOW`` when the caller cannot say)."""
    sets = [s for s in config.sets if s.policy.forecast is not None]
    if not sets:
        return {}
    needed = min(s.policy.forecast.history_needed(now) for s in sets
                 if s.policy.forecast is not None)
    deepen = None
    if ws.mode == "clone" and ws.remote is not None and ws.remote_branch is not None \
            and ws.git.is_shallow():
        deepen = ws.deepen_since
    if cache.series.update(ws.git, needed, deepen):
        cache.dirty = True
    found = {}
    for runner_set in sets:
        policy = runner_set.policy.forecast
        assert policy is not None
        times, levels = cache.series.of(runner_set.name)
        found[runner_set.name] = forecast(times, levels, policy, now, window)
    return found
