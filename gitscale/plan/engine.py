"""One pass, without side effects on git: read manifests, decide, produce edited texts.

``compute_plan`` is what `plan` shows and what `reconcile` commits. It never writes a file.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from gitscale.plan.cache import StateCache, gc_paused
from gitscale.plan.manifest_files import ManifestFiles
from gitscale.config.load import Config, RunnerSetConfig
from gitscale.core.decide import decide, settled_until, wanted
from gitscale.core.limits import share
from gitscale.core.model import Current, Decision, Demand, Reason
from gitscale.demand import DemandReading
from gitscale.errors import ManifestError
from gitscale.repo.index import Tree
from gitscale.manifest import target as tgt
from gitscale.config.notify_targets import Target
from gitscale.progress import Progress, steps
from gitscale.timeutil import format_time
from gitscale.yamlio.read import Document

if TYPE_CHECKING:
    from gitscale.manifest.edit import FieldPath, Value

Decider = Callable[[RunnerSetConfig, Current, "Demand | None"], Decision]


@dataclass(frozen=True)
class SetChange:
    name: str
    path: str
    kind: str
    object_name: str
    before: Current
    decision: Decision
    demand: Demand | None
    old_object: dict[str, Any]
    new_object: dict[str, Any]

    @property
    def patch(self) -> list[dict[str, Any]]:
        import jsonpatch  # imported here: only `plan --output json` shows the patch

        return list(jsonpatch.make_patch(self.old_object, self.new_object))


@dataclass
class Plan:
    base: str
    changes: list[SetChange] = field(default_factory=list)
    unchanged: list[tuple[str, Decision]] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    files: dict[str, tuple[str, str]] = field(default_factory=dict)  # path → (old, new)
    events: dict[str, int] = field(default_factory=dict)  # webhook deliveries recorded
    notify: tuple[Target, ...] = ()  # whom to tell once this plan's commit is pushed
    modes: dict[str, str] = field(default_factory=dict)  # path → git file mode, when known
    notes: list[str] = field(default_factory=list)  # more for the commit body (webhook mode)
    left: dict[str, str] = field(default_factory=dict)  # set → why this pass leaves it alone
    demands: dict[str, Demand] = field(default_factory=dict)  # what the pass read, by set

    @property
    def changed_paths(self) -> list[str]:
        return [p for p, (old, new) in self.files.items() if old != new]


def compute_plan(root: Path, config: Config, reading: DemandReading, now: datetime, base: str,
                 decider: Decider | None = None, only: set[str] | None = None,
                 cache: StateCache | None = None, tree: Tree | None = None,
                 progress: Progress | None = None) -> Plan:
    """``tree`` (the index's blob ids) lets unchanged manifests come from ``cache`` unread."""
    with gc_paused():
        plan = _compute(root, config, reading, now, base, decider, only, cache or StateCache(),
                        tree, progress)
    plan.demands = reading.demands
    return plan


def _compute(root: Path, config: Config, reading: DemandReading, now: datetime, base: str,
             decider: Decider | None, only: set[str] | None, cache: StateCache,
             tree: Tree | None, progress: Progress | None = None) -> Plan:
    plan = Plan(base=base, notify=config.notify)
    sets = [s for s in config.sets if only is None or s.name in only]
    cache.floor = max(cache.floor, len(config.sets))
    files = ManifestFiles(root, config, tree)
    kept = tgt.KeptReads()  # what locating read, for the edits that follow (this pass's)
    # A set left alone by an earlier pass, whose config, manifest blob and demand are the same
    # and whose answer still holds at this time, is not looked up or decided again.
    settled: dict[str, Decision] = {}
    if decider is None and config.max_total_replicas is None:
        if only is None:
            cache.keep_settled({s.name for s in sets})
        seconds = now.timestamp()
        for runner_set in sets:
            demand = reading.demands.get(runner_set.name)
            blob = files.blob(runner_set.manifest) if demand is not None else None
            if blob is not None and demand is not None:
                answer = cache.settled_decision(runner_set.name, runner_set.decision_key,
                                                blob, demand, seconds)
                if answer is not None:
                    settled[runner_set.name] = answer
    active = [s for s in sets if s.name not in settled] if settled else sets
    files.prefetch(active, cache)
    texts = files.texts
    edited: dict[str, str] = {}
    pending: list[tuple[RunnerSetConfig, tgt.Located, Decision, Demand | None]] = []
    original: dict[str, list[Document]] = {}  # each edited file's documents, as read
    documents: dict[str, list[Document]] = {}  # ... and as edited so far
    stamp = format_time(now)
    owners: dict[tuple[str, int], str] = {}
    found: list[tuple[RunnerSetConfig, tgt.Located, Current, Demand | None]] = []
    for runner_set in steps(active, progress, "planning"):
        path = runner_set.manifest
        try:
            located = files.located(runner_set, cache, kept)
        except tgt.NoSuchObject as exc:
            raise config.blame(runner_set.name, tgt.object_key(runner_set.object),
                               f"{exc.detail} in {path}") from None
        # Two sets on one object would both be written, the last one winning, while the commit
        # described both: refuse, as for any manifest that cannot be edited as asked. (Sets
        # on one file share its blob, so they are settled, or decided, together.)
        other = owners.setdefault((path, located.index), runner_set.name)
        if other != runner_set.name:
            raise ManifestError(path, f"runner sets {other!r} and {runner_set.name!r} both "
                                f"resolve to {located.kind} {located.name}; give each its own "
                                f"object (`object: {{kind: ..., name: ...}}` in {config.path})")
        demand = reading.demands.get(runner_set.name)
        current = located.current
        if current.fingerprint is not None and current.fingerprint in cache.jobs:
            current = replace(current, jobs=cache.jobs[current.fingerprint])
        if decider is None and runner_set.name in reading.errors:
            plan.errors[runner_set.name] = reading.errors[runner_set.name]
        found.append((runner_set, located, current, demand))
    caps = _caps(config, found, now) if decider is None else {}
    decided: dict[str, tuple[tgt.Located, Decision, Demand | None]] = {}
    for runner_set, located, current, demand in found:
        if decider is not None:
            decision = decider(runner_set, current, demand)
        elif caps:
            decision = decide(current, demand, runner_set.policy, now, caps[runner_set.name]
                              if runner_set.name in caps else None)
        else:
            decision = _decide(cache, runner_set, current, demand, now,
                               files.blob(runner_set.manifest))
        decided[runner_set.name] = (located, decision, demand)
    writes = []
    for runner_set in sets:  # in the config's order
        if runner_set.name in settled:
            plan.unchanged.append((runner_set.name, settled[runner_set.name]))
            continue
        located, decision, demand = decided[runner_set.name]
        values = _values(located, decision, demand, stamp)
        if not decision.write or not values:
            plan.unchanged.append((runner_set.name, decision))
            continue
        if demand is not None and demand.jobs is not None:
            cache.remember_jobs(demand.fingerprint, demand.jobs)
        writes.append((runner_set, located, decision, demand, values))
    files.prefetch_texts([w[0] for w in writes])  # the files to edit, read in one batch
    for runner_set, located, decision, demand, values in writes:
        from gitscale.manifest.edit import edit_fields  # (only a pass that writes edits YAML)

        path = runner_set.manifest
        # Only files that change are parsed for editing; several sets may share one file.
        result = edit_fields(edited[path] if path in edited else files.text(runner_set), path,
                             located.index, values, documents.get(path), kept)
        edited[path] = result.text
        original.setdefault(path, result.before)
        documents[path] = result.after
        pending.append((runner_set, located, decision, demand))
    for runner_set, located, decision, demand in steps(pending, progress, "checking edits"):
        path = runner_set.manifest
        # what the next pass will read back: known now, so it reads no file
        cache.remember(path, edited[path], runner_set.object, documents[path])
        plan.changes.append(SetChange(
            name=runner_set.name, path=path, kind=located.kind, object_name=located.name,
            before=located.current, decision=decision, demand=demand,
            old_object=original[path][located.index].data,
            new_object=documents[path][located.index].data,
        ))
    plan.files = {p: (texts[p], edited[p]) for p in edited if texts[p] != edited[p]}
    if tree is not None:
        plan.modes = {p: tree.mode(p) or "100644" for p in plan.files}
    return plan


def _decide(cache: StateCache, runner_set: RunnerSetConfig, current: Current,
            demand: Demand | None, now: datetime, blob: str | None) -> Decision:
    """``decide``, remembered when it writes nothing, with the span it holds for, so that
    later passes (and CLI runs, through the cache on disk) skip the set while its config,
    manifest blob and demand stay the same."""
    decision = decide(current, demand, runner_set.policy, now)
    until = settled_until(current, runner_set.policy, now)
    if decision.write or demand is None or blob is None or until is None:
        cache.unsettle(runner_set.name)
    else:
        cache.settle(runner_set.name, runner_set.decision_key, blob, demand, now, until,
                     decision)
    return decision


def _caps(config: Config, found: list[tuple[RunnerSetConfig, tgt.Located, Current,
                                           Demand | None]], now: datetime) -> dict[str, int]:
    """Each set's share of ``limits.maxTotalReplicas`` this pass (empty when there is none).
    Sets the pass leaves alone (paused, drained, demand unknown) keep what they have, and that
    counts against the total."""
    if config.max_total_replicas is None:
        return {}
    wants: dict[str, tuple[int, int]] = {}
    fixed = 0
    for runner_set, _, current, demand in found:
        if current.paused or current.drained or demand is None:
            fixed += 0 if current.drained else (current.replicas or 0)
        else:
            wants[runner_set.name] = wanted(current, demand, runner_set.policy, now)
    return share(config.max_total_replicas, wants, fixed)


def _values(target: tgt.Located, decision: Decision, demand: Demand | None,
            stamp: str) -> dict[FieldPath, Value]:
    """The owned fields to write for ``decision``; empty when nothing would change."""
    fields = target.fields
    if not decision.write:
        return {}
    if not (fields.patch_id or fields.effective_time) and decision.reason in (
            Reason.REAFFIRM, Reason.QUIET_RESET):
        return {}  # a plain Deployment has nothing to re-affirm: no commit for it
    annotations = ("metadata", "annotations")
    values: dict[FieldPath, Value] = {("spec", "replicas"): decision.replicas}
    patch = decision.patch_id if decision.patch_id is not None else 0
    if fields.patch_id:
        values[("spec", "patchID")] = patch
    else:
        values[(*annotations, tgt.A_PATCH_ID)] = str(patch)
    if fields.effective_time:
        values[("spec", "effectiveTime")] = stamp
    if demand is not None:
        values[(*annotations, tgt.A_JOBS)] = demand.fingerprint
    if decision.scaled_up:
        values[(*annotations, tgt.A_LAST_SCALE_UP)] = stamp
    if decision.reason == Reason.DRAIN:
        values[(*annotations, tgt.A_DRAINED)] = "true"
    elif decision.reason == Reason.RESUME:
        values[(*annotations, tgt.A_DRAINED)] = "false"
    return values
