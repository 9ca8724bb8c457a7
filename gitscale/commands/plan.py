"""`gitscale plan`: compute the next pass and show it; write nothing to git (the state cache
learns what the pass read, as after any pass)."""
from __future__ import annotations

import json
from typing import Any

import click

from gitscale.commands import EXIT_CHANGES, EXIT_ERROR, EXIT_OK, RepoOptions, given_demand, \
    pass_inputs, resolve_every, resolve_now
from gitscale.files import default_cache_dir
from gitscale.plan.cache import StateCache
from gitscale.demand.resolve import read_demand
from gitscale.core.model import Drain, Reason, Why
from gitscale.plan.engine import Plan, SetChange, compute_plan
from gitscale.plan.explain import unchanged_note
from gitscale.plan.forecasts import read_forecasts
from gitscale.manifest.target import SPEC_PATCH, owned_for
from gitscale.progress import Progress
from gitscale.webhooks.reservations_file import leave_served
from gitscale.timeutil import format_time, utcnow
from gitscale.plan.landing import HOLD_WAIT, plan_problems, say_on_stderr
from gitscale.repo.opening import Begun, open_workspace

# Bumped only when a key is removed or changes meaning; a new key leaves it as it is (README,
# "plan --output json"): consumers ignore the keys they do not know.
FORMAT_VERSION = 1


def run_plan(opts: RepoOptions, *, demand: str | None, now: str | None, output: str,
             every: str | None = None, only: tuple[str, ...] = (),
             begun: Begun | None = None) -> int:
    """One pass that writes nothing; ``begun``: the clone ``opening.begin`` started."""
    clock, _ = resolve_now(now)
    window = resolve_every(every)
    given = given_demand(demand)  # (stdin or a pipe: read now, while the clone runs)
    cache = StateCache.load(default_cache_dir())
    with open_workspace(opts.repo, opts.branch, sparse=True, writes=False,
                        begun=begun) as ws:
        # a writer in the same checkout is waited for: its edit in progress is not read
        with ws.exclusive(HOLD_WAIT, say_on_stderr, reading=True):
            tree, config = pass_inputs(ws, opts.config, cache)
            for name in only:
                config.get(name)  # a clear error for a set gitscale.yaml does not have
            ours, left = leave_served(ws.root, config)  # sets `gitscale serve` scales
            reading = read_demand(ws.root, config if given else ours,
                                  given)  # closes its clients
            if now is None:  # the time the demand was read, as `reconcile` stamps it
                clock = utcnow()
            forecasts = read_forecasts(ws, ours, cache, clock, window)
            with Progress("planning", None, show=output == "text") as bar:
                plan = compute_plan(ws.root, ours, reading, clock, ws.base(), cache=cache,
                                    tree=tree, progress=bar.if_shown(), forecasts=forecasts,
                                    pinned_clock=now is not None,
                                    others=[s for s in config.sets if s.name in left])
            plan.left = left
            if only:
                plan = shown_sets(plan, set(only))
            invalid = plan_problems(ws, plan)  # (reconcile refuses to commit such a pass)
    # Nothing goes to git; the state cache learns what the pass read and the answers that
    # wrote nothing (as `reconcile` would), so the next pass reads and decides less.
    if not invalid:  # (a pass reconcile would refuse teaches the cache nothing, as there)
        cache.apply(plan.cache_writes)
        cache.save()
    if output == "json":
        click.echo(json.dumps(plan_json(plan, format_time(clock)), indent=2))
    else:
        click.echo(plan_text(plan), nl=False)
    for unfinished in plan.placeholders:  # a preview still works; landing it would not
        click.echo(f"warning: {unfinished} (reconcile refuses the config until then)", err=True)
    for problem in invalid:  # the change is shown, but it cannot land: an error of the pass
        click.echo(f"error: {problem} (reconcile refuses to commit this file until then)",
                   err=True)
    if plan.errors or invalid:
        return EXIT_ERROR
    return EXIT_CHANGES if plan.changes else EXIT_OK


def shown_sets(plan: Plan, names: set[str]) -> Plan:
    """``plan`` narrowed to the sets ``names`` (`plan --set`): their lines, the diffs of the
    files their changes touch (whole files: another set's change in a shared file shows too),
    the summary and the exit code. The pass itself is computed over every set, so that what it
    shows is what `reconcile` would do (a global cap shares out among all of them)."""
    from dataclasses import replace

    paths = {c.path for c in plan.changes if c.name in names}
    return replace(
        plan, changes=[c for c in plan.changes if c.name in names],
        unchanged=[(n, d) for n, d in plan.unchanged if n in names],
        errors={n: m for n, m in plan.errors.items() if n in names},
        files={p: texts for p, texts in plan.files.items() if p in paths},
        left={n: why for n, why in plan.left.items() if n in names})


