"""The RunnerSet's status: counts, the last write fully applied, and kstatus conditions.

Conditions follow kstatus (what ``kubectl wait``, Flux and Argo CD read), each with the
``observedGeneration`` it was computed for, and ``status.observedGeneration`` says which
generation of the spec the status describes:

- ``Ready``: True when every slot the spec wants has a runner (pending ones count: they exist;
  a finished runner holding its slot until the next write counts too). False while the set is
  short, or a pass failed, with the reason: ``Creating``, ``CreateFailed``, ``QuotaExceeded``,
  ``Interrupted`` (the controller stopped before it was done), ``RunnersMissing`` (runners
  went away while the write was already applied, and their replacements are not made yet),
  ``RunnersUnschedulable`` (pending runners the scheduler has not placed for
  ``UNSCHEDULABLE_GRACE``: reported, not replaced, see ``unscheduled``), ``RunnersCannotStart``
  (pending runners whose container waits for a reason that does not clear by itself, in the
  kubelet's words: ``cannot_start``; failed after ``observe.STUCK_AFTER``), ``Backoff`` (failed
  runners wait to be replaced), ``ApplyFailed``, ``InvalidSpec``, ``CredentialsMissing`` (the
  credentials Secret or a key of it does not exist), ``CredentialsRefused`` (the platform
  answered 401/403), ``PlatformUnavailable`` (an outage: a 5xx, no answer, a rate limit, the
  Secret not read this time; and a set being deleted seen out without its platform)
  (``platform_reason``);
- ``Reconciling``: True while Ready is False and the controller keeps working on it;
- ``Stalled``: True when it cannot get there by itself: an invalid spec at once, any other
  failure (unschedulable runners, runners that cannot start, too) once Ready has been False for ``STALLED_AFTER`` (a
  progress deadline);
- ``RunnersFailing``: runners failing again and again (each replaced after its backoff);
- ``BusyKnown``: whether the platform says which runners run a job (GitHub's runner list,
  Buildkite's agents API), or the controller goes by the graceful-stop rule; each platform
  writes its own (``Kind.busy_known``).

A condition keeps its ``lastTransitionTime`` while its status stays the same, and the status is
written only when something in it changed.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gitscale.controller.decide import Phase, Refilled, Runner, Spec, Status, Write
from gitscale.controller.errors import ControllerError, CredentialsError, CredentialsMissing
from gitscale.timeutil import format_time, parse_time

READY, RECONCILING, STALLED, FAILING = "Ready", "Reconciling", "Stalled", "RunnersFailing"
BUSY = "BusyKnown"
STALLED_AFTER = timedelta(minutes=5)
UNSCHEDULABLE = "RunnersUnschedulable"
CANNOT_START = "RunnersCannotStart"
CREDENTIALS_MISSING, CREDENTIALS_REFUSED = "CredentialsMissing", "CredentialsRefused"
UNAVAILABLE = "PlatformUnavailable"
# How long a pending runner may stay unschedulable before Ready says so: a cluster autoscaler
# or Karpenter adding a node takes about a minute or two, and Ready must not flap on each.
UNSCHEDULABLE_GRACE = timedelta(minutes=2)
READY_MESSAGE_MAX = 1000  # characters of Ready's message (a problem's message is cut there)
COUNTS = ("replicas", "pending", "idle", "busy", "failed", "terminating")
KEPT = (*COUNTS, "observedPatchID", "appliedPatchID", "appliedEffectiveTime", "appliedReplicas",
        "refilled", "refilledPatchID", "refilledEffectiveTime", "observedGeneration")


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str


@dataclass(frozen=True)
class Problem:
    """What went wrong in a pass. ``person``: nothing changes until someone fixes the spec."""

    reason: str
    message: str
    person: bool = False


def platform_reason(exc: ControllerError) -> str:
    """Ready's reason for an error of the platform or of its credentials: a configuration to
    fix (the Secret or a key missing; credentials refused) is not an outage."""
    if isinstance(exc, CredentialsMissing):
        return CREDENTIALS_MISSING
    if isinstance(exc, CredentialsError):
        return CREDENTIALS_REFUSED
    return UNAVAILABLE


# What ``outage.py`` adds to a platform's failure: when the platform is asked again. It changes
# with every failure in a row, so one failure can reach a pass in two wordings — a call of this
# pass (``… (2 failure(s) in a row)``) and a refusal kept from an earlier pass (``… (1
# failure(s) in a row); creations failed…``): ``said_once`` sees them as one.
WAIT = re.compile(r"; (?P<platform>[A-Z][A-Za-z]*) is not asked again before (?P<again>\S+) "
                  r"\((?P<failures>[0-9]+) failure\(s\) in a row\)(?:: one request is trying it)?")


def not_asked(platform: str, again: str, failures: int) -> str:
    """The clause ``outage.py`` adds to a platform's failure (``WAIT`` reads it)."""
    return f"; {platform} is not asked again before {again} ({failures} failure(s) in a row)"


