"""A global cap on replicas, shared across sets in proportion to demand, then what is left
to the runners forecasts keep ready. Pure.

``limits: {maxTotalReplicas: N}`` in gitscale.yaml: when the sets together want more than N,
each keeps its minimum and the rest of N is split in proportion to what each wants above its
minimum (largest remainders get the odd replicas, ties by name, so a split is reproducible).
"""
from __future__ import annotations

from collections.abc import Mapping


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
                fixed: int = 0) -> dict[str, int]:
    """Demand first, forecasts after: ``wants`` (minimum, the count demand asks) shared as
    ``share`` does, then what the total leaves shared among ``ahead`` — the runners a
    forecast keeps ready beyond that — in proportion. A job that waits never loses a runner
    to one kept for a job that may not come."""
    caps = share(total, wants, fixed)
    left = max(total - fixed - sum(caps.values()), 0)
    more = share(left, {name: (0, extra) for name, extra in ahead.items() if extra > 0})
    return {name: cap + more.get(name, 0) for name, cap in caps.items()}
