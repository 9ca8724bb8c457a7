"""Where a pass works: the user's checkout in place, or a throwaway clone of a URL (opened by
``gitscale.repo.opening``).

- ``--repo URL`` (or a bare repository path): clone into a temporary directory, commit, push to
  that URL, delete the clone. Nothing is kept between runs.
- ``--repo PATH`` to a checkout: work in it. Writes need a clean tree (tracked files) and a
  branch that is not ahead of its upstream, so that retrying after a push race can safely reset
  to the upstream: the only commit that reset can drop is the one gitscale just made.

A run killed half-way leaves either edited files (between writing and committing) or a commit
that was not pushed. Both are recognised as gitscale's own and discarded by the next run (its
decision would be stale anyway), by the record ``begin_write`` keeps in the git directory while
a write is in progress: each edited path with the hashes of its text before and after the edit
(a person's later change matches neither), then the commit, until it is pushed (which must also
carry gitscale's subject and ``Gitscale-Base`` trailer). Anything else is still refused.

Two gitscale processes in one checkout take turns, a pass at a time (``exclusive``, by
``gitscale.repo.checkout_lock``): they share the work tree, the index, FETCH_HEAD and that
record, and the second one took the first one's edit in progress for the leftovers of a killed
run.
"""
from __future__ import annotations

import hashlib
import re
import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Mapping

from gitscale.repo import git as git
from gitscale.repo.clone import tidy
from gitscale.repo.git_output import missing_branch
from gitscale.repo.checkout_lock import LOCK, hold_checkout
from gitscale.errors import GitError, InputError, WriteError
from gitscale.runnerset_api import OWN_COMMIT
from gitscale.timeutil import format_time

Mode = Literal["checkout", "clone"]
PENDING = "gitscale-pending-write.json"  # in the git directory, while a write is in progress
TIDY_EVERY = 50  # syncs of a kept clone between two looks at its objects (clone.tidy)


