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

On disk the manifest states are plain tuples (a pickle of ten thousand dataclasses loads 3×
slower), and each parsed config sits in its own file, so a run loads only the one it uses.
"""
from __future__ import annotations

import gc
import hashlib
import os
import pickle
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator, MutableMapping

from gitscale import __version__
from gitscale.config.load import Config, ObjectRef
from gitscale.core.decide import FOREVER
from gitscale.core.model import Current, Decision, Demand, Reason
from gitscale.errors import ManifestError
from gitscale.manifest.target import Fields, KeptReads, Located, locate
from gitscale.yamlio.read import Document

FORMAT = 6  # 6: settled decisions
LIMIT = 50_000  # manifest entries kept at least (more when a pass looks up more)
CONFIGS = 8  # parsed gitscale.yaml versions kept
JOB_SETS = 20_000  # job-id sets kept (one per set and write)
STATE_FILE = "manifest-state.pickle"

Row = tuple[int, str, str, bool, bool, "int | None", "int | None", "str | None",
            "str | None", bool, bool]  # the time as ISO 8601: datetimes pickle 3× slower
# set name → (config digest, blob id, queued, running, job ids, from, until (POSIX seconds),
# replicas, patch ID, reason, detail) of a decision that wrote nothing
Settled = tuple[str, str, int, int, "frozenset[str] | None", float, float, int, "int | None",
                str, str]


def blob_id(data: bytes) -> str:
    """git's id of a file with this content (``git hash-object``), for files read from disk."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _key(blob: str, ref: ObjectRef) -> str:
    return f"{blob}\0{ref.kind}\0{ref.name}\0{ref.namespace}"


def _row(found: Located) -> Row:
    c = found.current
    last_up = c.last_scale_up.isoformat() if c.last_scale_up is not None else None
    return (found.index, found.kind, found.name, found.fields.patch_id,
            found.fields.effective_time, c.replicas, c.patch_id, last_up,
            c.fingerprint, c.drained, c.paused)


def _located(row: Row) -> Located:
    (index, kind, name, has_patch, has_time, replicas, patch_id, last_up, fingerprint,
     drained, paused) = row
    when = datetime.fromisoformat(last_up) if last_up is not None else None
    return Located(index, kind, name, Fields(has_patch, has_time),
                   Current(replicas, patch_id, when, fingerprint, drained, paused))


