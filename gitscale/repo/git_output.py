"""What git said, read: a command's result, a failure described for people (git's words,
credentials redacted, with a hint on what to do about a lock file left in place, a branch gone
from the remote, a server that wanted credentials), and a failed push told apart as a lost race
or a refusal. No git is run here: ``gitscale.repo.git`` runs it and hands over what it said."""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from gitscale.errors import GitError, PushRaced, PushRejected
from gitscale.redact import redact
from gitscale.repo.git_env import auth_hint
from gitscale.timeutil import format_time

@dataclass(frozen=True)
class Result:
    stdout: str
    stderr: str
    code: int


# receive-pack's status when the ref moved between its advertisement and the update ("failed to
# update ref"; older git: "failed to lock"), and hosted git's wording of the same (GitHub:
# "cannot lock ref 'refs/heads/main': is at X but expected Y"). A lost race, not a refusal.
_LOST_RACE = re.compile(r"^(failed to update ref|failed to lock|cannot lock ref\b)")


def push_failure(remote: str, branch: str, result: Result) -> GitError:
    """What a failed ``git push --porcelain`` means: ``PushRaced`` (the branch moved: try
    again from its new tip), ``PushRejected`` (a hook or branch protection said no: not
    retried), else the ``GitError`` its output describes."""
    text = result.stdout + result.stderr
    if "[remote rejected]" in text:
        reason = re.search(r"\[remote rejected\]\s*\(([^)]*)\)", text)
        if reason and _LOST_RACE.search(reason.group(1)):
            # Another push moved the ref after the server advertised it to us: a race lost
            # on the server side, not a refusal (a declining hook says "hook declined").
            return PushRaced("the branch moved while we were pushing (the remote could not "
                             "update the ref: another writer got there first)")
        hook_says = [line for line in result.stderr.splitlines() if line.startswith("remote:")]
        return PushRejected(
            "the remote refused the push"
            + (f" ({reason.group(1)})" if reason else "")
            + f" — branch protection or a server hook{PushRejected.FINAL}\n"
            + redact("\n".join(hook_says)).strip())
    if "[rejected]" in text and re.search(r"fetch first|non-fast-forward|stale info", text):
        return PushRaced("the branch moved while we were working (non-fast-forward)")
    return GitError(describe_failure(("push", remote, branch), result))


def refused_push_remedy(who: str, branch: str) -> str:
    """What a person can change when the remote refuses every push of ``who`` (`run`,
    `serve`) to ``branch``: one wording for both loops."""
    return (f"let the identity {who} pushes as (GITSCALE_GIT_TOKEN's user, the deploy key) "
            f"push to {branch} (a bypass of the branch protection rule or hook), or give "
            f"{who} a branch it may push to (--branch)")


def describe_failure(args: Sequence[str], result: Result) -> str:
    output = (result.stderr or result.stdout).strip()
    lines = output.splitlines()
    locked = _LOCKED.search(output)
    if locked:  # git's paragraph on what may hold it, replaced by what to do (_lock_hint)
        lines = [line for line in lines if line.startswith(("fatal:", "error:"))]
    if len(lines) > 20:
        lines = lines[:20] + [f"... ({len(lines) - 20} more lines)"]
    return redact(f"git {' '.join(args)} failed (exit {result.code}):\n" + "\n".join(lines)
                  + auth_hint(output) + _branch_hint(output)
                  + (_lock_hint(Path(locked.group(1))) if locked else ""))


# git's words for a lock file it found in place ("Unable to create '…/index.lock': File
# exists."): another git at work in the repository, or one killed that left it there
_LOCKED = re.compile(r"Unable to create '([^']+\.lock)': File exists")


def _lock_hint(lock: Path) -> str:
    """What to do about a lock file git found in place. gitscale never removes one: a git
    process of someone else's may be at work (CHANGELOG, Known limits)."""
    try:
        made = lock.stat().st_mtime if lock.is_absolute() else None
    except OSError:
        return "\nhint: the git process that held it has finished since: try again"
    if made is None:
        return ("\nhint: a git process still works in this repository, or one was killed "
                "before it could remove it; if none runs there, remove it; gitscale does not")
    age = max(0.0, time.time() - made)
    when = format_time(datetime.fromtimestamp(made, timezone.utc))
    return (f"\nhint: it was made at {when} ({age / 60:.0f} min ago) by a git process that "
            "still works in this repository, or that was killed before it could remove it"
            f"\nhint: if no git process runs there, remove it (rm {lock}); gitscale does not")


def missing_branch(output: str) -> str | None:
    """The branch git's ``output`` says the remote does not have, if it says so."""
    gone = re.search(r"couldn't find remote ref refs/heads/(\S+)"
                     r"|Remote branch (\S+) not found in upstream", output)
    return None if gone is None else gone.group(1) or gone.group(2)


def _branch_hint(output: str) -> str:
    """Say what git means when the branch asked for is not on the remote (deleted there)."""
    gone = missing_branch(output)
    if gone is None:
        return ""
    return (f"\nhint: the remote has no branch {gone} (deleted or "
            "renamed there?): restore it, or pass --branch with the one gitscale should "
            "work on")
