"""`gitscale reconcile`: plan, edit, validate, commit and push one pass."""
from __future__ import annotations

import click

from gitscale.commands import EXIT_ERROR, EXIT_OK, RepoOptions, demand_path, resolve_now
from gitscale.commands.plan import plan_text
from gitscale.config import load_config
from gitscale.demand import DemandReading
from gitscale.cache import StateCache, default_cache_dir
from gitscale.demand.resolve import read_demand
from gitscale.engine import Plan, compute_plan
from gitscale.landing import describe_landing, land
from gitscale.workspace import open_workspace


def run_reconcile(opts: RepoOptions, *, demand: str | None, now: str | None,
                  push: bool) -> int:
    clock, date = resolve_now(now)
    reading: DemandReading | None = None
    cache = StateCache.load(default_cache_dir())
    with open_workspace(opts.repo, opts.branch, push=push) as ws:

        def make_plan() -> Plan:
            # Config and manifests are re-read on every attempt (the branch may have moved);
            # demand is read once, so every attempt decides from the same numbers.
            nonlocal reading
            config = load_config(ws.root, opts.config, cache.configs)
            if reading is None:
                reading = read_demand(ws.root, config, demand_path(demand))
            return compute_plan(ws.root, config, reading, clock, ws.base(), cache=cache)

        try:
            landed = land(ws, make_plan, date=date)
        finally:
            cache.save()
        click.echo(plan_text(landed.plan).split("\n--- a/")[0].rstrip("\n"))
        click.echo(describe_landing(landed, ws))
    for name, message in landed.plan.errors.items():
        click.echo(f"error: {name}: {message} (left untouched)", err=True)
    return EXIT_ERROR if landed.plan.errors else EXIT_OK
