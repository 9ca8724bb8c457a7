"""What a pass may remember between passes and runs: the owned state of each manifest, keyed
by the git blob id of its content (and which object in it), and the parsed gitscale.yaml.

A pass that changes ten of ten thousand manifests should pay for ten. git lists the blob id of
every tracked file for free (``gitscale.repo.index``), so an unchanged manifest is neither read
nor hashed nor parsed; a file read from disk is keyed by the same id, computed from its bytes.
The cache is a pure function of file contents (plus gitscale's version), so it can never be
stale, only missing. It lives in memory in loop mode and in ``$GITSCALE_CACHE_DIR`` (default
``$XDG_CACHE_HOME/gitscale``) between CLI runs; a missing or unreadable cache only makes a pass
slower.

It also remembers, per set, the last decision that wrote nothing and what it was made from
(the set's config digest, its manifest's blob id, its demand) with the time span it holds for
(``gitscale.core.decide.settled_until``): a pass decides again only the sets whose inputs
changed or whose span ran out.

A pass never changes it: it reads it and gathers what it learnt in a ``CacheWrites`` (returned in
its plan), and the command applies that once, after the pass decided (``StateCache.apply``).

On disk the manifest states are plain tuples in marshal's format (a pickle of ten thousand
dataclasses loads 3× slower, a pickle of the tuples 2×: ``plan.cache_format``), and each parsed
config sits in its own file, so a run loads only the one it uses (``plan.config_store``).
"""
from __future__ import annotations

import gc
import hashlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator

from gitscale.config.load import ObjectRef
from gitscale.core.decide import FOREVER
from gitscale.core.model import Decision, Demand, Reason
from gitscale.errors import ManifestError
from gitscale.files import load_cache
from gitscale.manifest.target import KeptReads, Located, locate
from gitscale.plan.cache_format import STAMP, Row, Settled, as_located, as_row, load_state, \
    malformed, row_key, why_of, why_row, write_state
from gitscale.plan.config_store import ConfigStore
from gitscale.record.series import DemandSeries
from gitscale.yamlio.read import Document

LIMIT = 50_000  # manifest entries kept at least (more when a pass looks up more)
# ... by `run` and `serve`, which keep one cache for months: every pass that commits adds an
# entry (≈ 1.2 KB of memory each, measured by benchmarks/bench_longrun.py) that no later pass
# reads, as the manifest has moved on. At LIMIT that was ≈ 60 MB more than the process needs
# for a small config; the bound still grows with the config (twice its sets).
LOOP_LIMIT = 5_000
JOB_SETS = 20_000  # job-id sets kept (one per set and write)
STATE_FILE = "manifest-state.marshal"
OLD_STATE_FILE = "manifest-state.pickle"  # the state file as pickled before: the first save
# removes it


