"""Commits that are not gitscale's but change what it manages: a `git revert`, a pause, a hand
edit of a manifest or of gitscale.yaml. `history` shows them beside the scaling commits, so
that its newest row for a set is the repo's newest word on it.

Found by a second ``git log`` limited to the managed paths, of the commits without a
``Gitscale-Set:`` line; limiting by path needs the commits' trees, which a checkout has and
`history`'s clone of a URL (commit messages only) does not: there, ``unseen_after`` counts
the commits after the newest scaling commit that are not gitscale's, for a one-line note.
"""
from __future__ import annotations

from typing import Iterator, NamedTuple, Sequence

from gitscale.record.history import utc_text
from gitscale.repo.git import Git

_NOT_OURS = ("--no-mailmap", "--no-decorate", "--no-show-signature", "--encoding=UTF-8",
             "--fixed-strings", "--invert-grep", "--grep=Gitscale-Set: ")


class ManualCommit(NamedTuple):
    """A commit without a ``Gitscale-Set`` trailer that changed some of the paths asked for."""

    commit: str
    time: str  # RFC 3339 UTC, the committer date (as ``history.Entry.time``)
    author: str
    subject: str
    paths: tuple[str, ...]  # the asked-for paths it changed or deleted


def iter_manual(repo_git: Git, paths: Sequence[str]) -> Iterator[ManualCommit]:
    """The commits reachable from HEAD that change or delete ``paths`` and are not gitscale's,
    newest first, as git walks them (in step with ``history.iter_history``'s walk). A commit
    that only adds them (the set's creation) is not one."""
    if not paths:
        return
    records = repo_git.records(
        "--literal-pathspecs", "-c", "core.quotePath=false", "log",
        "--format=%x1e%H%x1f%ct%x1f%an%x1f%s", "--name-status", "--no-renames", *_NOT_OURS,
        "--", *paths, separator="\x1e")
    for record in records:
        head, _, names = record.partition("\n")
        fields = head.split("\x1f")
        if len(fields) != 4:
            continue
        sha, seconds, author, subject = fields
        # a file added is a set being set up, not an edit of what gitscale wrote: not shown
        changed = tuple(path for status, _, path in (line.partition("\t")
                                                     for line in names.split("\n") if line)
                        if status != "A")
        if changed:
            yield ManualCommit(sha, utc_text(int(seconds)), author, subject, changed)


def unseen_after(repo_git: Git) -> tuple[str, int] | None:
    """(the newest scaling commit, how many commits after it are not gitscale's) when there
    are any: what `history` over a clone without trees cannot look into."""
    # --no-mailmap: with log.mailmap git would read HEAD:.mailmap, a fetch in this clone
    newest = repo_git.out("log", "-1", "--format=%H", "--no-mailmap", "--no-show-signature",
                          "--fixed-strings", "--grep=Gitscale-Set: ")
    if not newest:
        return None
    count = int(repo_git.out("rev-list", "--count", "--fixed-strings", "--invert-grep",
                             "--grep=Gitscale-Set: ", f"{newest}..HEAD") or "0")
    return (newest, count) if count else None
