"""`gitscale drain SET`: replicas 0, patch ID 0, and hold it there until `--resume`."""
from __future__ import annotations

import click

from dataclasses import replace

from gitscale.commands import EXIT_OK, RepoOptions, resolve_now
from gitscale.commands.plan import plan_text
from gitscale.config.load import RunnerSetConfig, load_config
from gitscale.core.decide import drain, resume
from gitscale.core.model import Current, Decision, Demand
from gitscale.demand import DemandReading
from gitscale.plan.engine import Plan, compute_plan
from gitscale.plan.landing import describe_landing, land
from gitscale.repo.opening import open_workspace


def _drain(_: RunnerSetConfig, current: Current, __: Demand | None) -> Decision:
    return drain(current)


def _resume(_: RunnerSetConfig, current: Current, __: Demand | None) -> Decision:
    decision = resume(current)
    if decision.write and current.paused:
        # the drain is lifted, but the loop leaves a paused set alone: say so in the commit
        # rather than promise a scaling that will not come
        return replace(decision, detail=f"resumed, but {PAUSED_NOTE}")
    return decision


PAUSED_NOTE = ("still paused (annotation gitscale.dev/paused: \"true\"): it stays at its count "
               "until the annotation is removed")


def run_drain(opts: RepoOptions, name: str, *, now: str | None, push: bool,
              resume: bool) -> int:
    clock, date = resolve_now(now)
    with open_workspace(opts.repo, opts.branch, push=push) as ws:

        def make_plan() -> Plan:
            config = load_config(ws.root, opts.config)
            config.get(name)  # a clear error for an unknown set
            return compute_plan(ws.root, config, DemandReading(), clock, ws.base(),
                                decider=_resume if resume else _drain, only={name})

        landed = land(ws, make_plan, date=date)
        click.echo(plan_text(landed.plan, diffs=False))
        click.echo(describe_landing(landed, ws))
    if resume and any(c.before.paused for c in landed.plan.changes):
        click.echo(f"warning: {name}: {PAUSED_NOTE} (README, \"Holding a set\")", err=True)
    return EXIT_OK
