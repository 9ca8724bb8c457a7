"""Opening a workspace: the user's checkout in place, or a throwaway (or kept) clone of a URL
or a bare repository, checked first (a URL with credentials, a folder inside a checkout, a
detached HEAD, a repo without a commit) with the same words whichever command asks.
``begin`` starts a one-shot pass's clone before the command's modules are imported;
``open_workspace`` takes it where it would have cloned. What a workspace then does is
``gitscale.repo.workspace``."""
from __future__ import annotations

import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from gitscale.errors import GitError, GitscaleError, InputError
from gitscale.redact import redact
from gitscale.repo import git as git
from gitscale.repo import scratch as scratch_dirs
from gitscale.repo.clone import check_url, clone, is_url, start_clone
from gitscale.repo.workspace import Workspace


@dataclass
class Begun:
    """What ``begin`` found out about ``repo`` before a one-shot pass's modules were imported:
    whether it is a bare repository (a local folder), and the clone it started."""

    repo: str
    branch: str | None
    sparse: bool
    bare: bool  # a local folder: what ``git.is_bare`` said (a URL is cloned as a bare one)
    scratch: Path | None = None  # the clone's scratch directory, when one was started
    clone: git.Started | None = None
    blobless: bool = False


@contextmanager
def begin(repo: str, branch: str | None, *, push: bool = True,
          sparse: bool = False) -> Iterator[Begun | None]:
    """Start the clone a one-shot ``plan`` or ``reconcile`` over a URL or a bare repository
    makes, before the command imports its modules, which take longer than the clone itself
    (≈ 45 ms, against ≈ 15 ms for a clone of 1,000 manifests and ≈ 40 ms of 10,000): git
    clones while Python imports. Hand what it yields to ``open_workspace``, which waits for
    the clone where it would have made it, and says what went wrong there, as it would have.
    Nothing is started when anything ``open_workspace`` checks first is amiss (it says so in
    its turn), nor for a checkout. On the way out a clone no pass took is stopped, and its
    directory removed."""
    begun = _begin(repo, branch, push, sparse)
    try:
        yield begun
    finally:
        if begun is not None and begun.clone is not None and begun.scratch is not None:
            begun.clone.stop()
            scratch_dirs.remove(begun.scratch)


def _begin(repo: str, branch: str | None, push: bool, sparse: bool) -> Begun | None:
    try:
        if is_url(repo):
            check_url(repo)
            url = repo
        else:
            path = Path(repo).expanduser()
            if not path.is_dir():
                return None
            if not git.is_bare(path):
                return Begun(repo, branch, sparse, bare=False)
            url = str(path.resolve())
        if not push:
            return None
        scratch = scratch_dirs.make("clone")
    except (GitscaleError, OSError):
        return None  # said by open_workspace, where it always was
    blobless = sparse and is_url(url)
    try:
        started = start_clone(url, scratch / "repo", branch, depth=1, sparse=sparse,
                              blobless=blobless, throwaway=True)
    except (GitscaleError, OSError):  # (the token: checked again, and said, by the pass)
        scratch_dirs.remove(scratch)
        return None
    return Begun(repo, branch, sparse, True, scratch, started, blobless)


@contextmanager
def open_workspace(repo: str, branch: str | None, *, push: bool = True,
                   history: bool = False, sparse: bool = False,
                   since: str | None = None, kept: bool = False,
                   unborn_ok: bool = False, writes: bool = True,
                   begun: Begun | None = None) -> Iterator[Workspace]:
    """Yield a Workspace for ``repo``; a clone is removed afterwards whatever happens.
    ``sparse``: a clone checks out only the top-level files (a pass reads manifests through
    git: ``gitscale.repo.index``). ``kept``: the clone serves pass after pass (``run``; see
    ``_clone``), and is tidied as it goes (``clone.tidy``). A repo without a commit is refused (a pass starts from one), unless
    ``unborn_ok`` (``validate`` reads the files as they are). ``writes=False`` (``plan``,
    ``validate``, ``history``, ``simulate``): a checkout with a detached HEAD is read as it
    is — a CI job reviewing a pull request checks out its merge commit that way. ``begun``:
    what ``begin`` found out and started for this ``repo``, taken instead of asking again."""
    if begun is not None and (begun.repo, begun.branch, begun.sparse, history, since, kept) \
            != (repo, branch, sparse, False, None, False):
        begun = None  # begun for another workspace than this one
    if is_url(repo):
        check_url(repo)  # before anything can echo it or hand it to git
    path = Path(repo).expanduser()
    if not is_url(repo) and path.is_dir() and not (begun.bare if begun is not None
                                                       else git.is_bare(path)):
        if not git.is_work_tree(path):
            top = git.work_tree_top(path)
            if top is not None:  # `git init` here would nest a second repo in the checkout
                raise InputError(repo, f"is inside the checkout {top}, not its top: gitscale "
                                 f"reads the config repo from its root (--repo {top})")
            raise InputError(repo, "is not a git checkout: pass --repo with the config repo's "
                             "checkout or URL, or scaffold one with `gitscale init DIR`")
        ws = _checkout(path, branch, push, writes)
        if not unborn_ok:
            _check_born(ws)
        yield ws
        return
    if not is_url(repo) and not path.exists():
        raise InputError(redact(repo), "no such directory, and not a URL")
    if not push:
        raise InputError("--no-push", "needs --repo to be a local checkout (a temporary clone "
                         "of a URL would be thrown away); use `gitscale plan` to preview")
    started = begun if begun is not None and begun.clone is not None else None
    # named after this process: see gitscale.repo.scratch
    scratch = started.scratch if started is not None and started.scratch is not None \
        else scratch_dirs.make("clone")
    try:
        dest = scratch / "repo"
        url = str(path.resolve()) if not is_url(repo) else repo
        if started is not None and started.clone is not None:
            started.clone.wait()  # the clone `_clone` would make, begun before the imports
            partial = started.blobless
        else:
            partial = _clone(url, dest, branch, history, sparse, since, kept)
        repo_git = git.Git(dest, promisor="origin" if partial else None)
        current = repo_git.current_branch()
        if current is None:
            raise GitError(f"{redact(repo)} has no branch to work on")
        ws = Workspace(dest, repo_git, current, "clone", "origin", current, redact(repo),
                       sparse, kept=kept)
        if not unborn_ok:
            _check_born(ws)
        yield ws
    finally:
        scratch_dirs.remove(scratch)


