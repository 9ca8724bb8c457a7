"""`simulate --chart`: one panel per strategy, runners against queued and running jobs."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gitscale.simulate.report import Metrics
from gitscale.simulate.harness import Outcome
from gitscale.simulate.trace import Trace


def write_chart(outcomes: Sequence[Outcome], rows: Sequence[Metrics], trace: Trace,
                path: Path) -> None:
    from gitscale.charts.render import Panel, Series, render

    panels = []
    for outcome, row in zip(outcomes, rows):
        if not outcome.series:
            continue  # the oracle is computed, not simulated
        runners: dict[float, float] = {}
        queued: dict[float, float] = {}
        running: dict[float, float] = {}
        for samples in outcome.series.values():  # all sets of the strategy added up
            for at, live, waiting, busy in samples:
                runners[at] = runners.get(at, 0) + live
                queued[at] = queued.get(at, 0) + waiting
                running[at] = running.get(at, 0) + busy
        times = sorted(runners)
        stamps = [trace.time(t) for t in times]
        name = outcome.name
        if name.startswith("gitscale"):
            policy = outcome.policy if len(outcome.policy) <= 44 else outcome.policy[:43] + "…"
            name = f"{name} {policy}"
        panels.append(Panel(
            title=f"{name}: p95 wait {row.wait_p95:.0f}s, {row.runner_minutes:.0f} runner-min "
                  f"({row.vs_oracle:.2f}× oracle)",
            series=[Series("runners", stamps, [runners[t] for t in times], step=True),
                    Series("queued", stamps, [queued[t] for t in times], step=True,
                           style="dotted"),
                    Series("running", stamps, [running[t] for t in times], step=True,
                           style="dashed")]))
    render(panels, path, title=f"gitscale simulate — {trace.name}")
