"""A global cap on replicas, shared across sets: demand first, then the runners forecasts
keep ready, then the idle runners the scale-down delay and the step-down limit keep. Pure.

``limits: {maxTotalReplicas: N}`` in gitscale.yaml. Each set asks for what demand wants
inside its bounds, without the delay and the step-down limit (``core.decide.Want.asked``), and
holds what those keep (``Want.held``). When the held counts fit in N (with what the sets the
pass leaves alone keep), nothing is capped. Otherwise each set gets at least its minimum, the
rest of N goes to what demand asks above it in proportion, then to forecasts' cushions, then
to the held runners above what is asked, each in proportion to what it asks (largest
remainders get the odd replicas, ties by name, so a split is reproducible). The cap is harder
than the delay and the step limit: ``core.decide`` never writes a set above its share, and
writes patch 0 when the share cut what they kept. ``caps`` is the rule a pass
(``gitscale.plan.engine``) and ``simulate`` both decide under.
"""
from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from gitscale.core.decide import wanted

if TYPE_CHECKING:
    from gitscale.core.forecast import Forecast
    from gitscale.core.model import Current, Demand
    from gitscale.core.policy import Policy

# one set as a pass sees it: what its manifest holds, its demand (None: it could not be read),
# its policy and its forecast (None: none, or the set is decided reactively)
Asking = tuple["Current", "Demand | None", "Policy", "Forecast | None"]


def caps(total: int, sets: Mapping[str, Asking], now: datetime, *, held: int = 0,
         pinned_clock: bool = False) -> dict[str, int]:
    """Each set's share of ``total`` this pass, the most it may have. Sets the pass leaves
    alone (paused, drained, demand unknown) keep what they have (a drained one 0) and get no
    share: what they keep counts against the total, as ``held`` does (what the sets another
    scaler writes hold). Demand is served first, the runners forecasts keep ready after it,
    the idle runners the scale-down delay and the step-down limit keep last (``share_ahead``).
    ``pinned_clock``: ``now`` is `--now` (``core.decide.hold_from``)."""
    wants: dict[str, tuple[int, int]] = {}
    ahead: dict[str, int] = {}  # what a forecast adds beyond demand: shared after it
    kept: dict[str, int] = {}  # what the delay and the step-down limit keep: shared last
    fixed = held
    for name, (current, demand, policy, forecast) in sets.items():
        if current.paused or current.drained or demand is None:
            fixed += 0 if current.drained else (current.replicas or 0)
            continue
        want = wanted(current, demand, policy, now, pinned_clock=pinned_clock)
        wants[name] = (want.minimum, want.asked)
        asked = want.asked
        if forecast is not None:
            want = wanted(current, demand, policy, now, forecast, pinned_clock=pinned_clock)
            ahead[name] = max(want.asked - asked, 0)
            asked = max(want.asked, asked)
        kept[name] = max(want.held - asked, 0)
    return share_ahead(total, wants, ahead, fixed, kept)


def share(total: int, wants: Mapping[str, tuple[int, int]],
          fixed: int = 0) -> dict[str, int]:
    """Per set ``(minimum, wanted)`` → the most it may have; ``fixed`` is what sets the pass
    leaves alone hold (paused, demand unknown). Sets not capped get their wanted count."""
    budget = max(total - fixed, 0)
    if sum(wanted for _, wanted in wants.values()) <= budget:
        return {name: wanted for name, (_, wanted) in wants.items()}
    floor = {name: min(lo, wanted) for name, (lo, wanted) in wants.items()}
    room = max(budget - sum(floor.values()), 0)
    extra = {name: wanted - floor[name] for name, (_, wanted) in wants.items()}
    asked = sum(extra.values())
    exact = {name: room * e / asked if asked else 0.0 for name, e in extra.items()}
    caps = {name: floor[name] + int(exact[name]) for name in wants}
    left = room - sum(int(v) for v in exact.values())
    for name in sorted(wants, key=lambda n: (-(exact[n] - int(exact[n])), n))[:left]:
        caps[name] += 1
    return caps


def share_ahead(total: int, wants: Mapping[str, tuple[int, int]], ahead: Mapping[str, int],
                fixed: int = 0, kept: Mapping[str, int] | None = None) -> dict[str, int]:
    """Demand first, forecasts after, held runners last: ``wants`` (minimum, the count demand
    asks) shared as ``share`` does, then what the total leaves shared among ``ahead`` — the
    runners a forecast keeps ready beyond that — in proportion, then what is still left among
    ``kept`` — the idle runners the scale-down delay or the step-down limit keeps above both —
    in proportion. A job that waits never loses a runner to one kept for a job that may not
    come, and the delay keeps as many idle runners as the total leaves room for."""
    caps = share(total, wants, fixed)
    for extras in (ahead, kept or {}):
        left = max(total - fixed - sum(caps.values()), 0)
        more = share(left, {name: (0, extra) for name, extra in extras.items() if extra > 0})
        caps = {name: cap + more.get(name, 0) for name, cap in caps.items()}
    return caps