class ConfigStore(MutableMapping[str, Config]):
    """Parsed configs by the hash of their text: in memory, and one file each on disk."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.memory: dict[str, Config] = {}
        self.new: set[str] = set()

    def _file(self, key: str) -> Path | None:
        return self.directory / f"config-{key[:32]}.pickle" if self.directory else None

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __getitem__(self, key: str) -> Config:
        found: Config | None = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __setitem__(self, key: str, config: Config) -> None:
        self.memory[key] = config
        self.new.add(key)
        while len(self.memory) > CONFIGS:
            del self.memory[next(iter(self.memory))]

    def __delitem__(self, key: str) -> None:
        del self.memory[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.memory)

    def __len__(self) -> int:
        return len(self.memory)

    def get(self, key: str, default: Any = None) -> Any:
        if key in self.memory:
            return self.memory[key]
        path = self._file(key)
        if path is None or not path.is_file():
            return default
        try:
            with path.open("rb") as handle:
                stamp, stored_key, config = pickle.load(handle)
        except Exception:  # noqa: BLE001 - a broken cache is only a slower pass
            return default
        if stamp != (FORMAT, __version__) or stored_key != key or not isinstance(config, Config):
            return default
        self.memory[key] = config
        return config

    def save(self) -> None:
        for key in sorted(self.new):
            path = self._file(key)
            if path is not None and key in self.memory:
                _write(path, ((FORMAT, __version__), key, self.memory[key]))
        self.new.clear()
        if self.directory is not None and self.directory.is_dir():
            files = sorted(self.directory.glob("config-*.pickle"),
                           key=lambda p: p.stat().st_mtime)
            for old in files[:-CONFIGS]:
                old.unlink(missing_ok=True)


class StateCache:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.rows: dict[str, Row] = {}  # what the disk holds: plain tuples
        self.objects: dict[str, Located] = {}  # rows built this process, reused by `run`
        self.configs = ConfigStore(path.parent if path else None)
        # job-id fingerprint written to a manifest → the ids behind it: lets the decision tell
        # jobs that arrived since the last write from jobs that only started or completed
        self.jobs: dict[str, frozenset[str]] = {}
        self.settled: dict[str, Settled] = {}
        self.decisions: dict[str, Decision] = {}  # settled rows as decisions, built this process
        self.dirty = False
        self.hits = self.misses = 0
        self.floor = 0  # entries kept whatever LIMIT says: twice the sets of the config in use

    @property
    def entries(self) -> dict[str, Row]:
        return self.rows

    @classmethod
    def load(cls, directory: Path | None) -> "StateCache":
        cache = cls(directory / STATE_FILE if directory else None)
        if cache.path is not None and cache.path.is_file():
            try:
                with cache.path.open("rb") as handle:
                    stamp, rows, jobs, settled = pickle.load(handle)
                if stamp == (FORMAT, __version__) and isinstance(rows, dict) \
                        and isinstance(jobs, dict) and isinstance(settled, dict):
                    cache.rows, cache.jobs, cache.settled = rows, jobs, settled
            except Exception:  # noqa: BLE001 - a broken cache is only a slower pass
                cache.rows, cache.jobs, cache.settled = {}, {}, {}
        return cache

    def knows(self, blob: str, ref: ObjectRef) -> bool:
        return _key(blob, ref) in self.rows

    def cached(self, blob: str, ref: ObjectRef) -> Located | None:
        """The state of ``ref`` in the blob ``blob`` when known: no file is read."""
        key = _key(blob, ref)
        row = self.rows.pop(key, None)
        if row is None:
            return None
        self.rows[key] = row  # most recently used last: what the bound keeps
        found = self.objects.get(key)
        if found is None:
            found = self.objects[key] = _located(row)
        self.hits += 1
        return found

    def parse(self, path: str, blob: str, text: str, ref: ObjectRef,
              kept: KeptReads | None = None) -> Located:
        """Parse ``text`` (the content of ``blob``) and remember what it says."""
        self.misses += 1
        found = locate(path, text, ref, kept=kept)  # raises on a bad manifest: errors are never cached
        key = _key(blob, ref)
        self.rows[key] = _row(found)
        self.objects[key] = found
        self.dirty = True
        self._bound()
        return found

    def remember(self, path: str, text: str, ref: ObjectRef, documents: list[Document]) -> None:
        """Remember the state of a text this pass wrote (``documents``: it parsed), so the
        next pass finds it without reading the file."""
        key = _key(blob_id(text.encode("utf-8", "surrogateescape")), ref)
        if key in self.rows:
            return
        try:
            found = locate(path, text, ref, documents)
        except ManifestError:
            return  # not ours to report here: the next pass reads the file and says why
        self.rows[key] = _row(found)
        self.objects[key] = found
        self.dirty = True
        self._bound()

    def located(self, path: str, text: str, ref: ObjectRef,
                kept: KeptReads | None = None) -> Located:
        """The state of ``ref`` in ``text``: from the cache, or parsed and remembered."""
        blob = blob_id(text.encode("utf-8", "surrogateescape"))
        found = self.cached(blob, ref)
        return found if found is not None else self.parse(path, blob, text, ref, kept)

    def _bound(self) -> None:
        # `run` and `serve` live for months and every write makes a new content: without a
        # bound the cache would grow by each changed manifest on every pass. The bound grows
        # with the config, so a repo with more sets than LIMIT does not evict what it uses.
        limit = max(LIMIT, 2 * self.floor)
        while len(self.rows) > limit:
            key = next(iter(self.rows))
            del self.rows[key]
            self.objects.pop(key, None)

    def remember_jobs(self, fingerprint: str, jobs: frozenset[str]) -> None:
        if self.jobs.get(fingerprint) != jobs:
            self.jobs.pop(fingerprint, None)
            self.jobs[fingerprint] = jobs
            while len(self.jobs) > JOB_SETS:
                del self.jobs[next(iter(self.jobs))]
                # a decision made knowing these ids could differ without them
                self.settled.clear()
                self.decisions.clear()
            self.dirty = True

    def settled_decision(self, name: str, key: str, blob: str, demand: Demand,
                         now: float) -> Decision | None:
        """The decision remembered for set ``name`` if it still holds: made from the same
        config digest ``key``, manifest blob and demand, and ``now`` inside its span."""
        row = self.settled.get(name)
        if row is None or row[0] != key or row[1] != blob or not row[5] <= now < row[6] \
                or row[2] != demand.queued or row[3] != demand.running or row[4] != demand.jobs:
            return None
        decision = self.decisions.get(name)
        if decision is None:
            decision = self.decisions[name] = Decision(False, row[7], row[8], Reason(row[9]),
                                                       row[10])
        return decision

    def settle(self, name: str, key: str, blob: str, demand: Demand, since: datetime,
               until: datetime, decision: Decision) -> None:
        """Remember a decision that wrote nothing, valid from ``since`` until ``until``."""
        end = float("inf") if until == FOREVER else until.timestamp()
        row = (key, blob, demand.queued, demand.running, demand.jobs, since.timestamp(), end,
               decision.replicas, decision.patch_id, decision.reason.value, decision.detail)
        if self.settled.get(name) != row:
            self.settled[name] = row
            self.decisions[name] = decision
            self.dirty = True

    def unsettle(self, name: str) -> None:
        if self.settled.pop(name, None) is not None:
            self.decisions.pop(name, None)
            self.dirty = True

    def keep_settled(self, names: set[str]) -> None:
        """Forget the sets no longer in the config."""
        for name in [n for n in self.settled if n not in names]:
            self.unsettle(name)

    def save(self) -> None:
        if self.path is None:
            return
        self.configs.save()
        if not self.dirty:
            return
        if _write(self.path, ((FORMAT, __version__), self.rows, self.jobs, self.settled)):
            self.dirty = False


def _write(path: Path, value: Any) -> bool:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with tmp.open("wb") as handle:
            os.chmod(tmp, 0o600)
            pickle.dump(value, handle, protocol=5)
        os.replace(tmp, path)
        return True
    except OSError:
        return False  # a read-only home: run without a disk cache


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
