"""The forecasts of a pass: each forecast set's history read (incrementally) and predicted.

Sets without ``policy.forecast`` cost nothing: with none in the config no git command runs.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from gitscale.config.load import Config, RunnerSetConfig
from gitscale.core.forecast import DEFAULT_WINDOW, Forecast, forecast
from gitscale.plan.cache import StateCache
from gitscale.record.series import DemandSeries
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
        times, levels = cache.series.of(*runner_set.names)  # its previousNames' too
        found[runner_set.name] = forecast(times, levels, policy, now, window)
    if any(f.extra is None for f in found.values()):
        _rename_hints(cache.series, config, sets, found)
    if ws.mode == "checkout" and any(f.extra is None for f in found.values()):
        _shallow_reason(ws, sets, found, now)
    return found


def _rename_hints(series: DemandSeries, config: Config, sets: list[RunnerSetConfig],
                  found: dict[str, Forecast]) -> None:
    """A set reactive for want of history, where the history read names a set that
    gitscale.yaml no longer has (nor as a ``previousNames``) whose commits end before this
    set's begin: a rename not declared, most likely. Say which name, and how to declare it."""
    known = {name for runner_set in config.sets for name in runner_set.names}
    gone = {name: times[-1] for name, (times, _) in series.sets.items()
            if name not in known and times}
    if not gone:
        return
    for runner_set in sets:
        if found[runner_set.name].extra is not None:
            continue
        times, _ = series.of(*runner_set.names)
        first = times[0] if times else float("inf")
        older = sorted((name for name, last in gone.items() if last <= first),
                       key=lambda name: -gone[name])[:3]  # the latest to stop first
        if not older:
            continue
        names = ", ".join(older)
        found[runner_set.name] = Forecast(None, (
            f"{found[runner_set.name].detail}; the history read names "
            f"{'a set' if len(older) == 1 else 'sets'} gitscale.yaml no longer has, whose "
            f"commits end before this set's begin: {names}: if "
            f"{'it' if len(older) == 1 else 'one'} was this set's name, add `previousNames: "
            f"[{older[0] if len(older) == 1 else 'NAME'}]` to the set"))


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
