"""Clones: which ``--repo`` is a URL and one that carries credentials refused, a clone's
options (shallow, sparse, partial, commits only; thrown away after a pass or kept for months),
and a kept clone tidied when objects pile up. Run through ``gitscale.repo.git``'s ``Git``."""
from __future__ import annotations

import re
from pathlib import Path

from gitscale.errors import InputError
from gitscale.redact import has_credentials, redact
from gitscale.repo.git import Git, Started
from gitscale.repo.git_env import check_token


def is_url(location: str) -> bool:
    """A URL, or git's scp-style ``[user[:password]@]host:path`` with a user."""
    return "://" in location or bool(re.match(r"^[^@/\s]+@[\w.-]+:", location))


def check_url(url: str) -> None:
    """Refuse URLs that carry credentials: they would end up in argv, .git/config and logs.
    Over HTTP(S) even a bare user name may be a token (``https://TOKEN@github.com/...``), and
    so may a query parameter (``?token=``, ``?access_token=``); ``ssh://git@host`` and
    ``git@host:org/repo`` name a user, not a secret, and are fine."""
    if has_credentials(url):
        raise InputError("--repo", f"{redact(url)} has credentials in it; pass them through "
                         "GITSCALE_GIT_TOKEN (or a git credential helper) instead")


def clone(url: str, dest: Path, branch: str | None, depth: int | None,
          sparse: bool = False, commits_only: bool = False, since: str | None = None,
          blobless: bool = False, throwaway: bool = False, kept: bool = False) -> None:
    """Clone ``url`` into ``dest`` (see ``start_clone``)."""
    start_clone(url, dest, branch, depth, sparse, commits_only, since, blobless, throwaway,
                kept).wait()


def start_clone(url: str, dest: Path, branch: str | None, depth: int | None,
                sparse: bool = False, commits_only: bool = False, since: str | None = None,
                blobless: bool = False, throwaway: bool = False, kept: bool = False) -> Started:
    """``clone``, started in the background (``Started.wait`` ends it as ``clone`` would).
    ``since`` (a git date): only the commits from then on (``--shallow-since``).
    ``blobless``: a partial clone of commits and trees, checked out by the caller (which
    fetches the blobs it needs in batches); a server that does not allow filters sends
    everything instead, with a warning on stderr that is not an error. ``throwaway``: the
    clone is deleted after one pass, so its commit's objects stay in fast-import's pack
    (``fastimport.unpackLimit=0``) instead of being unpacked into a directory each: removing
    some forty one-file directories cost more than the rest of the clean-up (≈ 40–90 ms on
    this project's build machine), for the same commit and the same push. A throwaway clone
    of a local path borrows the source's objects (``--shared``: an alternates file) rather than
    linking each of them, pack files and every loose object a push left there, into a
    directory of its own: git ignores ``--depth`` for a local path, so the clone held them all,
    and creating and then deleting a hundred-odd object directories was the largest part of a
    1,000-set pass over a local bare repo. It lives for one pass; git prunes no object that a
    branch reaches, nor an unreachable one younger than ``gc.pruneExpire`` (two weeks). Nor
    does git flush what it writes there to the disk (``core.fsync=none``): fast-import's pack
    and its index were two disk flushes a pass (≈ 2–4 ms on the build machine) for files that
    are read once, by the push, and deleted; the remote's side of the push is the remote's.
    ``kept``: the clone serves a process for months (``run``, ``serve``) and is tidied by its
    owner (``tidy``): no reflog, whose entries would keep every commit it ever saw alive, and
    no automatic gc, which git would start in the background (``gc.autoDetach``) as an orphan
    of a process that is often a container's process 1 and never reaps it."""
    check_url(url)
    check_token()
    # --template=: no hooks or other files from the machine's git templates in our clone
    args = ["clone", "--quiet", "--no-tags", "--single-branch", "--template="]
    if since:
        args.append(f"--shallow-since={since}")
    if depth:
        args.append(f"--depth={depth}")
    if sparse:
        args.append("--sparse")  # only the top-level files are checked out
    if blobless:
        args += ["--filter=blob:none", "--no-checkout"]
    if commits_only:
        # history reads commit messages only: no trees, no files (a server without partial
        # clone support sends everything, which is only slower)
        args += ["--bare", "--filter=tree:0"]
    if branch:
        args += ["--branch", branch]
    if kept:
        args += ["--config", "core.logAllRefUpdates=false", "--config", "gc.auto=0",
                 "--config", "maintenance.auto=false"]
    if throwaway:
        args += ["--config", "fastimport.unpackLimit=0", "--config", "core.fsync=none"]
        if not is_url(url):
            args.append("--shared")
    return Git(dest.parent).start(*args, "--", url, str(dest))


# A kept clone is tidied (``tidy``) when it holds this many loose objects or packs: a pass
# that commits adds five or so loose objects (its commit, trees and blobs; a fetch of another
# writer's commit as many), and each adds a line to the shallow file that every git call reads.
TIDY_LOOSE, TIDY_PACKS = 1000, 10


def tidy(repo: Git) -> bool:
    """A clone that lives for months (``clone(kept=True)``): when loose objects or packs have
    piled up, pack what HEAD reaches and drop the rest at once — the commits each shallow fetch
    left behind, and with them their lines in ``.git/shallow``. Safe because the clone is one
    process's own and nothing else runs in it meanwhile. True when it ran ``git gc``."""
    counts = dict(line.split(": ", 1) for line in repo.out("count-objects", "-v").splitlines())
    if int(counts.get("count", 0)) < TIDY_LOOSE and int(counts.get("packs", 0)) < TIDY_PACKS:
        return False
    repo.run("-c", "gc.reflogExpire=now", "-c", "gc.reflogExpireUnreachable=now",
             "gc", "--quiet", "--prune=now")
    return True