def blob_id(data: bytes) -> str:
    """git's id of a file with this content (``git hash-object``), for files read from disk."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _warn(message: str) -> None:
    from gitscale.logline import warn

    warn(message)


@dataclass
class CacheWrites:
    """What one pass learnt for the state cache, in the order it learnt it. A pass only reads
    the cache (``compute_plan`` hands this back in ``Plan.cache_writes``); whoever runs the pass
    applies it once the pass has decided (``StateCache.apply``: `land` for the commands that
    commit, once the edits passed validation; `plan` itself), so a pass that fails or is
    refused leaves the cache as it found it."""

    floor: int = 0  # the config's sets: the cache keeps at least twice as many entries
    keep_settled: frozenset[str] | None = None  # the answers of any other set are forgotten
    decisions: dict[str, Decision] = field(default_factory=dict)  # settled rows, as decisions
    # (key, state, parsed): each manifest state the pass looked up (parsed: new to the cache)
    looked: list[tuple[str, Located, bool]] = field(default_factory=list)
    # (set, its answer and what it was made from) to remember; (set, None): to forget
    settled: list[tuple[str, "tuple[Settled, Decision] | None"]] = field(default_factory=list)
    jobs: list[tuple[str, frozenset[str]]] = field(default_factory=list)  # fingerprint → ids
    written: list[tuple[str, Located]] = field(default_factory=list)  # states of written texts

    def settle(self, name: str, key: str, blob: str, demand: Demand, since: datetime,
               until: datetime, decision: Decision) -> None:
        """A decision that wrote nothing, valid from ``since`` until ``until``."""
        end = float("inf") if until == FOREVER else until.timestamp()
        row = (key, blob, demand.queued, demand.running, demand.jobs, since.timestamp(), end,
               decision.replicas, decision.patch_id, decision.reason.value, decision.detail,
               *why_row(decision.why))
        self.settled.append((name, (row, decision)))

    def unsettle(self, name: str) -> None:
        self.settled.append((name, None))

    def remember_jobs(self, fingerprint: str, jobs: frozenset[str]) -> None:
        self.jobs.append((fingerprint, jobs))


class StateCache:
    """What passes remember. A pass reads it through the methods that take its ``CacheWrites``
    (and record there what they learnt) and changes nothing: ``apply`` does, once the pass has
    decided. (``series`` is read from git before a pass, by ``plan.forecasts``.)"""

    def __init__(self, path: Path | None = None, limit: int | None = None) -> None:
        self.path = path
        self.limit = limit  # entries kept at least (None: LIMIT; `run` and `serve`: LOOP_LIMIT)
        self.rows: dict[str, Row] = {}  # what the disk holds: plain tuples
        self.objects: dict[str, Located] = {}  # rows built this process, reused by `run`
        self.configs = ConfigStore(path.parent if path else None)
        # job-id fingerprint written to a manifest → the ids behind it: lets the decision tell
        # jobs that arrived since the last write from jobs that only started or completed
        self.jobs: dict[str, frozenset[str]] = {}
        self.settled: dict[str, Settled] = {}
        self.decisions: dict[str, Decision] = {}  # settled rows as decisions, built this process
        # each forecast set's demand from the scaling commits, and the last commit read
        self.series = DemandSeries()
        self.dirty = False
        self.hits = self.misses = 0
        self.floor = 0  # entries kept whatever LIMIT says: twice the sets of the config in use

    @property
    def entries(self) -> dict[str, Row]:
        return self.rows

    @classmethod
    def load(cls, directory: Path | None,
             warn: Callable[[str], None] = _warn, *, limit: int | None = None) -> "StateCache":
        """The cache kept in ``directory``; an empty one when there is none, when another
        version wrote it, or when it cannot be used (then ``warn`` is told, once). ``limit``:
        the entries kept at least (a long-running process: LOOP_LIMIT)."""
        cache = cls(directory / STATE_FILE if directory else None, limit)
        data = load_cache(cache.path)
        if data is None:
            return cache
        try:
            stored = load_state(data)
            if not (isinstance(stored, tuple) and stored[:1] == (STAMP,)):
                return cache  # another version's (or format's): not an error, only older
            _, rows, jobs, settled, series = stored
            problem = malformed(rows, jobs, settled)
            if problem is None:
                cache.rows, cache.jobs, cache.settled = rows, jobs, settled
                cache.series = DemandSeries.from_state(series)
                cache._bound()  # a CLI's file, up to LIMIT, loaded by `run`
        except Exception as exc:  # noqa: BLE001 - a broken cache is only a slower pass
            problem = f"cannot be read ({type(exc).__name__})"
            cache.rows, cache.jobs, cache.settled = {}, {}, {}
            cache.series = DemandSeries()
        if problem is not None:
            warn(f"state cache {cache.path}: {problem}; starting from an empty one (this "
                 "pass is only slower)")
        return cache

    # What a pass reads; what it learns goes to its ``writes``.

    def knows(self, blob: str, ref: ObjectRef) -> bool:
        return row_key(blob, ref) in self.rows

    def cached(self, blob: str, ref: ObjectRef, writes: CacheWrites) -> Located | None:
        """The state of ``ref`` in the blob ``blob`` when known: no file is read."""
        key = row_key(blob, ref)
        row = self.rows.get(key)
        if row is None:
            return None
        found = self.objects.get(key) or as_located(row)
        if found is None:
            return None
        writes.looked.append((key, found, False))
        return found

    def parse(self, path: str, blob: str, text: str, ref: ObjectRef, writes: CacheWrites,
              kept: KeptReads | None = None) -> Located:
        """Parse ``text`` (the content of ``blob``); ``writes`` gets what it says."""
        found = locate(path, text, ref, kept=kept)  # raises on a bad manifest: never cached
        writes.looked.append((row_key(blob, ref), found, True))
        return found

    def located(self, path: str, text: str, ref: ObjectRef, writes: CacheWrites,
                kept: KeptReads | None = None) -> Located:
        """The state of ``ref`` in ``text``: from the cache, or parsed."""
        blob = blob_id(text.encode("utf-8", "surrogateescape"))
        found = self.cached(blob, ref, writes)
        return found if found is not None else self.parse(path, blob, text, ref, writes, kept)

    def remember(self, path: str, text: str, ref: ObjectRef, documents: list[Document],
                 writes: CacheWrites) -> None:
        """The state of a text the pass writes (``documents``: it parsed), for ``writes``: so
        the next pass finds it without reading the file."""
        key = row_key(blob_id(text.encode("utf-8", "surrogateescape")), ref)
        if key in self.rows:
            return
        try:
            found = locate(path, text, ref, documents)
        except ManifestError:
            return  # not ours to report here: the next pass reads the file and says why
        writes.written.append((key, found))

    def settled_decision(self, name: str, key: str, blob: str, demand: Demand, now: float,
                         writes: CacheWrites) -> Decision | None:
        """The decision remembered for set ``name`` if it still holds: made from the same
        config digest ``key``, manifest blob and demand, and ``now`` inside its span."""
        row = self.settled.get(name)
        if row is None or row[0] != key or row[1] != blob or not row[5] <= now < row[6] \
                or row[2] != demand.queued or row[3] != demand.running or row[4] != demand.jobs:
            return None
        decision = self.decisions.get(name)
        if decision is None:
            why = why_of(row)
            if why is None:
                return None
            decision = writes.decisions[name] = Decision(False, row[7], row[8], Reason(row[9]),
                                                         row[10], why=why)
        return decision

    # What changes it: a pass's writes, applied in the order the pass learnt them.

    def apply(self, writes: CacheWrites) -> None:
        """Learn what a pass learnt (``Plan.cache_writes``), once it has decided."""
        with gc_paused():
            self.floor = max(self.floor, writes.floor)
            if writes.keep_settled is not None:
                for name in [n for n in self.settled if n not in writes.keep_settled]:
                    self._unsettle(name)
            for name, decision in writes.decisions.items():
                if name in self.settled:
                    self.decisions.setdefault(name, decision)
            for key, found, parsed in writes.looked:
                if parsed:
                    self.misses += 1
                    self._put(key, found)
                    continue
                self.hits += 1
                row = self.rows.pop(key, None)
                if row is not None:
                    self.rows[key] = row  # most recently used last: what the bound keeps
                    self.objects[key] = found
            for name, answer in writes.settled:
                if answer is None:
                    self._unsettle(name)
                elif self.settled.get(name) != answer[0]:
                    self.settled[name], self.decisions[name] = answer
                    self.dirty = True
            for fingerprint, jobs in writes.jobs:
                self._remember_jobs(fingerprint, jobs)
            for key, found in writes.written:
                if key not in self.rows:
                    self._put(key, found)

    def _put(self, key: str, found: Located) -> None:
        self.rows[key] = as_row(found)
        self.objects[key] = found
        self.dirty = True
        self._bound()

    def _bound(self) -> None:
        # `run` and `serve` live for months and every write makes a new content: without a
        # bound the cache would grow by each changed manifest on every pass. The bound grows
        # with the config, so a repo with more sets than LIMIT does not evict what it uses.
        limit = max(LIMIT if self.limit is None else self.limit, 2 * self.floor)
        while len(self.rows) > limit:
            key = next(iter(self.rows))
            del self.rows[key]
            self.objects.pop(key, None)

    def _remember_jobs(self, fingerprint: str, jobs: frozenset[str]) -> None:
        if self.jobs.get(fingerprint) != jobs:
            self.jobs.pop(fingerprint, None)
            self.jobs[fingerprint] = jobs
            while len(self.jobs) > JOB_SETS:
                del self.jobs[next(iter(self.jobs))]
                # a decision made knowing these ids could differ without them
                self.settled.clear()
                self.decisions.clear()
            self.dirty = True

    def _unsettle(self, name: str) -> None:
        if self.settled.pop(name, None) is not None:
            self.decisions.pop(name, None)
            self.dirty = True

    def save(self) -> None:
        if self.path is None:
            return
        self.configs.save()
        if not self.dirty:
            return
        if write_state(self.path, (STAMP, self.rows, self.jobs, self.settled,
                                    self.series.state())):
            self.dirty = False
            try:
                (self.path.parent / OLD_STATE_FILE).unlink(missing_ok=True)
            except OSError:
                pass  # (a directory of that name, a read-only volume): only disk space


@contextmanager
def gc_paused() -> Iterator[None]:
    """Run a pass without the cyclic garbage collector: parsing a thousand files allocates
    enough to trigger hundreds of collections (a quarter of the pass), and a pass creates no
    cycles worth collecting before it ends."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