def said_once(errors: Iterable[str]) -> list[str]:
    """A pass's errors, each said once, in order: a message repeated (one cause met by every
    runner of the pass) or said within another (a cause, then what it kept from happening:
    ``A`` and ``3 runners not replaced (…): they could not be unregistered first (A)``, or
    ``A; creations failed 1 pass(es) in a row…``) is left out. For Ready's message and the
    Events, which show the first few: they must not be copies of one cause. A platform's
    failure said with two waits (``WAIT``) is one, said with the latest wait."""
    unique = list(dict.fromkeys(errors))
    bare = [WAIT.sub("", e) for e in unique]
    waits = [m for e in unique for m in WAIT.finditer(e)]
    latest = max(waits, key=lambda m: int(m["failures"])).group(0) if waits else ""
    kept = [e for i, e in enumerate(unique) if not any(
        j != i and bare[i] in bare[j] and (bare[i] != bare[j] or j < i)
        for j in range(len(unique)))]
    return [WAIT.sub(lambda m: latest, e) if latest else e for e in kept]


class Alike:
    """The errors of a pass's runners, each said once: messages that differ only by the runner
    they are about (its name, its platform id: ``create pod ns/rs-1a2b-0c3d4e: … timed out``
    for each of 300 runners) are one, the first, with how many more runners met it."""

    def __init__(self) -> None:
        self._first: dict[str, str] = {}  # the message without its runner → the first said
        self._count: Counter[str] = Counter()

    def add(self, message: str, name: str | None = None, runner_id: int | None = None) -> None:
        key = message.replace(name, "\0") if name else message
        if runner_id is not None:
            key = re.sub(rf"(?<![0-9]){runner_id}(?![0-9])", "\0", key)
        self._first.setdefault(key, message)
        self._count[key] += 1

    @property
    def folded(self) -> int:
        """Errors said within another's message (counted all the same: the metrics)."""
        return sum(self._count.values()) - len(self._count)

    def messages(self) -> list[str]:
        return [first if self._count[key] == 1 else f"{first} (and {self._count[key] - 1} more "
                f"runner{'s' if self._count[key] > 2 else ''} alike)"
                for key, first in self._first.items()]


@dataclass(frozen=True)
class Unscheduled:
    """The set's pending runners the scheduler could not place, at the end of a pass.

    ``count``: all of them (the metric); ``late``: those unschedulable for ``grace`` or more
    (what Ready reports), ``message`` the scheduler's word on the longest-waiting of those;
    ``wake_after``: seconds until the next one's grace runs out (a pass then, since an
    unschedulable pod may change no more), None when none is in its grace."""

    count: int = 0
    late: int = 0
    message: str = ""
    wake_after: float | None = None


def unscheduled(runners: Iterable[Runner], now: datetime,
                grace: timedelta = UNSCHEDULABLE_GRACE) -> Unscheduled:
    """Pure. Pass the runners left at the end of the pass (not those it removed). They are
    never replaced: a new pod would wait for the same node, and the slot is taken either way;
    a scale-down (patch 0) removes them first, before idle runners (``decide``). An
    unknown ``since`` counts as late (reported rather than hidden)."""
    stuck = sorted((r.unschedulable for r in runners
                    if r.phase is Phase.PENDING and r.unschedulable is not None),
                   key=lambda u: (u.since is not None, u.since or now))
    late = [u for u in stuck if u.since is None or now - u.since >= grace]
    waits = [(u.since + grace - now).total_seconds() for u in stuck
             if u.since is not None and now - u.since < grace]
    return Unscheduled(len(stuck), len(late), late[0].message if late else "",
                       max(min(waits), 0.0) if waits else None)