@dataclass
class Workspace:
    root: Path
    git: git.Git
    branch: str
    mode: Mode
    remote: str | None  # remote to push to; None: commit locally only
    remote_branch: str | None
    label: str  # what to call the repo in messages (credentials redacted)
    sparse: bool = False  # a clone with only top-level files checked out (gitscale.repo.index)
    recovered: list[str] = field(default_factory=list)  # leftovers of a killed run, discarded
    marker: Path | None = None  # where the record of a write in progress lives (see begin_write)
    deepened: bool = False  # a shallow clone deepened for a forecast's history (deepen_since)
    unpushed: str = "--no-push"  # why a checkout without remote/remote_branch only commits
    kept: bool = False  # a clone that serves pass after pass (run, serve): tidied as it goes
    syncs: int = 0  # syncs since the last look at how much the kept clone holds
    # a clone: the commit HEAD named when it was opened (its check for a commit read it), the
    # first ``base``'s answer; dropped once taken, and by ``sync``
    opened_at: str | None = None

    def base(self) -> str:
        """The commit HEAD names: the one the pass decides on and commits on top of."""
        known, self.opened_at = self.opened_at, None
        return known if known is not None else self.git.head()

    def sync(self) -> None:
        """Move to the remote's newest commit (after a push race, or before a write). A clone
        fetches one commit deep, unless it was deepened for a forecast's history: then only the
        new commits, so the history read stays joined to the new tip (a depth-1 fetch would cut
        it there, and the next read would deepen again, a fetch per pass)."""
        self.opened_at = None
        if self.remote is None or self.remote_branch is None:
            return
        shallow = self.mode == "clone" and not self.deepened
        tip = self.git.fetch(self.remote, self.remote_branch, depth=1 if shallow else None)
        self.git.reset_hard(tip)
        if self.kept and self.mode == "clone":
            self.syncs += 1
            if self.syncs >= TIDY_EVERY:  # one `count-objects` per TIDY_EVERY passes
                self.syncs = 0
                tidy(self.git)

    def deepen_since(self, since: datetime) -> None:
        """A shallow clone: fetch the remote branch's commits from ``since`` on (a forecast's
        history); later syncs keep them joined. When the branch's newest commit (HEAD, just
        synced) is older than ``since`` there is nothing to fetch, and git would refuse to
        try ("no commits selected for shallow requests"): a quiet repo, a rollback by force
        push to an older commit."""
        assert self.remote is not None and self.remote_branch is not None
        if self.git.commit_time("HEAD") < since.timestamp():
            return
        self.git.deepen_since(self.remote, self.remote_branch, format_time(since))
        self.deepened = True

    @contextmanager
    def exclusive(self, timeout: float, say: Callable[[str], None] | None = None,
                  clock: Callable[[], float] = time.monotonic, *,
                  reading: bool = False) -> Iterator[None]:
        """Checkout mode: hold the checkout for one pass (``hold_checkout``). A clone is this
        process's own: nothing to hold."""
        if self.mode != "checkout":
            yield
            return
        # the lock and the record of a write (``_marker``) in one git process, not two
        lock, marker = self.git.git_paths(LOCK, PENDING)
        if self.marker is None:
            self.marker = marker
        with hold_checkout(self.git, self.label, timeout, say, clock, reading=reading,
                           path=lock):
            yield

    def prepare_write(self) -> None:
        """Checkout mode: refuse to work on top of local changes that a retry could drop,
        after discarding what a killed gitscale run left behind."""
        if self.mode != "checkout":
            return
        # a record half written by a killed run (between its temporary file and the rename):
        # only a gitscale holding this checkout writes one, and this one holds it (its own
        # name, a dead run's with the same pid, is written over by begin_write)
        own = f"{PENDING}.{os.getpid()}.tmp"
        for tmp in self._marker().parent.glob(f"{PENDING}.*.tmp"):
            if tmp.name != own:
                _discard(tmp)
        pending = self._pending()
        try:
            self._prepare(pending)
        except InputError:
            if pending:
                self.end_write()  # refused: the record has served
            raise
        # (any other failure — git's stale index.lock, a fetch — keeps the record: the next
        # run's recovery needs it, or gitscale's own edit passes for a person's)
        if pending:
            self.end_write()  # recovered, or nothing was left to recover

    def _prepare(self, pending: dict[str, Any]) -> None:
        dirty = self._discard_own_files(self.git.dirty_tracked(), pending.get("files"))
        if dirty:
            listed = ", ".join(dirty[:5]) + (" …" if len(dirty) > 5 else "")
            raise InputError(self.label, f"has uncommitted changes ({listed}); commit or stash "
                             "them first: gitscale only commits its own edits")
        if self.remote is None or self.remote_branch is None:
            # --no-push (or no upstream): the record alone says which commit was the killed
            # run's, on which base; left here it would pass for a --no-push commit
            base = pending.get("base")
            head = self.git.head()
            if isinstance(base, str) and head != base and self._is_own_commit(head, base,
                                                                              pending):
                self.git.reset_hard(base)
                self.recovered.append(f"unpushed commit {head[:12]}")
            return
        tip, head = self._fetch_upstream(self.remote, self.remote_branch)
        if head == tip:
            return
        if self.git.is_ancestor(head, tip):
            self.git.reset_hard(tip)  # fast-forward; the tree is clean
            return
        if self._is_own_commit(head, tip, pending):
            # A run killed before its push landed: its decision is stale, this run makes a
            # new one. (Commits made with --no-push have no record: they are kept.)
            self.git.reset_hard(tip)
            self.recovered.append(f"unpushed commit {head[:12]}")
            return
        # Not pushed yet, or dropped from the remote by a force push or a reset there: which
        # side is right is for a person to say (pushing them again would undo a rollback).
        where = f"{self.remote}/{self.remote_branch}"
        count = self.git.out("rev-list", "--count", f"{tip}..{head}")
        newest = self.git.commit_facts(head)[1]
        raise InputError(self.label, f"branch {self.branch} has {count} commit"
                         f"{'' if count == '1' else 's'} that {where} does not have (newest "
                         f"{head[:12]} {newest!r}): not pushed yet, or dropped there by a force "
                         "push or a reset. Either push them first (or use --no-push), or, if "
                         f"{where} is right, `git -C {self.root} reset --hard {tip[:12]}` (its "
                         "commit) drops them here and gitscale goes on from there")

    def _fetch_upstream(self, remote: str, branch: str) -> tuple[str, str]:
        """The upstream's tip, and HEAD (read with it). A branch that tracks one the remote does not have, and that this
        checkout never saw there either, was never pushed (a clone of an empty repo, then
        `gitscale init`): that is said with the push that fixes it, not as a branch deleted."""
        try:
            return self.git.fetch_with_head(remote, branch)
        except GitError as exc:
            if missing_branch(str(exc)) is None \
                    or self.git.has_ref(f"refs/remotes/{remote}/{branch}"):
                raise
        refspec = self.branch if branch == self.branch else f"{self.branch}:{branch}"
        raise InputError(self.label, f"branch {self.branch} tracks {remote}/{branch}, which "
                         f"{remote} does not have: not pushed yet? `git -C {self.root} push -u "
                         f"{remote} {refspec}` pushes it (or use --no-push)")

    def begin_write(self, files: Mapping[str, tuple[str, str]], base: str) -> None:
        """Record the edit about to be written (path → (text before, text after)) and
        committed on top of ``base``; kept until the commit is pushed or taken back."""
        if self.mode != "checkout":
            return
        record = {"base": base, "files": {path: [_digest(old.encode()), _digest(new.encode())]
                                          for path, (old, new) in files.items()}}
        marker = self._marker()
        tmp = marker.with_name(f"{marker.name}.{os.getpid()}.tmp")
        try:
            try:
                tmp.write_text(json.dumps(record))
                os.replace(tmp, marker)
            except BaseException:
                _discard(tmp)
                raise
        except OSError as exc:  # a full disk: said as such, not as a bug (exit 70)
            raise WriteError(f"{self.label}: cannot write {marker}: "
                             f"{exc.strerror or type(exc).__name__} (gitscale records an edit "
                             "there before making it); nothing was written") from None

    def end_write(self) -> None:
        """The edit is pushed, or committed without a push, or was taken back."""
        if self.mode == "checkout":
            self._marker().unlink(missing_ok=True)

    def _is_own_commit(self, head: str, tip: str, pending: dict[str, Any]) -> bool:
        """Is ``head`` the recorded edit, committed by gitscale on the recorded base and not
        pushed: the one commit between ``tip`` and ``head``, with gitscale's message, whose
        files are the edit's?"""
        files = pending.get("files")
        if not isinstance(files, dict) or not files or pending.get("base") is None:
            return False
        if self.git.parents(head) != [pending["base"]]:
            return False
        own = self.git.messages(f"{tip}..{head}", 2)
        if len(own) != 1 or not re.match(OWN_COMMIT, own[0][1]):
            return False
        for path, hashes in files.items():
            committed = self.git.blob(f"{head}:{path}")
            if committed is None or not isinstance(hashes, list) or len(hashes) != 2 \
                    or _digest(committed) != hashes[1]:
                return False
        return True

    def _marker(self) -> Path:
        if self.marker is None:  # one git call per workspace, not one per write
            self.marker = self.git.git_path(PENDING)
        return self.marker

    def _pending(self) -> dict[str, Any]:
        try:
            record = json.loads(self._marker().read_text())
        except (OSError, ValueError):
            return {}  # no write was interrupted (or the record is not ours to read)
        return record if isinstance(record, dict) else {}

    def _discard_own_files(self, dirty: list[str], record: object) -> list[str]:
        """Restore the files a killed run had edited but not committed; the rest of ``dirty``."""
        if not isinstance(record, dict):
            return dirty
        for path in record:  # write_atomic's temporary files, if the kill came mid-write
            for tmp in (self.root / path).parent.glob(f".{Path(path).name}.gitscale-*.tmp"):
                tmp.unlink(missing_ok=True)
        own = [path for path in dirty if self._is_own(path, record.get(path))]
        if own:
            self.git.restore(own)
            self.recovered.append(f"uncommitted edit{'s' if len(own) > 1 else ''} of "
                                  f"{', '.join(own)}")
        return [path for path in dirty if path not in own]

    def _is_own(self, path: str, hashes: object) -> bool:
        """Do the work tree and the index hold ``path`` as it was, or as the edit left it?"""
        if not isinstance(hashes, list):
            return False
        try:
            work = (self.root / path).read_bytes()
        except OSError:
            return False
        staged = self.git.blob(f":{path}")
        return _digest(work) in hashes and (staged is None or _digest(staged) in hashes)

    def push(self) -> None:
        if self.remote is not None and self.remote_branch is not None:
            self.git.push(self.remote, self.remote_branch)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all: a kill mid-write leaves the old text, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)  # .gitscale/ on the first write
    tmp = path.with_name(f".{path.name}.gitscale-{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)  # keep the file's mode (git tracks +x)
        os.replace(tmp, path)
    except BaseException:
        _discard(tmp)  # a full disk leaves no half-written file in the work tree
        raise


def _discard(tmp: Path) -> None:
    """Remove a temporary file a write left, if it can be removed."""
    try:
        tmp.unlink(missing_ok=True)
    except OSError:
        pass  # (a directory of that name, or its folder gone: nothing of ours to remove)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
