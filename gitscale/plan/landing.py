"""Write, validate, commit and push one pass, retrying when another writer got there first.

The pass decides (``compute_plan``) and this applies what it decided, once: first what the state
cache learnt (``Plan.cache_writes``, when given the ``cache``) — once the plan has passed its
checks (placeholders, schema validation): a pass refused teaches the cache nothing —, then the
commit and the push.

On a non-fast-forward rejection we fetch, reset to the new head and recompute the plan from the
*same* demand (the caller's ``make_plan`` closes over it), so the commit that lands always
describes the tree it lands on. A rejection by a hook or branch protection is final.

Once a commit is pushed — and only then — the ``notify:`` targets of the config are told, so the
GitOps engine syncs now rather than at its next poll. Every command that lands (reconcile, run,
serve, drain) goes through here; a failed notification is logged and never fails the pass.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, replace
from typing import Callable

from gitscale.redact import redact
from gitscale.repo import git as git
from gitscale.repo.clone import is_url
from gitscale.record.commitmsg import SetLine, format_message
from gitscale.plan.cache import StateCache
from gitscale.plan.engine import Plan, SetChange
from gitscale.errors import GitError, PushRaced, ValidationError, WriteError
from gitscale.notify.failures import NotifyStreaks
from gitscale.repo.deadline import stop_deadline
from gitscale.repo.fastimport import ask_commit_config, commit_files
from gitscale.repo.index import files_containing, stage_files
from gitscale.repo.workspace import Workspace, write_atomic
from gitscale.yamlio.placeholders import PLACEHOLDER, placeholder_problems

# Lost push races are retried until this many seconds have passed since the first attempt (a
# deadline, not a count: with many writers on one branch a run may lose many races in a row,
# and each attempt costs a fetch, a commit and a push).
DEADLINE = 120.0
# How long a pass waits for another process's pass in the same checkout: longer than that
# pass may take (its deadline of push races, besides reading demand and the push itself)
HOLD_WAIT = 2 * DEADLINE
BACKOFF = 0.5  # seconds: the first backoff's ceiling, doubled per attempt up to BACKOFF_CAP
BACKOFF_CAP = 4.0
PRIORITY_AFTER = 30.0  # seconds: a run waiting this long retries at once


def backoff(attempt: int, waited: float) -> float:
    """Seconds to wait after losing race number ``attempt``, ``waited`` seconds into the run.

    Full jitter, exponential, capped — and shrinking as the run ages, to nothing after
    PRIORITY_AFTER: newcomers stand back, the writers that have waited longest retry first.
    With plain exponential backoff the oldest runs waited longest between tries and kept losing
    to newcomers: a lottery whose tail ran past any deadline (16 writers x 20 rounds on a loaded
    2-core machine: 6 of 320 runs gave up at 60 s)."""
    ceiling = min(BACKOFF_CAP, BACKOFF * 2 ** (attempt - 1))
    return random.uniform(0, ceiling * max(0.0, 1 - waited / PRIORITY_AFTER))


@dataclass(frozen=True)
class Landed:
    plan: Plan
    commit: str | None
    pushed: bool
    attempts: int
    notified: tuple[str, ...] = ()  # the notify targets that accepted (kind and host)


def land(ws: Workspace, make_plan: Callable[[], Plan], *, cache: StateCache | None = None,
         date: str | None = None, sleep: Callable[[float], None] = time.sleep,
         clock: Callable[[], float] = time.monotonic, deadline: float = DEADLINE,
         say: Callable[[str], None] | None = None,
         told: NotifyStreaks | None = None) -> Landed:
    """Commit and push what ``make_plan`` decides. Each plan's cache writes go to ``cache`` once
    its checks pass (a refused pass, like one that failed to decide, leaves the cache as it
    found it), before the commit: what a pass learnt holds whether or not its commit lands (it
    depends on file contents only), and a retry after a lost race reads less.

    In a checkout the whole pass holds it (``Workspace.exclusive``): another gitscale process
    writing there is waited for, up to twice ``deadline`` (what a holder's pass may take), and
    ``say`` is told (default: stderr). The notify targets are told after the hold is let go:
    another process's pass need not wait for a GitOps engine's answer. ``told``: a
    long-running process's notify failures, said once per streak (``notify.failures``)."""
    stopping = stop_deadline()  # (a stopping process waits no longer than its deadline allows)
    left = stopping.left() if stopping is not None else None
    wait = 2 * deadline if left is None else min(2 * deadline, left)
    with ws.exclusive(wait, say or say_on_stderr):
        landed = _land(ws, make_plan, cache, date, sleep, clock, deadline)
    if landed.pushed and landed.commit is not None:
        landed = replace(landed, notified=notify(ws, landed.plan, landed.commit, told))
    return landed


def say_on_stderr(line: str) -> None:
    """What a pass says while it waits (another process holds the checkout): on stderr."""
    import click

    click.echo(line, err=True)


def _land(ws: Workspace, make_plan: Callable[[], Plan], cache: StateCache | None,
          date: str | None, sleep: Callable[[float], None], clock: Callable[[], float],
          deadline: float) -> Landed:
    ws.prepare_write()
    started = clock()
    attempt = 0
    while True:
        attempt += 1
        plan = make_plan()
        refuse_unfinished(plan)
        # a sparse clone commits with fast-import once git's configuration allows: asked
        # while the edits are validated
        asked = ask_commit_config(ws.git) if plan.changed_paths and ws.sparse else None
        try:
            if plan.changed_paths:
                check_plan(ws, plan)
            if cache is not None:
                cache.apply(plan.cache_writes)
            if not plan.changed_paths:
                return Landed(plan, None, False, attempt)
            sha = _commit(ws, plan, date, asked)
        finally:
            if asked is not None and asked.proc.returncode is None:
                asked.stop()  # not taken: the pass stopped before its commit
        if ws.remote is None:
            ws.end_write()
            return Landed(plan, sha, False, attempt)
        try:
            ws.push()
        except PushRaced:
            pass
        except GitError:
            # Refused (a hook, protection) or unreachable: take our commit back so the checkout
            # is as we found it and the next run starts cleanly. Nothing else can be lost: the
            # tree was clean and the commit was ours (prepare_write checked both).
            _take_back(ws, plan)
            raise
        else:
            ws.end_write()
            return Landed(plan, sha, True, attempt)
        wait = backoff(attempt, clock() - started)
        if clock() - started + wait > deadline:
            _take_back(ws, plan)
            raise GitError(f"gave up after {attempt} attempts in {clock() - started:.0f} s: "
                           f"{ws.label} kept moving (another writer?); nothing was pushed")
        sleep(wait)
        try:
            ws.sync()
        except GitError:
            # The fetch failed: our unpushed commit must not stay, or every later run in this
            # checkout refuses ("commits that are not on origin") until someone resets by hand.
            _take_back(ws, plan)
            raise


def _take_back(ws: Workspace, plan: Plan) -> None:
    ws.git.reset_hard(plan.base)
    ws.end_write()


def notify(ws: Workspace, plan: Plan, sha: str,
           told: NotifyStreaks | None = None) -> tuple[str, ...]:
    """Tell the config's notify targets about the commit just pushed; never raises."""
    if not plan.notify or ws.remote_branch is None:
        return ()
    from gitscale.notify.payloads import Pushed  # only now: httpx is a slow import
    from gitscale.notify.send import notify_all
    from gitscale.config.notify_targets import without_credentials

    try:
        date, subject = ws.git.commit_facts(sha)
        url = ws.label if ws.mode == "clone" else ws.git.remote_url(ws.remote or "origin")
    except GitError:
        date, subject, url = "", "", None
    old = {path: texts[0] for path, texts in plan.files.items()}
    pushed = Pushed(
        repo_url=without_credentials(url) if url and is_url(url) else None,
        branch=ws.remote_branch, before=plan.base, after=sha, subject=subject, time=date,
        added=tuple(p for p in plan.changed_paths if not old[p]),
        modified=tuple(p for p in plan.changed_paths if old[p]),
        sets=tuple({"name": c.name, "replicas": c.decision.replicas,
                    "previous": c.before.replicas, "patch": c.decision.patch_id,
                    "reason": c.decision.reason.value} for c in plan.changes))
    return notify_all(plan.notify, pushed, told=told)


def refuse_unfinished(plan: Plan) -> None:
    """Refuse a config that still holds ``init``'s ``CHANGE-ME`` (whether or not a set
    changes), or a manifest this pass would write that does. Lines are those of the files as
    they are in the repo: gitscale's edit never writes a placeholder, only moves lines."""
    unfinished = plan.placeholders + [p for path in plan.changed_paths
                                      for p in placeholder_problems(path, plan.files[path][0])]
    if unfinished:
        raise ValidationError(
            f"refusing to commit: {PLACEHOLDER} values that `gitscale init` could not fill in "
            "are still there (nothing was written):\n  " + "\n  ".join(unfinished))


def check_plan(ws: Workspace, plan: Plan) -> None:
    """Refuse to commit a manifest that fails schema validation."""
    problems = plan_problems(ws, plan)
    if problems:
        raise ValidationError("refusing to commit invalid manifests (nothing was written):\n  "
                              + "\n  ".join(problems))


def plan_problems(ws: Workspace, plan: Plan) -> list[str]:
    """What schema validation says of the files ``plan`` edits, as they would be committed
    (`plan` shows them: `reconcile` refuses such a pass)."""
    if not plan.changed_paths:
        return []
    # imported here: only a pass that edits a file validates, and the schemas (the RunnerSet
    # CRD, built from the controller's platform registry) cost ~25 ms to import
    from gitscale.manifest.validate import Validation

    validation = Validation(ws.root, lambda: ws.git.out("ls-files").splitlines(),
                            lambda: files_containing(ws.git, ws.root, "CustomResourceDefinition",
                                                     sparse=ws.sparse))
    problems: list[str] = []
    by_path: dict[str, list[SetChange]] = {}  # (not a scan of every change per file)
    for change in plan.changes:
        by_path.setdefault(change.path, []).append(change)
    for path, (old, new) in plan.files.items():
        # gitscale's own bookkeeping (the reservations file) is not a manifest
        if path in by_path:
            # lines named are those of the file in the repo: the edit is never written
            problems += validation.check(path, new, [c.new_object for c in by_path[path]],
                                         lines_in=old or None).problems
    return problems


def set_lines(changes: list[SetChange]) -> list[SetLine]:
    return [SetLine(
        name=c.name, replicas=c.decision.replicas, previous=c.before.replicas,
        patch=c.decision.patch_id, queued=c.demand.queued if c.demand else None,
        running=c.demand.running if c.demand else None, reason=c.decision.reason.value,
        detail=c.decision.detail) for c in changes]


def _commit(ws: Workspace, plan: Plan, date: str | None,
            config: git.Started | None = None) -> str:
    paths = plan.changed_paths
    if ws.sparse:
        return _commit_index(ws, plan, date, config)
    existed = {path: (ws.root / path).exists() for path in paths}
    # Recorded first: if this process is killed before the commit, the next run knows these
    # edits for its own and discards them (Workspace.prepare_write).
    ws.begin_write({path: plan.files[path] for path in paths}, plan.base)
    written = 0  # paths[:written] are edited in the work tree
    writing: str | None = None
    try:
        for path in paths:
            writing = path
            write_atomic(ws.root / path, plan.files[path][1].encode("utf-8"))
            written += 1
        writing = None
        message = format_message(set_lines(plan.changes), plan.base, plan.events,
                                 plan.notes, paths)
        sha = ws.git.commit(message, paths, date)
    except BaseException as exc:  # (Ctrl-C too: the files are put back before exit 130)
        if ws.git.run("rev-parse", "HEAD", check=False).stdout.strip() != plan.base:
            # Interrupted after git made the commit: it is the recorded edit, which the next
            # run recognises as its own and takes back (``prepare_write``); the files are not
            # put back under it (that would leave a reversed edit over an unpushed commit).
            raise
        # Nothing half-done is left behind: put the files back as they were. What cannot be
        # put back (the disk is full) keeps the record, so the next run discards it.
        # A write that failed left its file as it was (write_atomic: whole or not at all); one
        # interrupted (Ctrl-C) may have ended just before ``written`` counted it.
        failed = writing if isinstance(exc, OSError) else None
        left = _put_back(ws, plan, paths[:written + (failed is None)], existed)
        reset = ws.git.run("reset", "--quiet", "--", *paths, check=False)
        if not left and reset.code == 0:
            ws.end_write()
        if isinstance(exc, OSError):  # a full disk, a read-only mount: not a bug (exit 70)
            raise WriteError(
                f"{ws.label}: cannot write {failed or 'the edit'}: "
                f"{exc.strerror or type(exc).__name__}; "
                "nothing was committed, and " + (
                    "the files are as they were" if not left else
                    f"{', '.join(left)} could not be put back: the next gitscale run in this "
                    "checkout discards the edit")) from None
        raise
    return sha


def _put_back(ws: Workspace, plan: Plan, paths: list[str],
              existed: dict[str, bool]) -> list[str]:
    """Put ``paths`` back as they were before the pass; the ones that could not be."""
    left = []
    for path in paths:
        try:
            if existed[path]:
                write_atomic(ws.root / path, plan.files[path][0].encode("utf-8"))
            else:
                (ws.root / path).unlink(missing_ok=True)
        except OSError:
            left.append(path)
    return left


def _commit_index(ws: Workspace, plan: Plan, date: str | None,
                  config: git.Started | None = None) -> str:
    """A sparse clone: the edited manifests are committed from memory, never onto disk; in
    one ``fast-import`` (``repo.fastimport``), or as blobs staged in the index when the config
    asks ``git commit`` for more (signing, hooks). ``config``: ``ask_commit_config``'s read,
    started while the pass validated its edits."""
    paths = plan.changed_paths
    message = format_message(set_lines(plan.changes), plan.base, plan.events, plan.notes,
                             paths)
    contents = {path: plan.files[path][1].encode("utf-8") for path in paths}
    sha = commit_files(ws.git, {path: (plan.modes.get(path, "100644"), data)
                                for path, data in contents.items()},
                       message, parent=plan.base, branch=ws.branch, date=date,
                       config=config)
    if sha is not None:
        return sha
    try:
        stage_files(ws.git, contents, {path: plan.modes[path] for path in paths
                                       if path in plan.modes})
        return ws.git.commit(message, [], date)
    except Exception:
        ws.git.run("reset", "--quiet", "--", *paths, check=False)
        raise


def describe_landing(landed: Landed, ws: Workspace) -> str:
    recovered = "".join(f"discarded the leftovers of an interrupted gitscale run: {what}\n"
                        for what in ws.recovered)
    return recovered + _describe(landed, ws)


def _describe(landed: Landed, ws: Workspace) -> str:
    if landed.commit is None:
        return "no change: nothing to commit"
    short = landed.commit[:12]
    retries = landed.attempts - 1
    retried = f" after {retries} {'retry' if retries == 1 else 'retries'}" if retries else ""
    if landed.pushed:
        where = f"{ws.remote}/{ws.remote_branch}" if ws.mode == "checkout" else \
            f"{redact(ws.label)} ({ws.remote_branch})"
        told = f"; notified {', '.join(landed.notified)}" if landed.notified else ""
        return f"committed {short} and pushed to {where}{retried}{told}"
    return f"committed {short} on {ws.branch} (not pushed: {ws.unpushed})"
