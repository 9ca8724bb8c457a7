"""`gitscale reconcile`: plan, edit, validate, commit and push one pass."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import click

from gitscale.commands import EXIT_ERROR, EXIT_OK, RepoOptions, given_demand, pass_inputs, \
    resolve_every, resolve_now
from gitscale.commands.plan import plan_text
from gitscale.demand import DemandReading
from gitscale.demand.file import FileSource
from gitscale.errors import GitscaleError
from gitscale.files import default_cache_dir
from gitscale.plan.cache import StateCache
from gitscale.demand.resolve import Sources, read_demand
from gitscale.plan.engine import Plan, compute_plan
from gitscale.core.forecast import DEFAULT_WINDOW
from gitscale.plan.forecasts import read_forecasts
from gitscale.plan.landing import describe_landing, land
from gitscale.progress import Progress
from gitscale.webhooks.reservations_file import leave_served
from gitscale.repo.opening import Begun, open_workspace
from gitscale.repo.workspace import Workspace
from gitscale.timeutil import utcnow

if TYPE_CHECKING:
    from gitscale.repo.index import Tree


class Planner:
    """``make_plan`` for `land`, shared by `reconcile` and `run`. Config and manifests are
    re-read on every attempt (the branch may have moved); demand is read once, so every
    attempt decides from the same numbers. ``progress``: a bar on a terminal while it plans
    (when that takes a while: thousands of sets on a first pass). ``window``: the time until
    the next pass, which a forecast's count must serve (`run` knows it). ``pinned_clock``:
    ``clock`` is `reconcile --now`, not the host's clock (`run` never pins it).

    The pass's time (``now``: every write's ``spec.effectiveTime``) is read from ``clock``
    once the demand is read, not when the pass begins: the controller refills the slot of a
    runner that finished before it (the write counted its job as gone) and holds one that
    finished after, so a job that ended during a read of some seconds (a clone, an API paged
    through) would have had its slot held, the job queued in its place left waiting. Every
    attempt of the pass keeps that time, as it keeps the demand.

    ``demand``: ``--demand`` (``given_demand``), read by the first attempt (a file) or already
    read when the command started (standard input, a pipe: never read again)."""

    def __init__(self, ws: Workspace, opts: RepoOptions, demand: FileSource | None,
                 clock: Callable[[], datetime], cache: StateCache,
                 sources: Sources | None = None, *, progress: bool = False,
                 window: timedelta = DEFAULT_WINDOW, pinned_clock: bool = False) -> None:
        self.ws, self.opts, self.demand, self.clock = ws, opts, demand, clock
        self.cache, self.sources, self.progress = cache, sources, progress
        self.window, self.pinned_clock = window, pinned_clock
        self.now: datetime | None = None  # set as the demand is read
        self.reading: DemandReading | None = None
        self.tree: Tree | None = None  # the last plan's (its base commit's files)

    def __call__(self) -> Plan:
        root = self.ws.root
        tree, config = pass_inputs(self.ws, self.opts.config, self.cache)
        self.tree = tree
        ours, left = leave_served(root, config)  # sets `gitscale serve` scales
        if self.reading is None or self.now is None:
            self.reading = read_demand(root, config if self.demand else ours,
                                       self.demand, self.sources)
            self.now = self.clock()
        forecasts = read_forecasts(self.ws, ours, self.cache, self.now, self.window)
        with Progress("planning", None, show=self.progress) as bar:
            plan = compute_plan(root, ours, self.reading, self.now, self.ws.base(),
                                cache=self.cache, tree=tree, progress=bar.if_shown(),
                                forecasts=forecasts, pinned_clock=self.pinned_clock,
                                others=[s for s in config.sets if s.name in left])
        plan.left = left
        return plan


def crd_drift(ws: Workspace, base: Tree | None = None, changed: Sequence[str] = ()) -> list[str]:
    """The repo's RunnerSet CRD, where `init` and `crd --repo` put it (a file named after it),
    or in a ``crds.yaml`` bundle this clone already holds, when it is not this gitscale's
    (``gitscale.manifest.crd_drift``): free when it is, by its blob id. A bundle's blob is
    never fetched for a warning (a partial clone lacks it: another project's CRDs, megabytes
    of them), nor is another file read.

    ``base``: the files the pass listed (a clone's base commit; a checkout's index, which
    ``prepare_write`` found clean), and ``changed`` the paths its commit changed. When none
    of those may hold the CRD, the commit's CRD files are the base's, and listing them again
    would give the same blob ids: in a clone an ``ls-tree``, in a checkout ``ls-files`` and
    ``diff-files`` (which stats every tracked file). The commit changes only ``changed``."""
    from gitscale.manifest.crd_drift import drift, shipped_blob, where_the_crd_is
    from gitscale.repo.index import Tree

    if base is not None and not any(where_the_crd_is(changed)):
        tree = base
    else:
        tree = Tree.read(ws.git, sparse=ws.sparse)
    listed = tree.files()
    named, bundles = where_the_crd_is(listed)
    stale = {p: listed[p] for p in named + bundles if listed[p] != shipped_blob()}
    if not stale:
        return []
    if ws.sparse:
        in_bundles = sorted(p for p in stale if p in bundles)
        if in_bundles and ws.git.promisor is not None:  # a partial clone: what it holds only
            lacking = ws.git.missing_blobs(in_bundles)
            for p in in_bundles:
                if stale[p] in lacking:
                    del stale[p]
        contents = tree.read_blobs(stale)
        texts = {p: contents[blob].decode("utf-8", "replace") for p, blob in stale.items()}
    else:  # a checkout: its files (git's would fetch each blob a partial checkout lacks)
        texts = {}
        for p in stale:
            path = ws.root / p
            if path.is_file() and not path.is_symlink():
                try:
                    texts[p] = path.read_text(encoding="utf-8", errors="replace")
                except OSError:
                    continue  # not ours to report: `validate` reads the files it can
    return [w for w in (drift(p, t) for p, t in texts.items()) if w]


def crd_warnings(ws: Workspace, base: Tree | None = None,
                 changed: Sequence[str] = ()) -> list[str]:
    """``crd_drift``, after the pass has landed: never an error of the pass (it has pushed).
    What stops the check (a fetch that fails) is one warning line."""
    try:
        return crd_drift(ws, base, changed)
    except GitscaleError as exc:
        said = " ".join(str(exc).split())
        return [f"the repo's RunnerSet CRD not checked: {said[:300]}"]


def run_reconcile(opts: RepoOptions, *, demand: str | None, now: str | None,
                  push: bool, every: str | None = None, begun: Begun | None = None) -> int:
    """One pass; ``begun``: the clone ``opening.begin`` started for ``opts.repo``."""
    pinned, date = resolve_now(now)
    window = resolve_every(every)
    given = given_demand(demand)  # (stdin or a pipe: read now, once, while the clone runs)
    cache = StateCache.load(default_cache_dir())
    with open_workspace(opts.repo, opts.branch, push=push, sparse=True, begun=begun) as ws:
        planner = Planner(ws, opts, given, (lambda: pinned) if now is not None else utcnow,
                          cache, progress=True, window=window, pinned_clock=now is not None)
        try:
            landed = land(ws, planner, cache=cache, date=date)
        finally:
            cache.save()
        click.echo(plan_text(landed.plan, diffs=False))
        click.echo(describe_landing(landed, ws))
        if any(c.kind == "RunnerSet" for c in landed.plan.changes):
            for warning in crd_warnings(ws, planner.tree, landed.plan.changed_paths):
                click.echo(f"warning: {warning}", err=True)
    for name, message in landed.plan.errors.items():
        click.echo(f"error: {name}: {message} (left untouched)", err=True)
    return EXIT_ERROR if landed.plan.errors else EXIT_OK