def cannot_start(runners: Iterable[Runner]) -> tuple[int, str]:
    """Pure. How many pending runners cannot start (``Runner.cannot_start``) and the kubelet's
    word on the first of them; (0, "") when none."""
    said = [r.cannot_start for r in runners
            if r.phase is Phase.PENDING and r.cannot_start is not None]
    return len(said), said[0] if said else ""


_UNAPPLIED_LEAD = "is not acted on as a write: patch "
# The notice at the end of Ready's message, as ``conditions`` appends it: taken off the last
# pass's message where it is carried over (``_still_not_starting``), or it is said twice.
_UNAPPLIED_SAID = re.compile(
    r"(?:; )?spec\.replicas \d+ " + re.escape(_UNAPPLIED_LEAD) + r".*\Z", re.DOTALL)


def unapplied(spec: Spec, applied: Write | None) -> str:
    """Pure. What to say of a count written by hand: ``spec.replicas`` differs from the count
    of the write last applied (``applied``, kept with ``decide.record``) while the gate is
    shut on that write — ``spec.patchID`` above 0 and ``spec.patchID``/``effectiveTime`` as
    recorded —, so the controller does not act on it (``decide.gate_open``: the gate is the
    contract, a count is no write). "" when there is nothing to say: the gate is open (a new
    write, patch 0: the count is applied), the count is the one applied, or the record has
    no count (none yet; one an older controller wrote) — never a guess. gitscale's own writes
    change the patch ID or the effectiveTime, so they never make one."""
    if (applied is None or applied.replicas is None or spec.patch_id == 0
            or not spec.write.same(applied) or spec.replicas == applied.replicas):
        return ""
    when = (f" (effectiveTime {format_time(applied.effective_time)})"
            if applied.effective_time is not None else "")
    said = (f"spec.replicas {spec.replicas} {_UNAPPLIED_LEAD}{applied.patch_id}{when} was "
            f"applied with {applied.replicas}, and a count written by hand that keeps "
            "spec.patchID and spec.effectiveTime is no new write: ")
    if spec.replicas < applied.replicas:  # (a patch above 0 removes no runner anyway)
        return said + (f"no runner is removed for it (those above {spec.replicas} go as their "
                       "jobs end); write it with spec.patchID: 0 to remove the idle ones now "
                       "(never a busy one)")
    # A shut gate still refills a slot with no runner (one lost from outside), up to
    # spec.replicas; a slot a finished runner holds waits for the next write.
    return said + ("only slots with no runner at all get one, not those finished runners hold "
                   "until the next write; write it with spec.patchID: 0 (or a new patch ID)")


def conditions(counts: Status | None, problem: Problem | None,
               failing: tuple[tuple[str, int], ...], current: Mapping[str, Any] | None,
               now: datetime, creating: int = 0,
               unschedulable: Unscheduled | None = None, hint: str = "",
               not_starting: tuple[int, str] = (0, ""),
               runners: Iterable[Runner] = (), unapplied: str = "") -> list[Condition]:
    """Ready, Reconciling, Stalled and RunnersFailing after a pass (or, with ``creating``,
    before a pass's creations: ``Creating``); ``hint``: the platform's word on where to look
    when its runners keep failing (``Kind.failing_hint``); ``not_starting``: ``cannot_start``
    of the runners left, and ``runners`` those runners (``_still_not_starting``);
    ``unapplied``: a count written by hand not acted on (``unapplied``), said at the end of
    Ready's message, whatever its status (True: the runners match the write applied), and
    never cut."""
    ready = _ready(counts, problem, creating, unschedulable, not_starting)
    if ready.status and counts is not None:
        ready = _still_not_starting(current, runners) or ready
    if unapplied and counts is not None:
        head = ready.message[:max(READY_MESSAGE_MAX - len(unapplied) - len("; "), 0)]
        ready = Condition(READY, ready.status, ready.reason,
                          f"{head}; {unapplied}" if head else unapplied)
    stuck = problem is not None or ready.reason in (UNSCHEDULABLE, CANNOT_START)
    stalled = not ready.status and stuck and (
        (problem is not None and problem.person) or _false_since(current, now) >= STALLED_AFTER)
    if stalled:
        stall = Condition(STALLED, True, ready.reason,
                          ready.message if problem is not None and problem.person else
                          f"no progress for {_minutes(STALLED_AFTER)}: {ready.message}")
    else:
        stall = Condition(STALLED, False, "Progressing", "")
    working = Condition(RECONCILING, not ready.status and not stalled, ready.reason,
                        ready.message if not ready.status and not stalled else "")
    return [ready, working, stall, _failing(failing, hint)]


