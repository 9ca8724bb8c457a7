"""Metrics of a simulated run, as a text table or JSON."""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gitscale.simulate.harness import Outcome, Settings
from gitscale.simulate.trace import Trace

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Metrics:
    name: str
    policy: str
    jobs: int
    wait_p50: float
    wait_p95: float
    wait_max: float
    runner_minutes: float
    vs_oracle: float
    idle_runner_minutes: float
    pods_created: int
    commits: int | None
    commits_per_hour: float | None
    patch_only_commits: int | None
    never_started: int = 0  # jobs still waiting when the drain tail reached its limit


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (the value at least ``fraction`` of the values are ≤ to)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, -(-int(fraction * 1000) * len(ordered) // 1000))
    return ordered[min(rank, len(ordered)) - 1]


def metrics(outcomes: Sequence[Outcome], trace: Trace, report_from: float = 0.0) -> list[Metrics]:
    """``report_from``: the outcomes count from this many seconds into the trace on (so do the
    hours that commits per hour are of)."""
    oracle = next((o.runner_seconds for o in outcomes if o.name == "oracle"), 0.0)
    hours = max(trace.hours - report_from / 3600, 1e-9)
    rows = []
    for o in outcomes:
        rows.append(Metrics(
            name=o.name, policy=o.policy, jobs=len(o.waits),
            wait_p50=round(percentile(o.waits, 0.50), 1),
            wait_p95=round(percentile(o.waits, 0.95), 1),
            wait_max=round(max(o.waits, default=0.0), 1),
            runner_minutes=round(o.runner_seconds / 60, 1),
            vs_oracle=round(o.runner_seconds / oracle, 3) if oracle else 0.0,
            idle_runner_minutes=round(o.idle_seconds / 60, 1),
            pods_created=o.pods, commits=o.commits,
            commits_per_hour=round(o.commits / hours, 1) if o.commits is not None else None,
            patch_only_commits=o.patch_only_commits, never_started=o.unstarted,
        ))
    return rows


def as_json(rows: Sequence[Metrics], trace: Trace, settings: Settings) -> str:
    document: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "trace": {"name": trace.name, "start": trace.start.isoformat(), "hours": trace.hours,
                  "jobs": len(trace.jobs), "sets": trace.sets},
        "settings": asdict(settings),
        "results": [asdict(row) for row in rows],
    }
    return json.dumps(document, indent=2)


def as_text(rows: Sequence[Metrics], trace: Trace, settings: Settings) -> str:
    sync = (f"GitOps poll {settings.sync_poll:g}s" if settings.sync_poll
            else f"sync {settings.sync_delay:g}s")
    lines = [f"trace: {trace.name}, {len(trace.jobs)} jobs over {trace.hours:g} h, "
             f"{len(trace.sets)} set(s): {', '.join(trace.sets)}",
             *([f"reported from {trace.time(settings.report_from).isoformat()} (the jobs "
                "arriving from then on, and the runners and commits after it)"]
               if settings.report_from else []),
             f"decisions every {settings.interval:g}s, {sync}, pod start "
             f"{settings.pod_start:g}s"
             + (f"; gitscale's clock {settings.scaler_clock_offset:+g}s from the cluster's"
                if settings.scaler_clock_offset else "")
             + (f"; serve: window {settings.window:g}s, reservation {settings.reservation:g}s, "
                f"hold {settings.hold:g}s"
                if any(r.name == "gitscale serve" for r in rows) else ""), ""]
    header = ("strategy", "wait p50", "p95", "max", "runner-min", "×oracle", "idle-min",
              "pods", "commits", "/hour", "patch-only")
    table = [header] + [(
        f"{r.name} ({r.policy})" if r.name.startswith("gitscale") else r.name,
        _s(r.wait_p50), _s(r.wait_p95), _s(r.wait_max), f"{r.runner_minutes:.0f}",
        f"{r.vs_oracle:.2f}", f"{r.idle_runner_minutes:.0f}", str(r.pods_created),
        _n(r.commits), _n(r.commits_per_hour), _n(r.patch_only_commits)) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        lines.append("  ".join(cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i])
                               for i, cell in enumerate(row)).rstrip())
    stuck = [f"{r.name} {r.never_started}" for r in rows if r.never_started]
    if stuck:
        lines += ["", f"jobs never started (no runner by the end of the drain tail): "
                  f"{', '.join(stuck)}; their wait counts until then"]
    return "\n".join(lines)


def _s(seconds: float) -> str:
    return f"{seconds:.0f}s"


def _n(value: float | int | None) -> str:
    if value is None:
        return "–"
    return f"{value:g}" if isinstance(value, float) else str(value)