def _check_born(ws: Workspace) -> None:
    head = ws.git.born_head()
    if head is not None:
        if ws.mode == "clone":  # no one else moves a clone's HEAD before its first base()
            ws.opened_at = head
        return
    if ws.mode == "clone":  # cloned empty: the remote's HEAD may name a branch deleted there
        try:
            heads = ws.git.remote_heads("origin")
        except GitError:
            heads = []
        if heads:
            listed = ", ".join(heads[:5]) + (" …" if len(heads) > 5 else "")
            raise InputError(ws.label, "its default branch (the one its HEAD names) does not "
                             f"exist there: deleted or renamed? Its branches: {listed}; pass "
                             "--branch with the one gitscale should work on")
    raise InputError(ws.label, "has no commits yet: commit gitscale.yaml and the manifests "
                     "first (`gitscale init` writes and commits them)")


def _clone(url: str, dest: Path, branch: str | None, history: bool, sparse: bool,
           since: str | None, kept: bool = False) -> bool:
    """A pass needs one commit; history needs commit messages only, and with ``since`` only
    the recent ones (``history_since``). No commit that recent: the whole history.

    A pass over a URL clones without blobs (a partial clone) and leaves the checkout to its
    first ``repo.index.check_out``: the few files it reads come in one fetch per batch rather
    than all ten thousand manifests up front. True when the clone is partial. Cloned whole:
    a local path (git links its objects, which costs less than any fetch), and a clone kept
    from pass to pass, whose sync brings each changed blob with its commit, where a partial
    clone would fetch the blobs to edit again every pass (and check its connectivity against
    every promisor object on each shallow fetch)."""
    if history and since:
        try:
            clone(url, dest, branch, None, commits_only=True, since=since)
            return False
        except GitError:
            shutil.rmtree(dest, ignore_errors=True)
    blobless = sparse and not history and not kept and is_url(url)
    clone(url, dest, branch, depth=None if history else 1, sparse=sparse,
              commits_only=history, blobless=blobless, throwaway=not kept and not history,
              kept=kept)
    return blobless


def _checkout(path: Path, branch: str | None, push: bool, writes: bool = True) -> Workspace:
    repo_git = git.Git(path)
    current = repo_git.current_branch()
    if current is None and writes:
        raise InputError(str(path), "HEAD is detached; check out the branch gitscale should "
                         "commit to")
    if current is None:  # read as it is: nothing is committed, so no branch is needed
        if branch is not None:
            raise InputError(str(path), f"HEAD is detached, not on branch {branch}; check out "
                             f"{branch}, or drop --branch to read the commit checked out")
        return Workspace(path, repo_git, "HEAD", "checkout", None, None, str(path))
    if branch is not None and branch != current:
        raise InputError(str(path), f"is on branch {current}, not {branch}; check out {branch} "
                         "or drop --branch")
    upstream = repo_git.upstream(current) if push else None
    remote, remote_branch = upstream if upstream else (None, None)
    ws = Workspace(path, repo_git, current, "checkout", remote, remote_branch, str(path))
    if push and upstream is None:
        ws.unpushed = _why_unpushed(repo_git, current)
    return ws


def _why_unpushed(repo_git: git.Git, branch: str) -> str:
    """Why a checkout's commit is not pushed, and the command that makes the next one be.
    `--set-upstream-to` only works for a branch the remote is known to have: a branch never
    pushed (a new repo, `git remote add` just run) needs `git push -u`."""
    remotes = repo_git.out("remote").split()
    if not remotes:
        return "the checkout has no remote"
    remote = "origin" if "origin" in remotes else remotes[0]
    if repo_git.has_ref(f"refs/remotes/{remote}/{branch}"):
        return (f"{branch} tracks no remote branch; `git branch --set-upstream-to="
                f"{remote}/{branch}` makes gitscale push it")
    return (f"{branch} tracks no remote branch, and {remote}/{branch} is not known here (not "
            f"pushed yet?); `git push -u {remote} {branch}` pushes it and makes gitscale push")
