"""What git already knows about the files of a pass: their blob ids, without reading them.

A pass over ten thousand manifests where ten changed should not open ten thousand files. The
index lists every tracked file with the id of its content (``git ls-files -s``); a file whose
id was seen before has the content seen before, so its parsed state can come from the state
cache. Only the files git cannot vouch for (modified in the checkout, untracked) are read from
disk, and the blobs the cache does not know are read from git in one batch (``cat-file``).

In a sparse clone (``Tree.sparse``) the manifests are never checked out at all: the listing
comes from HEAD's trees (``git ls-tree``), the files are read from git, and their edits are
committed without the index or the work tree (``gitscale.repo.fastimport``), so a pass writes no
more files than it changes. A partial clone (``Git.promisor``: cloned without blobs) fetches
the blobs a batch needs in one fetch (``fetch_missing``), never one by one.
"""
from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from gitscale.errors import GitError
from gitscale.repo.git import Git

_ENTRY = re.compile(r"(\d{6}) ([0-9a-f]{40,64}) 0\t([^\0]*)\0")
_TREE_ENTRY = re.compile(r"(\d{6}) \w+ ([0-9a-f]{40,64})\t([^\0]*)\0")
REGULAR = ("100644", "100755")  # modes of plain files; 120000 is a symlink, 160000 a submodule


@dataclass(frozen=True)
class Tree:
    """The index of a checkout: path → (mode, blob id), and the paths it cannot vouch for."""

    git: Git
    entries: Mapping[str, tuple[str, str]]
    modified: frozenset[str]  # changed in the working tree since the index (read from disk)
    sparse: bool = False  # manifests are not checked out: read and write them through git

    @classmethod
    def read(cls, repo: Git, *, sparse: bool = False) -> "Tree":
        """The index of a checkout; HEAD's files in a sparse clone (which gitscale made and
        never edits on disk, so nothing is modified, and whose index is not kept in step:
        ``fastimport`` commits without it)."""
        if sparse:
            tree = repo.run_bytes("ls-tree", "-r", "-z", "--full-tree", "HEAD")
            entries = {path: (mode, blob) for mode, blob, path in
                       _TREE_ENTRY.findall(tree.decode("utf-8", "surrogateescape"))}
            return cls(repo, entries, frozenset(), sparse)
        listed = repo.run_bytes("ls-files", "--stage", "-z").decode("utf-8", "surrogateescape")
        # stage 0 only: an unresolved merge is left to the disk (and its error)
        entries = {path: (mode, blob) for mode, blob, path in _ENTRY.findall(listed)}
        changed = repo.run_bytes("diff-files", "--name-only", "-z")
        modified = frozenset(p.decode("utf-8", "surrogateescape")
                             for p in changed.split(b"\0") if p)
        return cls(repo, entries, modified, sparse)

    def blob(self, path: str) -> str | None:
        """The blob id of ``path`` when git vouches for its content: tracked, a regular file,
        not modified in the working tree. ``None``: read the file from disk."""
        entry = self.entries.get(path)
        if entry is None or path in self.modified or entry[0] not in REGULAR:
            return None
        return entry[1]

    def files(self) -> dict[str, str]:
        """path → blob id of every regular file listed."""
        return {path: blob for path, (mode, blob) in self.entries.items() if mode in REGULAR}

    def mode(self, path: str) -> str | None:
        entry = self.entries.get(path)
        return entry[0] if entry else None

    def read_blobs(self, paths: Mapping[str, str]) -> dict[str, bytes]:
        """The contents of the blobs of ``paths`` (path → blob id), by blob id, in one
        ``git cat-file --batch``; in a partial clone the missing ones are fetched first, in
        one batch (``fetch_missing``)."""
        wanted = list(dict.fromkeys(paths.values()))
        if not wanted:
            return {}
        fetch_missing(self.git, paths)
        found = cat_blobs(self.git, wanted)
        for blob in wanted:
            if blob not in found:
                raise GitError(f"git cat-file: {blob} is missing")
        return found


def cat_blobs(repo: Git, ids: Iterable[str]) -> dict[str, bytes]:
    """The contents of the blobs ``ids``, by id, in one ``git cat-file --batch``. An id git
    does not have is left out; one that names something else than a blob is an error. (In a
    partial clone, ``fetch_missing`` first: git would fetch each missing blob by itself.)"""
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return {}
    out = repo.run_bytes("cat-file", "--batch", input=("\n".join(wanted) + "\n").encode())
    found: dict[str, bytes] = {}
    at = 0
    for blob in wanted:
        header_end = out.index(b"\n", at)
        header = out[at:header_end].decode().split(" ")
        if header[-1] == "missing":  # "<id> missing": no content follows
            at = header_end + 1
            continue
        if len(header) != 3 or header[1] != "blob":
            raise GitError(f"git cat-file: {blob} is not a blob ({' '.join(header)})")
        size = int(header[2])
        start = header_end + 1
        found[blob] = out[start:start + size]
        at = start + size + 1  # the content is followed by a newline
    return found


CHECK_LIMIT = 256  # paths asked about by name; more: fetch them all, asking nothing


