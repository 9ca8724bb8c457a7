"""What a pass may remember between passes and runs: the owned state of each manifest, keyed
by a hash of its text (and which object in it), so only files that changed are parsed again.

A thousand-set repo parses in about a second; a pass that changes ten files should not pay that
every time. The cache is a pure function of file contents (plus gitscale's version), so it can
never be stale, only missing. It lives in memory in loop mode and in ``$GITSCALE_CACHE_DIR``
(default ``$XDG_CACHE_HOME/gitscale``) between CLI runs; a missing or unreadable cache only
makes a pass slower.
"""
from __future__ import annotations

import gc
import hashlib
import os
import pickle
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from gitscale import __version__
from gitscale.config import Config, ObjectRef
from gitscale.manifest.target import Located, locate

FORMAT = 2  # 2: manifests of unknown kinds and RRULEs that cannot fire are refused
LIMIT = 50_000  # manifest entries kept on disk
CONFIGS = 8  # parsed gitscale.yaml versions kept
JOB_SETS = 20_000  # job-id sets kept (one per set and write)


def default_cache_dir() -> Path | None:
    configured = os.environ.get("GITSCALE_CACHE_DIR")
    if configured is not None:
        return Path(configured) if configured else None  # empty: no disk cache
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gitscale"


class StateCache:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.entries: dict[str, Located] = {}
        self.configs: dict[str, Config] = {}
        # job-id fingerprint written to a manifest → the ids behind it: lets the decision tell
        # jobs that arrived since the last write from jobs that only started or completed
        self.jobs: dict[str, frozenset[str]] = {}
        self.dirty = False
        self.hits = self.misses = 0
        self._configs_seen = 0

    @classmethod
    def load(cls, directory: Path | None) -> "StateCache":
        cache = cls(directory / "manifest-state.pickle" if directory else None)
        if cache.path is not None and cache.path.is_file():
            try:
                with cache.path.open("rb") as handle:
                    stamp, entries, configs, jobs = pickle.load(handle)
                if stamp == (FORMAT, __version__) and isinstance(entries, dict):
                    cache.entries, cache.configs, cache.jobs = entries, configs, jobs
                    cache._configs_seen = len(configs)
            except Exception:  # noqa: BLE001 - a broken cache is only a slower pass
                cache.entries = {}
        return cache

    def located(self, path: str, text: str, ref: ObjectRef) -> Located:
        key = hashlib.sha256(f"{ref.kind}\0{ref.name}\0{ref.namespace}\0{text}".encode()).hexdigest()
        found = self.entries.pop(key, None)
        if found is not None:
            self.entries[key] = found  # most recently used last: what the bound keeps
            self.hits += 1
            return found
        self.misses += 1
        found = locate(path, text, ref)  # raises on a bad manifest: errors are never cached
        self.entries[key] = found
        if len(self.entries) > LIMIT:
            # `run` and `serve` live for months and every write makes a new text: without a
            # bound the cache would grow by each changed manifest on every pass
            del self.entries[next(iter(self.entries))]
        self.dirty = True
        return found

    def remember_jobs(self, fingerprint: str, jobs: frozenset[str]) -> None:
        if self.jobs.get(fingerprint) != jobs:
            self.jobs.pop(fingerprint, None)
            self.jobs[fingerprint] = jobs
            while len(self.jobs) > JOB_SETS:
                del self.jobs[next(iter(self.jobs))]
            self.dirty = True

    def save(self) -> None:
        if self.path is None or not (self.dirty or len(self.configs) != self._configs_seen):
            return
        entries = self.entries
        if len(entries) > LIMIT:
            entries = dict(list(entries.items())[-LIMIT:])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            with tmp.open("wb") as handle:
                os.chmod(tmp, 0o600)
                configs = dict(list(self.configs.items())[-CONFIGS:])
                pickle.dump(((FORMAT, __version__), entries, configs, self.jobs), handle,
                            protocol=5)
            os.replace(tmp, self.path)
            self.dirty = False
            self._configs_seen = len(self.configs)
        except OSError:
            pass  # a read-only home: run without a disk cache


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
