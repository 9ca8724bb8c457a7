"""Commits that are not gitscale's but change what it manages: a `git revert`, a pause, a hand
edit of a manifest or of gitscale.yaml. `history` shows them beside the scaling commits, so
that its newest row for a set is the repo's newest word on it.

Found by a second ``git log`` of the commits without a ``Gitscale-Set:`` line, with each
changed file's blob ids before and after (``--raw``), kept for the managed paths: the
contents of both are read for a block of commits at a time in one ``git cat-file --batch``
(``with_blobs``), never a process per commit, so that `history` can tell an edit of what
gitscale owns from a label bumped by a bot. The commits' changes need their trees, which a
checkout has and `history`'s clone of a URL (commit messages only) does not: there,
``unseen_after`` counts the commits after the newest scaling commit that are not gitscale's,
for a one-line note.
"""
from __future__ import annotations

import re
from typing import Container, Iterator, NamedTuple, Sequence

from gitscale.runnerset_api import OWN_COMMIT
from gitscale.record.history import utc_text
from gitscale.repo.git import Git
from gitscale.repo.index import cat_blobs

_NOT_OURS = ("--no-mailmap", "--no-decorate", "--no-show-signature", "--encoding=UTF-8",
             "--fixed-strings", "--invert-grep", "--grep=Gitscale-Set: ")


class Change(NamedTuple):
    """A path a commit changed: its blob id in the first parent and in the commit (None: the
    commit deleted it); for a merge, also in its other parents (None: not there)."""

    path: str
    before: str | None
    after: str | None
    others: tuple[str | None, ...] = ()


class ManualCommit(NamedTuple):
    """A commit without a ``Gitscale-Set`` trailer that changed some of the paths asked for."""

    commit: str
    time: str  # RFC 3339 UTC, the committer date (as ``history.Entry.time``)
    author: str
    subject: str
    changes: tuple[Change, ...]  # the asked-for paths it changed or deleted

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(change.path for change in self.changes)


def iter_manual(repo_git: Git, paths: Sequence[str]) -> Iterator[ManualCommit]:
    """The commits reachable from HEAD that change or delete ``paths`` and are not gitscale's,
    newest first, as git walks them (in step with ``history.iter_history``'s walk). A commit
    that only adds them (the set's creation) is not one."""
    if not paths:
        return
    wanted = set(paths)
    # No pathspec: limiting the walk by path makes git diff the trees of every commit,
    # gitscale's included (3× the time on 20,000 of them); without it, the grep drops those
    # first and only the rest are diffed, their paths kept here. `log -c`: a merge's combined
    # diff, the paths whose result differs from every parent, with each parent's blob (any
    # git; without it a merge shows no change at all, one resolved by hand included).
    records = repo_git.records(
        "-c", "core.quotePath=false", "log", "--format=%x1e%H%x1f%ct%x1f%an%x1f%s", "--raw",
        "-c",
        "--no-abbrev", "--no-renames", *_NOT_OURS, separator="\x1e")
    for record in records:
        head, _, names = record.partition("\n")
        fields = head.split("\x1f")
        if len(fields) != 4:
            continue
        sha, seconds, author, subject = fields
        changed = tuple(change for change in map(_raw_change, names.split("\n"))
                        if change is not None and change.path in wanted)
        if changed:
            yield ManualCommit(sha, utc_text(int(seconds)), author, subject, changed)


def _raw_change(line: str) -> Change | None:
    """``:100644 100644 <before> <after> M\tpath`` → a Change, and a merge's combined line,
    ``::<modes…> <first parent> <other parents…> <after> MM\tpath`` (a colon per parent);
    None for a file added to the first parent (a set being set up, not an edit of what
    gitscale wrote) and for anything else."""
    info, tab, path = line.partition("\t")
    parents = len(line) - len(line.lstrip(":"))
    parts = info[parents:].split(" ")
    if not tab or not parents or len(parts) != 2 * parents + 3 or parts[-1].startswith("A"):
        return None
    blobs = [None if not blob.strip("0") else blob for blob in parts[parents + 1:-1]]
    return Change(path, blobs[0], blobs[-1], tuple(blobs[1:-1]))


FIRST_BLOCK = 64  # commits whose blobs are read together at first: the first rows show soon
LAST_BLOCK = 4096  # …doubling up to this many (one `cat-file` per block)


def with_blobs(repo_git: Git, commits: Iterator[ManualCommit],
               read: Container[str]) -> Iterator[tuple[ManualCommit, dict[str, bytes]]]:
    """Each commit with the contents of its changes' blobs (before and after, by blob id) for
    the paths in ``read``, in the order given. The blobs of a block of commits are read in one
    ``git cat-file --batch`` (a merge's other parents' too); a blob git does not have is
    left out."""
    commits = iter(commits)
    size = FIRST_BLOCK
    while True:
        block = []
        for commit in commits:
            block.append(commit)
            if len(block) >= size:
                break
        if not block:
            return
        ids = [blob for commit in block for change in commit.changes if change.path in read
               for blob in (change.before, change.after, *change.others) if blob is not None]
        contents = cat_blobs(repo_git, ids)
        for commit in block:
            yield commit, contents
        size = min(size * 2, LAST_BLOCK)


def unseen_after(repo_git: Git) -> tuple[str, int] | None:
    """(the newest scaling commit, how many commits after it are not gitscale's) when there
    are any: what `history` over a clone without trees cannot look into. gitscale's commits
    without a ``Gitscale-Set`` (serve's of reservations alone, a resync's) change no set: not
    counted."""
    # --no-mailmap: with log.mailmap git would read HEAD:.mailmap, a fetch in this clone
    newest = repo_git.out("log", "-1", "--format=%H", "--no-mailmap", "--no-show-signature",
                          "--fixed-strings", "--grep=Gitscale-Set: ")
    if not newest:
        return None
    messages = repo_git.records("log", "--format=%x1e%B", *_NOT_OURS, f"{newest}..HEAD",
                                separator="\x1e")
    count = sum(1 for message in messages
                if message.strip() and not re.match(OWN_COMMIT, message.strip("\n")))
    return (newest, count) if count else None
