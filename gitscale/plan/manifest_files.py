"""Where a pass gets each manifest: its state from the cache when git vouches for the file,
its text only when the state is unknown or the file is about to be edited.

- No ``Tree``, or a file git cannot vouch for (untracked, modified in the checkout): the file
  is read from disk, safely (no symlinks, no escape from the repo), and keyed by its content.
- A checkout: the index's blob id is the key; a file is read from disk only on a cache miss
  or to edit it.
- A sparse clone (``Tree.sparse``): manifests are not checked out; the blobs the cache does
  not know are read from git in one batch, and so are the files to edit. A partial clone
  fetches each batch's missing blobs in one fetch (``repo.index.fetch_missing``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from gitscale import files
from gitscale.plan.cache import CacheWrites, StateCache
from gitscale.config.load import Config, RunnerSetConfig, safe_repo_path
from gitscale.errors import ConfigError, ManifestError, shown
from gitscale.repo.index import REGULAR, Tree
from gitscale.manifest.target import KeptReads, Located


class ManifestFiles:
    def __init__(self, root: Path, config: Config, tree: Tree | None) -> None:
        self.root, self.config, self.tree = root, config, tree
        self.texts: dict[str, str] = {}  # path → text, for the files read this pass
        self.blobs: dict[str, str | None] = {}  # path → the blob id git vouches for
        self.checked: set[Path] = set()  # folders already checked for symlinks

    def blob(self, path: str) -> str | None:
        """The blob id git vouches for (None: the file is read from disk and hashed)."""
        if self.tree is None:
            return None
        if path in self.blobs:
            return self.blobs[path]
        self.blobs[path] = found = self._vouched(path, self.tree)
        return found

    def _vouched(self, path: str, tree: Tree) -> str | None:
        mode = tree.mode(path)
        if tree.sparse and mode is not None and mode not in REGULAR:
            what = "a symlink" if mode == "120000" else f"not a regular file (mode {mode})"
            raise ManifestError(path, f"is {what} in git; gitscale edits only regular files "
                                "inside the config repo")
        return tree.blob(path)

    def prefetch(self, sets: Sequence[RunnerSetConfig], cache: StateCache) -> None:
        """Sparse clone: read every blob the cache does not know in one ``cat-file``."""
        if self.tree is None or not self.tree.sparse:
            return
        missing: dict[str, str] = {}
        for runner_set in sets:
            path = runner_set.manifest
            blob = self.blob(path)
            if blob is not None and path not in missing and not cache.knows(blob,
                                                                            runner_set.object):
                missing[path] = blob
        contents = self.tree.read_blobs(missing)
        for path, blob in missing.items():
            self.texts[path] = _decode(path, contents[blob])

    def prefetch_texts(self, sets: Sequence[RunnerSetConfig]) -> None:
        """Sparse clone: read the texts of ``sets``' files (to edit them) in one batch."""
        if self.tree is None or not self.tree.sparse:
            return
        wanted = {s.manifest: blob for s in sets if s.manifest not in self.texts
                  and (blob := self.blob(s.manifest)) is not None}
        contents = self.tree.read_blobs(wanted)
        for path, blob in wanted.items():
            self.texts[path] = _decode(path, contents[blob])

    def located(self, runner_set: RunnerSetConfig, cache: StateCache, writes: CacheWrites,
                kept: KeptReads | None = None) -> Located:
        """The state of the set's object: from ``cache`` when git vouches for its file's blob
        and the cache knows it, else read and parsed (``writes`` learns it either way)."""
        path, ref = runner_set.manifest, runner_set.object
        blob = self.blob(path)
        if blob is None:
            return cache.located(path, self.text(runner_set), ref, writes, kept)
        found = cache.cached(blob, ref, writes)
        return found if found is not None else cache.parse(path, blob, self.text(runner_set),
                                                           ref, writes, kept)

    def text(self, runner_set: RunnerSetConfig) -> str:
        path = runner_set.manifest
        if path not in self.texts:
            blob = self.blob(path)
            if self.tree is not None and self.tree.sparse and blob is not None:
                self.texts[path] = _decode(path, self.tree.read_blobs({path: blob})[blob])
            else:
                self.texts[path] = read_manifest(self.root, runner_set, self.config,
                                                 self.checked)
        return self.texts[path]


def _decode(path: str, data: bytes) -> str:
    return files.decode(data, path, ManifestError)


def read_manifest(root: Path, runner_set: RunnerSetConfig, config: Config,
                  checked: set[Path] | None = None) -> str:
    """The manifest's text. A manifest that is missing or not a file is the config's mistake
    (or the repo's): the error names the set's line in the config."""
    path = safe_repo_path(root, runner_set.manifest, config.path, ConfigError,
                          lambda: config.line(runner_set.name, "manifest"), checked=checked)
    try:
        # bytes → str by hand: read_text() would turn CRLF into LF and rewrite every line
        return files.read_text(path, runner_set.manifest, ManifestError)
    except FileNotFoundError:
        raise config.blame(runner_set.name, "manifest", f"manifest {runner_set.manifest} not "
                           "found in the config repo") from None
    except IsADirectoryError:
        raise config.blame(runner_set.name, "manifest", f"manifest {runner_set.manifest!r} "
                           "is a directory, not a manifest file") from None
    except OSError as exc:  # (a name longer than the file system allows, a permission)
        raise config.blame(runner_set.name, "manifest", f"manifest {shown(runner_set.manifest)} "
                           f"cannot be read: {exc.strerror or type(exc).__name__}") from None
