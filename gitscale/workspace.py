"""Where a pass works: the user's checkout in place, or a throwaway clone of a URL.

- ``--repo URL`` (or a bare repository path): clone into a temporary directory, commit, push to
  that URL, delete the clone. Nothing is kept between runs.
- ``--repo PATH`` to a checkout: work in it. Writes need a clean tree (tracked files) and a
  branch that is not ahead of its upstream, so that retrying after a push race can safely reset
  to the upstream: the only commit that reset can drop is the one gitscale just made.
"""
from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Literal

from gitscale import git
from gitscale.errors import GitError, InputError

Mode = Literal["checkout", "clone"]


@dataclass
class Workspace:
    root: Path
    git: git.Git
    branch: str
    mode: Mode
    remote: str | None  # remote to push to; None: commit locally only
    remote_branch: str | None
    label: str  # what to call the repo in messages (credentials redacted)
    sparse: bool = False  # a clone with only top-level files checked out (gitscale.gitindex)

    def base(self) -> str:
        return self.git.head()

    def sync(self) -> None:
        """Move to the remote's newest commit (after a push race, or before a write)."""
        if self.remote is None or self.remote_branch is None:
            return
        tip = self.git.fetch(self.remote, self.remote_branch,
                             depth=1 if self.mode == "clone" else None)
        self.git.reset_hard(tip)

    def prepare_write(self) -> None:
        """Checkout mode: refuse to work on top of local changes that a retry could drop."""
        if self.mode != "checkout":
            return
        dirty = self.git.dirty_tracked()
        if dirty:
            listed = ", ".join(dirty[:5]) + (" …" if len(dirty) > 5 else "")
            raise InputError(self.label, f"has uncommitted changes ({listed}); commit or stash "
                             "them first: gitscale only commits its own edits")
        if self.remote is None or self.remote_branch is None:
            return
        tip = self.git.fetch(self.remote, self.remote_branch)
        head = self.git.head()
        if head == tip:
            return
        if self.git.is_ancestor(head, tip):
            self.git.reset_hard(tip)  # fast-forward; the tree is clean
            return
        raise InputError(self.label, f"branch {self.branch} has commits that are not on "
                         f"{self.remote}/{self.remote_branch}; push them first, or use --no-push")

    def push(self) -> None:
        if self.remote is not None and self.remote_branch is not None:
            self.git.push(self.remote, self.remote_branch)


@contextmanager
def open_workspace(repo: str, branch: str | None, *, push: bool = True,
                   history: bool = False, sparse: bool = False,
                   since: str | None = None) -> Iterator[Workspace]:
    """Yield a Workspace for ``repo``; a clone is removed afterwards whatever happens.
    ``sparse``: a clone checks out only the top-level files (a pass reads manifests through
    git: ``gitscale.gitindex``)."""
    path = Path(repo).expanduser()
    if not git.is_url(repo) and path.is_dir() and not git.is_bare(path):
        if not git.is_work_tree(path):
            raise InputError(repo, "is not the top of a git checkout (git init it, or pass "
                             "a URL)")
        yield _checkout(path, branch, push)
        return
    if not git.is_url(repo) and not path.exists():
        raise InputError(repo, "no such directory, and not a URL")
    if not push:
        raise InputError("--no-push", "needs --repo to be a local checkout (a temporary clone "
                         "of a URL would be thrown away); use `gitscale plan` to preview")
    scratch = Path(tempfile.mkdtemp(prefix="gitscale-"))
    try:
        dest = scratch / "repo"
        url = str(path.resolve()) if not git.is_url(repo) else repo
        _clone(url, dest, branch, history, sparse, since)
        repo_git = git.Git(dest)
        current = repo_git.current_branch()
        if current is None:
            raise GitError(f"{git.redact(repo)} has no branch to work on")
        yield Workspace(dest, repo_git, current, "clone", "origin", current, git.redact(repo),
                        sparse)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _clone(url: str, dest: Path, branch: str | None, history: bool, sparse: bool,
           since: str | None) -> None:
    """A pass needs one commit; history needs commit messages only, and with ``since`` only
    the recent ones (``history_since``). No commit that recent: the whole history."""
    if history and since:
        try:
            git.clone(url, dest, branch, None, commits_only=True, since=since)
            return
        except GitError:
            shutil.rmtree(dest, ignore_errors=True)
    git.clone(url, dest, branch, depth=None if history else 1, sparse=sparse,
              commits_only=history)


def _checkout(path: Path, branch: str | None, push: bool) -> Workspace:
    repo_git = git.Git(path)
    current = repo_git.current_branch()
    if current is None:
        raise InputError(str(path), "HEAD is detached; check out the branch gitscale should "
                         "commit to")
    if branch is not None and branch != current:
        raise InputError(str(path), f"is on branch {current}, not {branch}; check out {branch} "
                         "or drop --branch")
    upstream = repo_git.upstream(current) if push else None
    remote, remote_branch = upstream if upstream else (None, None)
    return Workspace(path, repo_git, current, "checkout", remote, remote_branch, str(path))
