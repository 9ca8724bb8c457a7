"""All of gitscale's git knowledge: small verbs over one subprocess wrapper.

git is driven through its CLI (as pre-commit does): no repository object outlives a call, and
credentials reach git only through the environment (GIT_ASKPASS), never argv or a URL; what
that environment holds, and the token's check before git talks to a server, is
``gitscale.repo.git_env``. Errors show the command and git's output with any credentials
redacted (``gitscale.repo.git_output``: what git's output means); clones, their options and a
kept clone's tidying are ``gitscale.repo.clone``.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from contextlib import contextmanager
from functools import lru_cache
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from gitscale.errors import GitError, GitStopped
from gitscale.repo.deadline import (REMOTE_VERBS, STOP_POLL, TIMEOUT_VARIABLE, ReadDeadline,
                                    StopDeadline, end_tree, git_timeout, stop_deadline)
from gitscale.repo.git_env import check_token, git_env, no_git_env
from gitscale.repo.git_output import Result, describe_failure, push_failure


@contextmanager
def _starting(args: Sequence[str], cwd: Path) -> Iterator[None]:
    """git that cannot be started (not installed, not on PATH; a folder gone) is a
    ``GitError`` saying so, not a crash."""
    try:
        yield
    except OSError as exc:
        if exc.filename == "git" or (isinstance(exc, FileNotFoundError) and cwd.is_dir()):
            raise GitError("git is not installed or not on PATH (gitscale runs the git "
                           f"command): {exc.strerror or type(exc).__name__}") from None
        raise GitError(f"git {args[0] if args else ''} cannot start in {cwd}: "
                       f"{exc.strerror or type(exc).__name__}") from None


# How long ``Started.stop`` reads what git said after ending it (see there).
STOP_GRACE = 5.0


class Started:
    """A git command started by ``Git.start``, still running or done. It may run until
    ``deadline`` (``time.monotonic()``; ``deadline.py``): then it is stopped. A command that
    talks to a remote is also stopped once ``stopping``'s deadline passes (a stop asked for
    while it runs counts too). Its output is text, or bytes when started so
    (``Git._start(text=False)``)."""

    def __init__(self, args: Sequence[str], proc: "subprocess.Popen[Any]", deadline: float,
                 input: str | bytes | None = None,
                 stopping: StopDeadline | None = None) -> None:
        self.args, self.proc, self.deadline = tuple(args), proc, deadline
        self._input = input
        self.stopping = stopping

    def finish(self) -> tuple[Any, Any, int]:
        """Its stdout, stderr and exit code once it ends; a ``GitError`` when it ran past its
        deadline, a ``GitStopped`` past the stop deadline (stopped, with what it started)."""
        while True:
            cut = self.stopping.at if self.stopping is not None else None
            end = self.deadline if cut is None else min(self.deadline, cut)
            wait = max(0.0, end - time.monotonic())
            if self.stopping is not None and cut is None:
                wait = min(wait, STOP_POLL)  # (a stop may come meanwhile)
            # (input once: a later try resumes writing it, and refuses it given again)
            given, self._input = self._input, None
            try:
                stdout, stderr = self.proc.communicate(given, timeout=wait)
            except subprocess.TimeoutExpired:
                now = time.monotonic()
                if now >= self.deadline:
                    self.stop()
                    raise GitError(timed_out(self.args)) from None
                if self.stopping is not None and self.stopping.passed():
                    self.stop()
                    raise GitStopped(self.stopping.stopped(_verb(self.args)), _verb(self.args),
                                     begun=True) from None
                continue  # (output is kept across tries: ``communicate`` resumes)
            except BaseException:  # (Ctrl-C too) as subprocess.run: git does not outlive us
                self.stop()
                raise
            return stdout, stderr, self.proc.returncode

    def wait(self, *, check: bool = True) -> Result:
        """Its result once it ends; a ``GitError`` as ``Git.run`` raises when it failed, or
        when it ran past its deadline."""
        result = Result(*self.finish())
        if check and result.code != 0:
            raise GitError(describe_failure(self.args, result))
        return result

    def stop(self, *, grace: float = STOP_GRACE) -> None:
        """End it if it still runs (its work is not wanted), with the helpers it started
        (git-remote-https, ssh, index-pack, a credential helper: ``end_tree``), and reap it —
        within ``grace`` seconds: a helper that escaped (started anew after the kill, or where
        there is no ``/proc`` to find it) may still hold git's stderr, and reading that to its
        end waited for the helper, for ever if it hung. Then the pipes are closed and git is
        reaped. git runs in our process group, where the terminal's Ctrl-C reaches it and its
        helpers as it reaches us (started in a session of its own, a hung clone would outlive
        the Ctrl-C that `run` and `serve` take for "finish the pass, then stop")."""
        proc = self.proc
        end_tree(proc)
        try:
            proc.communicate(timeout=grace)
        except subprocess.TimeoutExpired:
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            proc.wait()


def timed_out(args: Sequence[str]) -> str:
    """What a git stopped at its deadline says: which command, the limit and how to raise it,
    and the likely cause."""
    return (f"git {_verb(args)} did not finish within {git_timeout():g} s and was stopped "
            f"({TIMEOUT_VARIABLE} sets the limit): a remote that accepted the connection but "
            "does not answer (a firewall dropping packets, a hung server or proxy), or a "
            "repository far larger than expected")


def _verb(args: Sequence[str]) -> str:
    """The git command ``args`` run, past git's own options (``-c NAME=VALUE``,
    ``--literal-pathspecs``): ``git -c … fetch`` timed out is said as ``git fetch``."""
    at = 0
    while at < len(args) and args[at].startswith("-"):
        at += 2 if args[at] in ("-c", "-C") else 1
    return args[at] if at < len(args) else ""


class Git:
    """git in one directory, with gitscale's environment (identity, credentials, dates)."""

    def __init__(self, cwd: Path, env: Mapping[str, str] | None = None, *,
                 promisor: str | None = None) -> None:
        self.cwd = cwd
        self.env = dict(env or {})
        # a partial clone: the remote that holds the blobs this one was cloned without
        self.promisor = promisor

    def environment(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment every git call here gets (identity, credentials, no GIT_DIR)."""
        return {**no_git_env(os.environ), **git_env(), **self.env, **(extra or {})}

    def run(self, *args: str, check: bool = True, extra_env: Mapping[str, str] | None = None,
            input: str | None = None) -> Result:
        return self._start(args, extra_env, input).wait(check=check)

    def out(self, *args: str) -> str:
        return self.run(*args).stdout.strip()

    def records(self, *args: str, separator: str) -> Iterator[str]:
        """``run``'s output as it comes, cut at ``separator``: a long ``git log`` is shown
        while git is still walking it."""
        for block in self.blocks(*args, separator=separator):
            *complete, rest = block.split(separator)
            yield from complete
            if rest:  # only the last block has anything after its last separator
                yield rest

    def blocks(self, *args: str, separator: str) -> Iterator[str]:
        """``run``'s output as it comes, in blocks of whole records: each block ends with
        ``separator`` but the last, which is what follows the last separator (if anything). A
        reader that walks a block itself spares a string per record."""
        env = self.environment()
        # stderr goes to a file, not a pipe: read only after stdout, a pipe git filled past
        # its 64 KiB would block git, and with it this reader.
        timeout = git_timeout()
        with tempfile.TemporaryFile() as stderr:
            with _starting(args, self.cwd):
                proc = subprocess.Popen(["git", *args], cwd=self.cwd, env=env,
                                        stdout=subprocess.PIPE, stderr=stderr, text=True,
                                        errors="replace")
            assert proc.stdout is not None
            # the deadline came: git and its helpers were ended (the time the reader holds a
            # block is not git's: ``ReadDeadline``)
            deadline = ReadDeadline(timeout, lambda: end_tree(proc))
            try:
                pending = ""
                while chunk := proc.stdout.read(65536):
                    pending += chunk
                    cut = pending.rfind(separator) + len(separator)
                    if cut >= len(separator):
                        deadline.hold()
                        yield pending[:cut]
                        deadline.resume()
                        pending = pending[cut:]
                if pending:
                    deadline.hold()
                    yield pending
            finally:
                deadline.cancel()
                proc.stdout.close()
                if proc.poll() is None:
                    proc.kill()  # the reader stopped early (a closed pipe, an exception)
                code = proc.wait()
            stderr.seek(0)
            error = stderr.read().decode(errors="replace")
        if deadline.fired:
            raise GitError(timed_out(args))
        if code != 0:
            raise GitError(describe_failure(args, Result("", error, code)))

    def start(self, *args: str) -> "Started":
        """``run``, started in the background: the caller goes on while git works, and
        ``Started.wait`` gives what ``run`` would have returned (or raised)."""
        return self._start(args)

    def _start(self, args: Sequence[str], extra_env: Mapping[str, str] | None = None,
               input: str | bytes | None = None, *, text: bool = True) -> "Started":
        env = self.environment(extra_env)
        deadline = time.monotonic() + git_timeout()
        stopping = stop_deadline() if _verb(args) in REMOTE_VERBS else None
        if stopping is not None and stopping.passed():  # (past it: not started at all)
            raise GitStopped(stopping.stopped(_verb(args)), _verb(args))
        decoding: dict[str, Any] = {"text": True, "errors": "replace"} if text else {}
        with _starting(args, self.cwd):
            proc = subprocess.Popen(["git", *args], cwd=self.cwd, env=env,
                                    stdin=subprocess.PIPE if input is not None else None,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, **decoding)
        return Started(args, proc, deadline, input, stopping)

    def run_bytes(self, *args: str, input: bytes | None = None) -> bytes:
        """``run`` for binary input and output (file contents, NUL-separated listings)."""
        stdout, stderr, code = self._start(args, input=input, text=False).finish()
        if code != 0:
            result = Result(stdout.decode(errors="replace"), stderr.decode(errors="replace"),
                            code)
            raise GitError(describe_failure(args, result))
        return stdout  # type: ignore[no-any-return]

    # -- reading -------------------------------------------------------------------------
    def head(self) -> str:
        return self.out("rev-parse", "HEAD")

    def born_head(self) -> str | None:
        """The commit HEAD names (``head``); None in a repository not yet committed to."""
        result = self.run("rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False)
        return (result.stdout.strip() or None) if result.code == 0 else None

    def has_ref(self, ref: str) -> bool:
        """Does this repository hold ``ref`` (``refs/remotes/origin/main``)? No network."""
        return self.run("rev-parse", "--verify", "--quiet", ref, check=False).code == 0

    def current_branch(self) -> str | None:
        result = self.run("symbolic-ref", "--quiet", "--short", "HEAD", check=False)
        return result.stdout.strip() or None

    def upstream(self, branch: str) -> tuple[str, str] | None:
        """(remote name, remote branch) that ``branch`` tracks, if any.

        Both settings from one ``git config --list`` (one process, where ``git config KEY``
        twice was two): it lists every scope, includes followed, in the order git reads them,
        section and key names in lower case and the branch's name as written, so the last
        line of a key is the value ``git config KEY`` gives. A key without ``=`` (no value)
        is read as empty, as ``git config KEY`` prints it."""
        listed = self.run("config", "--null", "--list", check=False)
        wanted = {f"branch.{branch}.remote": "", f"branch.{branch}.merge": ""}
        for entry in listed.stdout.split("\0") if listed.code == 0 else ():
            key, _, value = entry.partition("\n")
            if key in wanted:
                wanted[key] = value
        remote, merge = (wanted[key].strip() for key in wanted)
        if not remote or remote == "." or not merge:
            return None
        return remote, merge.removeprefix("refs/heads/")

    def remote_heads(self, remote: str) -> list[str]:
        """The branches ``remote`` has (one round trip, refs only)."""
        check_token()
        out = self.out("ls-remote", "--heads", remote)
        return [line.split("\trefs/heads/", 1)[1] for line in out.splitlines()
                if "\trefs/heads/" in line]

    def remote_url(self, remote: str) -> str | None:
        result = self.run("remote", "get-url", remote, check=False)
        return result.stdout.strip() or None

    def commit_facts(self, rev: str) -> tuple[str, str]:
        """(committer date in strict ISO 8601, subject) of ``rev``."""
        date, _, subject = self.out("show", "-s", "--format=%cI%n%s", rev).partition("\n")
        return date, subject

    def dirty_tracked(self) -> list[str]:
        out = self.run("status", "--porcelain", "--untracked-files=no").stdout
        return [line[3:] for line in out.splitlines() if line.strip()]

    def is_ancestor(self, older: str, newer: str) -> bool:
        return self.run("merge-base", "--is-ancestor", older, newer, check=False).code == 0

    def git_path(self, name: str) -> Path:
        """Where ``name`` lives in this checkout's git directory (a worktree has its own)."""
        return self.git_paths(name)[0]

    def git_paths(self, *names: str) -> list[Path]:
        """``git_path`` of each of ``names``, in one git process."""
        args = [arg for name in names for arg in ("--git-path", name)]
        return [self.cwd / line for line in self.out("rev-parse", *args).split("\n")]

    def messages(self, revisions: str, limit: int) -> list[tuple[str, str]]:
        """(commit, message) of at most ``limit`` commits in ``revisions`` (``A..B``)."""
        out = self.run("log", f"--max-count={limit}", "--format=%H%x1f%B%x1e", revisions).stdout
        found = []
        for record in out.split("\x1e"):
            sha, sep, message = record.strip("\n").partition("\x1f")
            if sep:
                found.append((sha, message))
        return found

    def blob(self, spec: str) -> bytes | None:
        """The bytes of ``spec`` (``:path`` in the index, ``REV:path`` in a commit), or None.
        By the deadline too: in a partial clone git fetches a blob it lacks from the remote."""
        stdout, _, code = self._start(("show", spec), text=False).finish()
        return stdout if code == 0 else None

    def entry(self, rev: str, path: str) -> tuple[str, bytes | None] | None:
        """``path`` in ``rev`` as git keeps it: its mode (``100644``, ``100755``; ``120000`` a
        symlink, ``040000`` a folder) and a file's bytes (None for the others); None when
        ``rev`` has no such path. A path through a symlink or a folder of ``rev`` has none."""
        listed = self.run_bytes("ls-tree", "-z", rev, "--", path).split(b"\0", 1)[0]
        meta, tab, name = listed.partition(b"\t")
        if not tab or name.decode(errors="replace") != path:
            return None
        mode, kind, oid = meta.decode().split()
        return mode, self.run_bytes("cat-file", "blob", oid) if kind == "blob" and \
            mode != "120000" else None

    def parents(self, rev: str) -> list[str]:
        return self.out("rev-list", "--parents", "-n", "1", rev).split()[1:]

    def restore(self, paths: Sequence[str]) -> None:
        """Put ``paths`` back as HEAD has them, in the index and the work tree (a path HEAD
        does not have is removed from both)."""
        for path in paths:
            if self.run("cat-file", "-e", f"HEAD:{path}", check=False).code == 0:
                self.run("checkout", "--quiet", "HEAD", "--", path)
            else:
                self.run("rm", "--quiet", "--cached", "--ignore-unmatch", "--", path)
                (self.cwd / path).unlink(missing_ok=True)

    def missing_blobs(self, paths: Sequence[str], rev: str = "HEAD") -> set[str]:
        """The blob ids of ``paths`` in ``rev`` that this (partial) clone does not hold. Asking
        for them any other way (``cat-file``) would fetch each of them."""
        # a tree, not the commit: a commit that leaves these paths as its parent had them
        # would be simplified away, and with it their objects
        listing = "\n".join([f"{rev}^{{tree}}", "--", *paths]) + "\n"
        out = self.run("--literal-pathspecs", "rev-list", "--objects", "--missing=print",
                       "--no-walk", "--stdin", input=listing).stdout
        return {line[1:].strip() for line in out.splitlines() if line.startswith("?")}

    def fetch_objects(self, ids: Sequence[str]) -> None:
        """Partial clone: fetch ``ids`` from the promisor remote in one round trip, the way git
        fetches a missing object itself (no negotiation, no refs), but all at once: git alone
        would start a fetch per object the first time each is read."""
        if not ids or self.promisor is None:
            return
        check_token()
        self.run("-c", "fetch.negotiationAlgorithm=noop", "-c", "maintenance.auto=false",
                 "fetch", "--quiet", self.promisor,
                 "--no-tags", "--no-write-fetch-head", "--recurse-submodules=no",
                 "--filter=blob:none", "--stdin", input="\n".join(ids) + "\n")

    # -- writing -------------------------------------------------------------------------
    def fetch(self, remote: str, branch: str, depth: int | None = None) -> str:
        return self._fetch(remote, branch, depth)[0]

    def fetch_with_head(self, remote: str, branch: str) -> tuple[str, str]:
        """``fetch``'s tip and HEAD, read by one ``rev-parse`` (the fetch writes FETCH_HEAD
        alone: HEAD is the same before and after it)."""
        tip, head = self._fetch(remote, branch, None, "HEAD")
        return tip, head

    def _fetch(self, remote: str, branch: str, depth: int | None, *revs: str) -> list[str]:
        check_token()
        args = ["fetch", "--quiet", "--no-tags", remote, f"refs/heads/{branch}"]
        if depth:
            args[1:1] = [f"--depth={depth}"]
        self.run(*args)
        return self.out("rev-parse", "FETCH_HEAD", *revs).split("\n")

    def deepen_since(self, remote: str, branch: str, since: str) -> None:
        """A shallow clone: fetch the commits of ``branch`` from ``since`` (a git date) on, as
        the clone fetches (a partial clone keeps its filter). HEAD does not move."""
        check_token()
        self.run("fetch", "--quiet", "--no-tags", "--no-write-fetch-head",
                 f"--shallow-since={since}", remote, f"refs/heads/{branch}")

    def commit_time(self, rev: str) -> float:
        """The committer time of ``rev`` (POSIX seconds)."""
        return float(self.out("show", "-s", "--format=%ct", rev))

    def is_shallow(self) -> bool:
        return self.out("rev-parse", "--is-shallow-repository") == "true"

    def shallow_cut(self) -> float | None:
        """A shallow repository: the committer time (POSIX seconds) of the newest commit its
        history is cut at (the commits before it are not here); None when it is whole. Read
        from the ``shallow`` file's commits: no walk of the history."""
        if not self.is_shallow():
            return None
        try:
            cut = self.git_path("shallow").read_text().split()
        except OSError:
            return None
        if not cut:
            return None
        times = self.out("log", "--no-walk", "--format=%ct", *cut).split()
        return max((float(t) for t in times), default=None)

    def reset_hard(self, rev: str) -> None:
        self.run("reset", "--quiet", "--hard", rev)

    def commit(self, message: str, paths: Sequence[str], date: str | None = None) -> str:
        """Commit ``paths`` as they are in the working tree (none: the index as it is).
        ``--force``: each path is one gitscale decided to write, so a ``.gitignore`` that
        matches it (a repo that ignores ``.gitscale/``) must not make the commit fail."""
        if paths:
            self.run("add", "--force", "--", *paths)
        # as seconds since the epoch: git parses an RFC 3339 text only up to 2099, while
        # `--now` takes years up to 9000 (`timeutil.LAST_YEAR`)
        raw = None if date is None else raw_date(date)
        when = date if raw is None else f"@{raw}"
        dates = {"GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when} if when else {}
        self.run("commit", "--quiet", "--no-verify", "--file=-", input=message, extra_env=dates)
        return self.head()

    def push(self, remote: str, branch: str) -> None:
        """Push HEAD to ``remote``'s ``branch``. Raises PushRaced or PushRejected."""
        check_token()
        result = self.run("push", "--porcelain", remote, f"HEAD:refs/heads/{branch}",
                          check=False)
        if result.code == 0:
            return
        raise push_failure(remote, branch, result)


def raw_date(date: str) -> str | None:
    """``2026-11-21T09:00:00Z`` → ``1795251600 +0000``: git's raw date, which it takes for any
    year (`fast-import --date-format=raw` as is, `git commit` after an ``@``); None when
    ``date`` is not an RFC 3339 time with an offset."""
    try:
        value = datetime.fromisoformat(date)
    except ValueError:
        return None
    offset = value.utcoffset()
    if offset is None:
        return None
    minutes = int(offset.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    return f"{int(value.timestamp())} {sign}{abs(minutes) // 60:02d}{abs(minutes) % 60:02d}"


def version() -> str:
    """``git version 2.39.5``, for crash reports; never raises."""
    try:
        out = subprocess.run(["git", "--version"], capture_output=True, text=True, timeout=5,
                             check=False, env={**no_git_env(os.environ), "LC_ALL": "C"}
                             ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "git: not found"
    return out or "git: unknown version"


@lru_cache(maxsize=1)
def filters_by_date() -> bool:
    """Has this git ``log --since-as-filter`` (2.38+)? ``--since`` stops the walk at the
    first commit older than the date, so one commit with a clock in the past hides every
    commit behind it; the filter looks at every commit."""
    found = re.match(r"git version (\d+)\.(\d+)", version())
    return found is not None and (int(found[1]), int(found[2])) >= (2, 38)


def is_bare(path: Path) -> bool:
    result = Git(path).run("rev-parse", "--is-bare-repository", check=False)
    return result.code == 0 and result.stdout.strip() == "true"


def is_work_tree(path: Path) -> bool:
    top = work_tree_top(path)
    return top is not None and top == path.resolve()


def work_tree_top(path: Path) -> Path | None:
    """The top of the checkout ``path`` is in (``path`` itself or a folder above), or None."""
    result = Git(path).run("rev-parse", "--show-toplevel", check=False)
    return Path(result.stdout.strip()).resolve() if result.code == 0 else None
