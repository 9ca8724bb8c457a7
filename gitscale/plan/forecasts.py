"""The forecasts of a pass: each forecast set's history read (incrementally) and predicted.

Sets without ``policy.forecast`` cost nothing: with none in the config no git command runs.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from gitscale.config.load import Config, RunnerSetConfig
from gitscale.core.forecast import DEFAULT_WINDOW, Forecast, forecast
from gitscale.plan.cache import StateCache
from gitscale.repo.workspace import Workspace
from gitscale.timeutil import format_time


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
    if ws.mode == "checkout" and any(f.extra is None for f in found.values()):
        _shallow_reason(ws, sets, found, now)
    return found


def _shallow_reason(ws: Workspace, sets: list[RunnerSetConfig], found: dict[str, Forecast],
                    now: datetime) -> None:
    """Too little history in a shallow checkout (`actions/checkout` fetches one commit):
    say so, and how to fetch it whole. The checkout is the user's: gitscale does not deepen
    it (a clone of a URL is gitscale's own, and is deepened), so `plan` and `reconcile` read
    the same history there."""
    cut = ws.git.shallow_cut()
    if cut is None:
        return
    since = datetime.fromtimestamp(cut, timezone.utc)
    for runner_set in sets:
        policy = runner_set.policy.forecast
        assert policy is not None
        if found[runner_set.name].extra is not None or since <= policy.history_needed(now):
            continue  # a forecast, or cut before what it reads: the history is young
        held = max((now - since) / timedelta(days=1), 0.0)
        found[runner_set.name] = Forecast(None, (
            f"forecast: the checkout is shallow, its history from {format_time(since)} "
            f"({held:.1f}d), needs {policy.lookback / timedelta(days=1):g}d: fetch it whole "
            "(git fetch --unshallow; actions/checkout: fetch-depth: 0): reactive until then"))
