"""One pass: read manifests, decide, produce edited texts, and what the state cache learns.

``compute_plan`` is what `plan` shows and what `reconcile` commits. It writes nothing: not a
file, not git, not the state cache, which it only reads. It returns everything it wants changed
in one value, the ``Plan``: the edited texts (`land` commits them) and ``cache_writes`` (the
caller applies them, ``StateCache.apply``), so a pass that fails changes nothing. Its phases, in
order: the settled lookup, locating (and the ownership check), deciding, picking the edits,
editing.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Sequence

from gitscale.plan.cache import CacheWrites, StateCache, gc_paused
from gitscale.plan.manifest_files import ManifestFiles
from gitscale.config.load import Config, RunnerSetConfig
from gitscale.core.decide import decide, settled_until
from gitscale.core.forecast import Forecast
from gitscale.core.limits import caps
from gitscale.core.model import Current, Decision, Demand, Reason
from gitscale.demand import DemandReading
from gitscale.repo.index import Tree
from gitscale.manifest import target as tgt
from gitscale.progress import Progress, steps
from gitscale.timeutil import format_time
from gitscale.yamlio.placeholders import placeholder_problems
from gitscale.yamlio.read import Document

if TYPE_CHECKING:
    from gitscale.config.notify_targets import Target
    from gitscale.manifest.edit import Edit
    from gitscale.manifest.target import FieldPath

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
    forecasts: dict[str, Forecast] = field(default_factory=dict)  # forecast sets, by set
    # gitscale.yaml's values still holding `init`'s CHANGE-ME: nothing may land until they go
    placeholders: list[str] = field(default_factory=list)
    cache_writes: CacheWrites = field(default_factory=CacheWrites)  # for StateCache.apply

    @property
    def changed_paths(self) -> list[str]:
        return [p for p, (old, new) in self.files.items() if old != new]


def compute_plan(root: Path, config: Config, reading: DemandReading, now: datetime, base: str,
                 decider: Decider | None = None, only: set[str] | None = None,
                 cache: StateCache | None = None, tree: Tree | None = None,
                 progress: Progress | None = None,
                 forecasts: Mapping[str, Forecast] | None = None, *,
                 pinned_clock: bool = False, others: Sequence[RunnerSetConfig] = ()) -> Plan:
    """The pass over ``config``'s sets (``only``: those named) at ``now``. ``decider`` replaces
    the scaler (`drain`). ``cache`` is read, never written: apply ``plan.cache_writes`` to it.
    ``tree`` (the index's blob ids) lets unchanged manifests come from ``cache`` unread.
    ``forecasts``: what the history predicts for the sets with ``policy.forecast``
    (``gitscale.plan.forecasts``); a forecast set missing from it is decided reactively.
    ``pinned_clock``: ``now`` is `--now`, not the host's clock (``core.decide.hold_from``).
    ``others``: the sets of gitscale.yaml another scaler writes (`gitscale serve`'s, in a pass
    of `plan`, `reconcile` or `run`; the polled ones, in a batch of `serve`): under
    ``limits.maxTotalReplicas`` each keeps what it has, and that counts against the total."""
    with gc_paused():
        pass_ = _Pass(root, config, reading, now, decider, cache or StateCache(), tree,
                      progress, forecasts or {}, pinned_clock, others)
        plan = pass_.run(base, only)
    plan.demands = reading.demands
    plan.forecasts = dict(forecasts or {})
    return plan


class _Found(NamedTuple):
    """A set's object as located, and its state (with the job ids behind its fingerprint)."""

    runner_set: RunnerSetConfig
    located: tgt.Located
    current: Current
    demand: Demand | None


class _Edit(NamedTuple):
    """A set whose decision changes owned fields: the values to set in its object."""

    found: _Found
    decision: Decision
    values: dict[FieldPath, Edit]


class _Pass:
    """One pass's inputs and the two things it gathers besides the plan: what the state cache
    learns (``cache_writes``) and the texts read to locate sets, kept for their edits
    (``kept``).
    Both belong to this pass alone."""

    def __init__(self, root: Path, config: Config, reading: DemandReading, now: datetime,
                 decider: Decider | None, cache: StateCache, tree: Tree | None,
                 progress: Progress | None, forecasts: Mapping[str, Forecast],
                 pinned_clock: bool, others: Sequence[RunnerSetConfig] = ()) -> None:
        self.config, self.reading, self.now, self.decider = config, reading, now, decider
        self.pinned_clock, self.others = pinned_clock, others
        self.cache, self.tree, self.progress, self.forecasts = cache, tree, progress, forecasts
        self.files = ManifestFiles(root, config, tree)
        self.cache_writes = CacheWrites(floor=len(config.sets))
        self.kept = tgt.KeptReads()

    def run(self, base: str, only: set[str] | None) -> Plan:
        plan = Plan(base=base, notify=self.config.notify, cache_writes=self.cache_writes,
                    placeholders=placeholder_problems(self.config.path, self.config.text))
        sets = [s for s in self.config.sets if only is None or s.name in only]
        settled = self.settled(sets, every_set=only is None)
        found = self.locate([s for s in sets if s.name not in settled] if settled else sets,
                            plan.errors)
        decided = self.decide(found)
        edits = self.pick_edits(sets, settled, decided, plan.unchanged)
        self.edit(edits, plan)
        if self.tree is not None:
            plan.modes = {p: self.tree.mode(p) or "100644" for p in plan.files}
        return plan

    def settled(self, sets: list[RunnerSetConfig], every_set: bool) -> dict[str, Decision]:
        """The sets left alone by an earlier pass whose config, manifest blob and demand are the
        same and whose answer still holds at this time: not looked up nor decided again."""
        if self.decider is not None or self.config.max_total_replicas is not None:
            return {}
        if every_set:
            self.cache_writes.keep_settled = frozenset(s.name for s in sets)
        seconds = self.now.timestamp()
        settled: dict[str, Decision] = {}
        for runner_set in sets:
            demand = self.reading.demands.get(runner_set.name)
            blob = self.files.blob(runner_set.manifest) if demand is not None else None
            if blob is not None and demand is not None:
                answer = self.cache.settled_decision(runner_set.name, runner_set.decision_key,
                                                     blob, demand, seconds, self.cache_writes)
                if answer is not None:
                    settled[runner_set.name] = answer
        # Sets on one file are settled together or not at all: `locate` checks that no two
        # sets resolve to one object among the sets it looks up, and a set whose entry changed
        # (a copied entry still naming the other's object) is looked up while a remembered one
        # would not be, and both would be written.
        looked_up = {s.manifest for s in sets if s.name not in settled}
        return {s.name: settled[s.name] for s in sets
                if s.name in settled and s.manifest not in looked_up}

    def locate(self, sets: list[RunnerSetConfig], errors: dict[str, str]) -> list[_Found]:
        """Each set's object and its state (from the cache when git vouches for the file), each
        object owned by one set; the demand errors of the sets (into ``errors``)."""
        self.files.prefetch(sets, self.cache)
        owners: dict[tuple[str, int], str] = {}
        found: list[_Found] = []
        jobs = self.cache.jobs
        for runner_set in steps(sets, self.progress, "planning"):
            path = runner_set.manifest
            try:
                located = self.files.located(runner_set, self.cache, self.cache_writes,
                                             self.kept)
            except tgt.NoSuchObject as exc:
                raise exc.blamed(self.config, runner_set) from None
            # Two sets on one object would both be written, the last one winning, while the
            # commit described both: refuse. (Sets on one file are settled, or looked up,
            # together: `settled`.)
            other = owners.setdefault((path, located.index), runner_set.name)
            if other != runner_set.name:
                raise tgt.shared_object(self.config, runner_set, other, located.kind,
                                        located.name)
            current = located.current
            if current.fingerprint is not None and current.fingerprint in jobs:
                current = replace(current, jobs=jobs[current.fingerprint])
            if self.decider is None and runner_set.name in self.reading.errors:
                errors[runner_set.name] = self.reading.errors[runner_set.name]
            found.append(_Found(runner_set, located, current,
                                self.reading.demands.get(runner_set.name)))
        return found

    def decide(self, found: list[_Found]) -> dict[str, tuple[_Found, Decision]]:
        """Each located set's decision: the ``decider`` when given, else the scaler (under its
        share of ``limits.maxTotalReplicas`` when there is one)."""
        shares = _caps(self.config, found, self.now, self.forecasts, self.pinned_clock,
                       self.held_by_others()) if self.decider is None else {}
        decided: dict[str, tuple[_Found, Decision]] = {}
        for one in found:
            runner_set, _, current, demand = one
            if self.decider is not None:
                decision = self.decider(runner_set, current, demand)
            elif shares:
                decision = decide(current, demand, runner_set.policy, self.now,
                                  shares.get(runner_set.name),
                                  self.forecasts.get(runner_set.name),
                                  pinned_clock=self.pinned_clock)
            else:
                decision = self._decide_settling(one)
            decided[runner_set.name] = (one, decision)
        return decided

    def held_by_others(self) -> int:
        """The replicas the sets another scaler writes (``others``) hold, when a total limits
        them with this pass's sets: they keep what they have, as a paused set does (a drained
        one is held at 0), and the sets of this pass share what is left."""
        if self.config.max_total_replicas is None or not self.others:
            return 0
        self.files.prefetch(self.others, self.cache)
        held = 0
        for runner_set in self.others:
            try:
                current = self.files.located(runner_set, self.cache, self.cache_writes,
                                             self.kept).current
            except tgt.NoSuchObject as exc:
                raise exc.blamed(self.config, runner_set) from None
            held += 0 if current.drained else current.replicas or 0
        return held

    def _decide_settling(self, one: _Found) -> Decision:
        """``decide``, remembered when it writes nothing, with the span it holds for, so that
        later passes (and CLI runs, through the cache on disk) skip the set while its config,
        manifest blob and demand stay the same."""
        runner_set, _, current, demand = one
        decision = decide(current, demand, runner_set.policy, self.now,
                          forecast=self.forecasts.get(runner_set.name),
                          pinned_clock=self.pinned_clock)
        until = settled_until(current, runner_set.policy, self.now, demand)
        blob = self.files.blob(runner_set.manifest)
        if decision.write or demand is None or blob is None or until is None:
            if runner_set.name in self.cache.settled:
                self.cache_writes.unsettle(runner_set.name)
        else:
            self.cache_writes.settle(runner_set.name, runner_set.decision_key, blob, demand,
                                     self.now, until, decision)
        return decision

    def pick_edits(self, sets: list[RunnerSetConfig], settled: dict[str, Decision],
                   decided: dict[str, tuple[_Found, Decision]],
                   unchanged: list[tuple[str, Decision]]) -> list[_Edit]:
        """The sets whose decision changes an owned field, in the config's order; the others
        go to ``unchanged``."""
        stamp = format_time(self.now)
        edits: list[_Edit] = []
        for runner_set in sets:
            if runner_set.name in settled:
                unchanged.append((runner_set.name, settled[runner_set.name]))
                continue
            one, decision = decided[runner_set.name]
            values = _values(one.located, decision, one.demand, stamp)
            if not decision.write or not values:
                unchanged.append((runner_set.name, decision))
                continue
            if one.demand is not None and one.demand.jobs is not None:
                self.cache_writes.remember_jobs(one.demand.fingerprint, one.demand.jobs)
            edits.append(_Edit(one, decision, values))
        return edits

    def edit(self, edits: list[_Edit], plan: Plan) -> None:
        """Each write spliced into its file's text (sets on one file edit it in turn), verified;
        into ``plan``: the changes and each changed file's old and new text."""
        files = self.files
        files.prefetch_texts([e.found.runner_set for e in edits])  # read in one batch
        edited: dict[str, str] = {}
        original: dict[str, list[Document]] = {}  # each edited file's documents, as read
        documents: dict[str, list[Document]] = {}  # ... and as edited so far
        for (runner_set, located, _, _), _, values in edits:
            from gitscale.manifest.edit import edit_fields  # (only a pass that writes edits YAML)

            path = runner_set.manifest
            # Only files that change are parsed for editing; several sets may share one file.
            result = edit_fields(edited[path] if path in edited else files.text(runner_set),
                                 path, located.index, values, documents.get(path), self.kept,
                                 located.owned)
            edited[path] = result.text
            original.setdefault(path, result.before)
            documents[path] = result.after
        for (runner_set, located, _, demand), decision, _ in steps(edits, self.progress,
                                                                  "checking edits"):
            path = runner_set.manifest
            # what the next pass will read back: known now, so it reads no file
            self.cache.remember(path, edited[path], runner_set.object, documents[path],
                                self.cache_writes)
            plan.changes.append(SetChange(
                name=runner_set.name, path=path, kind=located.kind, object_name=located.name,
                before=located.current, decision=decision, demand=demand,
                old_object=original[path][located.index].data,
                new_object=documents[path][located.index].data,
            ))
        texts = files.texts
        plan.files = {p: (texts[p], edited[p]) for p in edited if texts[p] != edited[p]}


def _caps(config: Config, found: list[_Found], now: datetime,
          forecasts: Mapping[str, Forecast], pinned_clock: bool,
          held: int = 0) -> dict[str, int]:
    """Each set's share of ``limits.maxTotalReplicas`` this pass (empty when there is none):
    ``core.limits.caps``, with ``held`` what the sets another scaler writes hold."""
    if config.max_total_replicas is None:
        return {}
    asking = {runner_set.name: (current, demand, runner_set.policy,
                                forecasts.get(runner_set.name))
              for runner_set, _, current, demand in found}
    return caps(config.max_total_replicas, asking, now, held=held, pinned_clock=pinned_clock)


def _values(target: tgt.Located, decision: Decision, demand: Demand | None,
            stamp: str) -> dict[FieldPath, Edit]:
    """The owned fields to write for ``decision``, where the target's kind keeps them
    (``target.KINDS``); empty when nothing would change."""
    owned = target.owned
    if not decision.write:
        return {}
    if not owned.reaffirms and decision.reason in (Reason.REAFFIRM, Reason.QUIET_RESET):
        return {}  # a plain Deployment has nothing to re-affirm: no commit for it
    values: dict[FieldPath, Edit] = {owned.replicas: decision.replicas}
    patch = decision.patch_id if decision.patch_id is not None else 0
    values[owned.patch_id] = str(patch) if owned.patch_in_annotation else patch
    if owned.effective_time is not None:
        values[owned.effective_time] = stamp
    if owned.backlog is not None and decision.backlog != (target.current.backlog or 0):
        values[owned.backlog] = decision.backlog  # (0 is also what an absent one means)
    if demand is not None:
        values[owned.annotation(tgt.A_JOBS)] = demand.fingerprint
    if decision.scaled_up:
        values[owned.annotation(tgt.A_LAST_SCALE_UP)] = stamp
    if decision.reaffirms:
        values[owned.annotation(tgt.A_STILL_WAITING)] = str(decision.reaffirms)
    elif target.current.reaffirms:
        from gitscale.manifest.edit import Remove  # (only for a key to remove: rare)

        # any other write ends the count of still-waiting re-affirms (core.still_waiting):
        # gone, "0" where the line cannot be cut cleanly
        values[owned.annotation(tgt.A_STILL_WAITING)] = Remove("0")
    if decision.reason == Reason.DRAIN:
        values[owned.annotation(tgt.A_DRAINED)] = "true"
    elif decision.reason == Reason.RESUME:
        from gitscale.manifest.edit import Remove  # (only for a key to remove: rare)

        # gone, not "false": nothing left behind to read as a state; "false" only where the
        # line cannot be cut cleanly (a flow mapping, the only annotation)
        values[owned.annotation(tgt.A_DRAINED)] = Remove("false")
    return values