def _ready(counts: Status | None, problem: Problem | None, creating: int,
           unschedulable: Unscheduled | None,
           not_starting: tuple[int, str] = (0, "")) -> Condition:
    if counts is None:
        assert problem is not None, "a pass that could not count has a problem"
        return Condition(READY, False, problem.reason, problem.message[:READY_MESSAGE_MAX])
    missing = f"{counts.short} of {counts.wanted} runner(s) missing"
    if creating:
        return Condition(READY, False, "Creating", f"creating {creating} runner(s): {missing}")
    if problem is not None:
        message = f"{missing}: {problem.message}" if counts.short else problem.message
        return Condition(READY, False, problem.reason, message[:READY_MESSAGE_MAX])
    if counts.short:
        return Condition(READY, False, "RunnersMissing",
                         f"{missing}: they went away after patch {counts.observed_patch_id} was "
                         "applied (deleted or evicted?); they are replaced without a new write")
    if not_starting[0]:  # (5 minutes: observe.STUCK_AFTER, which imports this module)
        return Condition(READY, False, CANNOT_START, (
            f"{not_starting[0]} of {counts.wanted} runner(s) cannot start: {not_starting[1]} "
            "(a pod that stays so for 5 minutes counts as failed and is replaced; kubectl "
            "describe pod says more)")[:READY_MESSAGE_MAX])
    if unschedulable is not None and unschedulable.late:
        return Condition(READY, False, UNSCHEDULABLE, (
            f"{unschedulable.late} of {counts.wanted} runner(s) cannot be scheduled: "
            f"{unschedulable.message} (they stay pending, not replaced, until a node fits "
            "them)")[:READY_MESSAGE_MAX])
    if counts.waiting:
        return Condition(READY, False, "Backoff", f"{counts.waiting} runner(s) failed: each is "
                         "replaced once its backoff has passed")
    parts = [f"{counts.pending} pending", f"{counts.idle} idle", f"{counts.busy} busy"]
    if counts.held:
        parts.append(f"{counts.held} finished, their slots refilled on the next spec write")
    message = f"{counts.replicas + counts.held} of {counts.wanted} runner(s): " + ", ".join(parts)
    if counts.replicas + counts.held > counts.wanted:
        # On patch 0 the pass removed every surplus runner it could: what is left runs a job.
        message += ("; the surplus goes as its runners finish their jobs (never a busy runner)"
                    if counts.observed_patch_id == 0 else
                    "; the surplus goes on the next patch-0 write (never a busy runner)")
    if counts.terminating:
        message += (f"; {counts.terminating} more being deleted, not stopped yet (their grace "
                    "period: they hold no slot)")
    return Condition(READY, True, "Reconciled", message)


def _failing(runners: tuple[tuple[str, int], ...], hint: str = "") -> Condition:
    if not runners:
        return Condition(FAILING, False, "NoRepeatedFailures", "")
    named = ", ".join(f"{name} ({n} in a row)" for name, n in runners[:5])
    return Condition(FAILING, True, "RepeatedFailures",
                     f"runners keep failing and are replaced with backoff: {named}"
                     + (f"; {hint}" if hint else ""))