def fetch_missing(repo: Git, paths: Mapping[str, str]) -> None:
    """Partial clone: bring the blobs of ``paths`` (path → blob id in HEAD) that the clone
    lacks in one fetch. Otherwise ``cat-file`` or ``grep`` would make git fetch each missing
    blob by itself, a process and a round trip per object. A few paths are looked up by name
    (``missing_blobs``); for many, that lookup costs more than fetching the ones present
    again. A failed fetch is an error (git's own fetches on read would fail the same way, one
    object at a time)."""
    if repo.promisor is None or not paths:
        return
    if len(paths) <= CHECK_LIMIT:
        missing = sorted(repo.missing_blobs(sorted(paths)) & set(paths.values()))
    else:
        missing = sorted(set(paths.values()))
    repo.fetch_objects(missing)


def stage_files(repo: Git, files: Mapping[str, bytes],
                modes: Mapping[str, str] | None = None) -> None:
    """Stage new contents for ``files`` without touching the working tree: each becomes a
    blob, and its index entry points at it (keeping the file's mode). The contents were read
    from blobs and edited, so they are stored as they are (no clean filter)."""
    if not files:
        return
    paths = list(files)
    if modes is None:  # the whole listing: ten thousand pathspecs would each scan it
        modes = {p: m for p, (m, _) in Tree.read(repo).entries.items() if p in files}
    # every content in one `git fast-import` (a `hash-object` would need a file for each)
    chunks: list[bytes] = []  # joined once: ten thousand files are not copied twice
    for number, path in enumerate(paths, start=1):
        chunks += (b"blob\nmark :%d\ndata %d\n" % (number, len(files[path])), files[path], b"\n")
    with tempfile.TemporaryDirectory(prefix="gitscale-blobs-") as scratch:
        marks = os.path.join(scratch, "marks")
        repo.run_bytes("fast-import", "--quiet", f"--export-marks={marks}",
                       input=b"".join(chunks))
        with open(marks, encoding="ascii") as handle:
            ids = dict(line.split() for line in handle if line.strip())
    blobs = [ids[f":{number}"] for number in range(1, len(paths) + 1)]
    lines = "".join(f"{modes.get(path, '100644')} {blob}\t{path}\0"
                    for path, blob in zip(paths, blobs))
    repo.run_bytes("update-index", "-z", "--index-info", input=lines.encode())


def check_out(repo: Git, root: Path, tree: Tree, folders: Iterable[str]) -> None:
    """Sparse clone: add ``folders`` (of gitscale.yaml, policy presets, demand files) to the
    checkout when git tracks files in them and they are not on disk yet.

    A partial clone comes without a checkout (``git clone --no-checkout``, no index yet): the
    first call checks out the top-level files and ``folders`` at once, so that git fetches
    their blobs in one batch."""
    wanted = {f.strip("/") for f in folders if f.strip("/") and not (root / f).is_dir()}
    tracked = sorted(f for f in wanted if any(p.startswith(f + "/") for p in tree.entries))
    # no `maintenance --auto` after the fetch of the blobs (a kept clone's sync runs it)
    quiet = ("-c", "maintenance.auto=false")
    if not (root / ".git" / "index").exists():
        if tracked:  # cone mode: the top-level files, and these folders whole
            repo.run("sparse-checkout", "set", "--", *tracked)
        repo.run(*quiet, "checkout", "--quiet")
    elif tracked:
        repo.run(*quiet, "sparse-checkout", "add", "--", *tracked)


def files_containing(repo: Git, root: Path, needle: str, *, sparse: bool) -> list[tuple[str, str]]:
    """(path, text) of the tracked files that contain ``needle``, found by ``git grep`` rather
    than by opening every file: from the working tree in a checkout, from HEAD in a sparse
    clone (where most files are not on disk)."""
    where = ["HEAD"] if sparse else []
    if sparse and repo.promisor is not None:
        # grep reads every file: fetch the blobs a partial clone lacks first, all in one go
        fetch_missing(repo, Tree.read(repo, sparse=True).files())
    result = repo.run("grep", "-l", "-z", "-I", "-F", "-e", needle, *where, "--", check=False)
    if result.code not in (0, 1):  # 1: no match
        raise GitError(f"git grep failed: {result.stderr.strip()}")
    listed = [p for p in result.stdout.split("\0") if p]
    if not sparse:
        texts: list[tuple[str, str]] = []
        for rel in listed:
            path = root / rel
            if path.is_symlink() or not path.is_file():
                continue  # a link to /dev/zero would be read forever
            try:
                texts.append((rel, path.read_bytes().decode("utf-8")))
            except (OSError, UnicodeDecodeError):
                continue
        return texts
    paths = [p.removeprefix("HEAD:") for p in listed]
    ids = repo.run_bytes("rev-parse", *[f"HEAD:{p}" for p in paths]).decode().split() \
        if paths else []
    contents = Tree(repo, {}, frozenset()).read_blobs(dict(zip(paths, ids)))
    out = []
    for name, blob in zip(paths, ids):
        try:
            out.append((name, contents[blob].decode("utf-8")))
        except UnicodeDecodeError:
            continue
    return out