def owned(obj: dict[str, Any]) -> dict[str, Any]:
    """Replicas, patch ID and effective time of a changed object, where its kind keeps them."""
    kind = owned_for(str(obj.get("apiVersion")), str(obj.get("kind"))) or SPEC_PATCH
    return kind.shown(obj)


def change_json(change: SetChange) -> dict[str, Any]:
    demand = change.demand
    return {
        "set": change.name,
        "file": change.path,
        "object": {"kind": change.kind, "name": change.object_name},
        "from": owned(change.old_object),
        "to": owned(change.new_object),
        "reason": change.decision.reason.value,
        "detail": change.decision.detail,
        "why": why_json(change.decision.why),
        "demand": None if demand is None else {"queued": demand.queued,
                                               "running": demand.running},
        "patch": change.patch,
    }


def why_json(why: Why) -> dict[str, Any]:
    """What held or capped a set's count (``Decision.why``), for scripts: the values the
    ``detail`` text says, so nothing has to parse it."""
    return {
        "held_until": None if why.held_until is None else format_time(why.held_until),
        "capped": None if why.cap is None else {"by": why.cap.by.value, "at": why.cap.at},
        "drained": why.drain is Drain.DRAINED,
        "reaffirm_at": None if why.reaffirm_at is None else format_time(why.reaffirm_at),
    }


def plan_json(plan: Plan, now: str) -> dict[str, Any]:
    return {
        "format_version": FORMAT_VERSION,
        "base_commit": plan.base,
        "now": now,
        "changes": [change_json(c) for c in plan.changes],
        "unchanged": [{"set": name, "replicas": d.replicas, "patchID": d.patch_id,
                       "reason": d.reason.value,
                       "detail": d.detail, "why": why_json(d.why)} for name, d in plan.unchanged
                      if name not in plan.errors],
        "errors": [{"set": name, "message": msg} for name, msg in plan.errors.items()],
        "left": [{"set": name, "reason": why} for name, why in plan.left.items()],
    }


def plan_text(plan: Plan, *, diffs: bool = True) -> str:
    """A line per set, each file's unified diff and a summary. ``diffs=False`` (commands that
    commit, and then print the commit) leaves out the diffs, and the summary too unless
    nothing changed."""
    width = max([len(c.name) for c in plan.changes] + [len(n) for n, _ in plan.unchanged]
                + [len(n) for n in plan.left] + [4])
    out = []
    for change in plan.changes:
        before, after = owned(change.old_object), owned(change.new_object)
        arrow = f"{_n(before['replicas'])} → {after['replicas']}"
        patch = f"patch {_n(before['patchID'])} → {_n(after['patchID'])}"
        out.append(f"~ {change.name:<{width}}  {arrow:<9} {patch:<16} "
                   f"{change.decision.reason.value}: {change.decision.detail}")
    errors, demands, forecasts = plan.errors, plan.demands, plan.forecasts
    gap = " " * 18  # the patch column, empty, between its spaces
    for name, decision in plan.unchanged:  # (ten thousand lines: kept to plain str methods)
        if name in errors:
            continue
        state = "unchanged" if decision.reason is Reason.UNCHANGED else decision.reason.value
        note = unchanged_note(decision, demands.get(name))
        if note:  # held, drained, paused, at max with jobs waiting…; a plain one says nothing
            state += f": {note}"
        if name in forecasts:  # what the history predicts, or why it cannot yet
            state += f" ({forecasts[name].detail})"
        out.append("  " + name.ljust(width) + "  " + str(decision.replicas).ljust(9) + gap
                   + state)
    for name, message in plan.errors.items():
        out.append(f"! {name:<{width}}  error: {message}")
    for name, why in plan.left.items():
        out.append(f"= {name:<{width}}  {why}")
    if not diffs:
        if not plan.files:
            out.append(_summary(plan))
        return "\n".join(out)
    for path, (old, new) in plan.files.items():
        import difflib  # imported here: only a plan that changes a file shows a diff

        diff = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                    f"a/{path}", f"b/{path}")
        out.append("".join(diff).rstrip("\n"))
    out.append(_summary(plan))
    return "\n".join(out) + "\n"


def _summary(plan: Plan) -> str:
    served = f", {len(plan.left)} left to `gitscale serve`" if plan.left else ""
    return (f"Plan: {len(plan.changes)} to change, "
            f"{len([n for n, _ in plan.unchanged if n not in plan.errors])} unchanged, "
            f"{len(plan.errors)} with errors{served} (base {plan.base[:12]}).")


def _n(value: object) -> str:
    return "-" if value is None else str(value)