def _still_not_starting(current: Mapping[str, Any] | None,
                        runners: Iterable[Runner]) -> Condition | None:
    """Ready as the last pass left it when that said ``RunnersCannotStart`` and the runners
    made since (the successors of those replaced after 5 minutes) are pending, none of them
    started yet: the pass that replaced them had nothing to say of them (no container status
    yet) and said Ready True between two RunnersCannotStart — Ready flapped every few minutes,
    a ``Reconciled`` Event each time, and never stalled. A runner made since that started
    ends it (the cause was fixed), as does a pass with none pending."""
    previous = ready_of(current)
    if previous.get("status") != "False" or previous.get("reason") != CANNOT_START:
        return None
    try:
        since = parse_time(str(previous.get("lastTransitionTime")))
    except ValueError:
        return None
    made = [r for r in runners if r.created_at is not None
            and r.created_at >= since - timedelta(seconds=1)]  # (creationTimestamp: 1 s)
    if not any(r.phase is Phase.PENDING for r in made) or any(
            r.phase in (Phase.IDLE, Phase.BUSY, Phase.FINISHED) for r in made):
        return None
    # (without the last pass's notice of a count written by hand: ``conditions`` appends
    # this pass's, which may be none)
    return Condition(READY, False, CANNOT_START, _UNAPPLIED_SAID.sub(
        "", str(previous.get("message") or ""), count=1)[:READY_MESSAGE_MAX])


def _false_since(current: Mapping[str, Any] | None, now: datetime) -> timedelta:
    """How long Ready has been False (zero if it is not)."""
    for cond in (current or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == READY and cond.get("status") == "False":
            try:
                return now - parse_time(str(cond.get("lastTransitionTime")))
            except ValueError:
                return timedelta(0)
    return timedelta(0)


def _minutes(span: timedelta) -> str:
    return f"{int(span.total_seconds() // 60)}m"


def build(current: Mapping[str, Any] | None, counts: Status | None,
          conds: list[Condition], now: datetime, *, applied: Write | None = None,
          generation: int | None = None, refilled: Refilled | None = None,
          observed: int | None = None) -> dict[str, Any]:
    """The new status; counts None keeps the current ones (a pass that could not count),
    ``applied`` and ``refilled`` None keep theirs. ``observedPatchID`` is the patch ID of the
    spec the status was computed for, as ``observedGeneration`` is its generation: the
    counts' own, or ``observed`` for a pass that could not count (None: kept)."""
    current = dict(current or {})
    status: dict[str, Any] = {k: current[k] for k in KEPT if k in current}
    if counts is not None:
        status.update(replicas=counts.replicas, pending=counts.pending, idle=counts.idle,
                      busy=counts.busy, failed=counts.failed, terminating=counts.terminating,
                      observedPatchID=counts.observed_patch_id)
    elif observed is not None:
        status["observedPatchID"] = observed
    if applied is not None:
        status["appliedPatchID"] = applied.patch_id
        if applied.effective_time is not None:
            status["appliedEffectiveTime"] = format_time(applied.effective_time)
        else:
            status.pop("appliedEffectiveTime", None)
        if applied.replicas is not None:
            status["appliedReplicas"] = applied.replicas
        else:
            status.pop("appliedReplicas", None)
    if refilled is not None:
        status.update(with_refilled({}, refilled))
    if generation is not None:
        status["observedGeneration"] = generation
    previous = {c.get("type"): c for c in current.get("conditions") or [] if isinstance(c, dict)}
    out = []
    for cond in conds:
        value = "True" if cond.status else "False"
        old = previous.get(cond.type) or {}
        since = old.get("lastTransitionTime") if old.get("status") == value else None
        entry: dict[str, Any] = {"type": cond.type, "status": value, "reason": cond.reason,
                                 "lastTransitionTime": since or format_time(now)}
        if cond.message:
            entry["message"] = cond.message
        if generation is not None:
            entry["observedGeneration"] = generation
        out.append(entry)
    status["conditions"] = out
    return status


def with_refilled(status: Mapping[str, Any] | None, refilled: Refilled) -> dict[str, Any]:
    """``status`` with ``refilled`` in it."""
    new = dict(status or {})
    new.update(refilled=refilled.count, refilledPatchID=refilled.write.patch_id)
    if refilled.write.effective_time is not None:
        new["refilledEffectiveTime"] = format_time(refilled.write.effective_time)
    else:
        new.pop("refilledEffectiveTime", None)
    return new


def changed(current: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    return dict(current or {}) != dict(new)


def condition_of(status: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any]:
    """The condition ``kind`` of a status ({} when there is none)."""
    return next((c for c in (status or {}).get("conditions") or []
                 if isinstance(c, dict) and c.get("type") == kind), {})


def ready_of(status: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The Ready condition of a status ({} when there is none)."""
    return condition_of(status, READY)
