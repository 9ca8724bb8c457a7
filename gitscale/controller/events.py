"""The Kubernetes Events of a pass: what ``kubectl describe runnerset`` and ``kubectl get
events`` show of what the controller did.

Pure (no I/O, the clock passed in): ``of_pass`` turns what a pass did (its ``Report``) and the
status it left into at most one Event per reason; ``Correlator`` says whether an Event is a new
object or a repeat of one posted before, as client-go's EventCorrelator does, so a Warning
repeated every pass updates one object's ``count`` and ``lastTimestamp`` instead of adding one
per pass; ``body`` and ``repeat`` are what the API receives. ``recorder.py`` writes them.

Normal, from what the pass did: ``RunnersCreated``, ``RunnersDeleted``, ``UnregisterRefused``
(runners running a job kept: GitHub refused to unregister them, or Buildkite's agents list,
read again before running agents are removed, showed them with a job), ``LeftoversRemoved``
(registrations left without a pod), ``Reconciled`` when Ready turns True again, and
``ReplicasNotApplied`` when Ready's message first says that ``spec.replicas`` was written by
hand over the write applied (``status.unapplied``): the gate does not act on it.
Warning, from the status the pass left: Ready False with its reason (``CreateFailed``,
``QuotaExceeded``, ``ApplyFailed``, ``CredentialsMissing``, ``CredentialsRefused``,
``PlatformUnavailable``, ``InvalidSpec``,
``RunnersMissing``, ``RunnersUnschedulable``, ``RunnersCannotStart``, ``Backoff``,
``Interrupted``: the reasons of
``status.py``), and
``RepeatedFailures`` while RunnersFailing is True — posted on every pass the condition holds,
so the first one marks the transition and the repeats only count.
"""
from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from gitscale.controller import status as st
from gitscale.controller.decide import DeleteReason
from gitscale.redact import redact
from gitscale.runnerset_api import API_VERSION, KIND
from gitscale.timeutil import format_micro_time, format_time

if TYPE_CHECKING:
    from gitscale.controller.context import Report

EventType = Literal["Normal", "Warning"]
COMPONENT = "gitscale-controller"  # source.component and reportingComponent
MESSAGE_LIMIT = 1024  # bytes: Kubernetes' limit of an Event's message (events.k8s.io note)
NAMES_SHOWN = 3  # runner names a message lists before "and N more"
WINDOW = timedelta(minutes=10)  # a repeat within this long counts on the same Event object
SIMILAR = 10  # distinct messages of one reason within WINDOW before they are combined
COMBINED = "(combined from similar events): "  # client-go's prefix, as kubectl users know it
QUIET = {"Creating"}  # Ready False reasons that are no warning (a pass in progress)
_DELETED = {DeleteReason.SURPLUS: "surplus (scale-down)", DeleteReason.FINISHED: "finished",
            DeleteReason.FAILED: "failed",
            DeleteReason.OUTDATED: "outdated (made for other job settings)"}


@dataclass(frozen=True)
class Event:
    type: EventType
    reason: str  # CamelCase, as Kubernetes' own (and the conditions' reasons)
    message: str


def of_pass(report: Report, after: Mapping[str, Any] | None) -> list[Event]:
    """The Events of one pass over a set: what it did, then what the status it left says is
    wrong (``after``: the set's status at the end of the pass; the pass's own ``before``;
    not for a pass that read a set written since, ``Report.stale``). One per reason;
    messages redacted and cut to Kubernetes' limit."""
    out: list[Event] = []
    if report.created:
        patch = f" for patch {report.actions.create_patch_id}" if report.actions else ""
        out.append(Event("Normal", "RunnersCreated", f"created {_runners(report.created)}"
                         f"{patch} ({_names(report.created)})"))
    if report.deleted:
        out.append(Event("Normal", "RunnersDeleted", _deleted(report)))
    if report.busy:
        out.append(Event("Normal", "UnregisterRefused", (
            f"kept {_runners(report.busy)} running a job ({_names(report.busy)}): the platform "
            f"says {'it is' if len(report.busy) == 1 else 'they are'} busy (GitHub refuses "
            "to unregister a busy runner; Buildkite's agents list, read again before running "
            "agents are removed, shows the job); tried again later, never deleted while busy")))
    if report.leftovers:
        out.append(Event("Normal", "LeftoversRemoved", (
            f"removed {len(report.leftovers)} registration(s) left without a pod "
            f"({_names(report.leftovers)})")))
    if report.stale:  # ``after`` is not this pass's status: the next pass says what holds
        after = None
    ready, said = st.ready_of(after), st.ready_of(report.before)
    reason = str(ready.get("reason") or "")
    if ready.get("status") == "False" and reason and reason not in QUIET:
        out.append(Event("Warning", reason, str(ready.get("message") or reason)))
    elif ready.get("status") == "True" and said.get("status") == "False" and (
            said.get("reason") not in QUIET):  # (after a warning, not after creating)
        out.append(Event("Normal", reason or "Reconciled", str(ready.get("message") or "")))
    # (the status could not say them; a stale pass's next pass says what holds, with its reason)
    if report.errors and ready.get("status") != "False" and not report.stale:
        out.append(Event("Warning", "ApplyFailed", "; ".join(st.said_once(report.errors)[:3])))
    # A count written by hand the gate does not act on: once, as the status first says it —
    # not every pass, nor again after a restart or a change of leader (the status said it).
    if report.unapplied and report.unapplied in str(ready.get("message") or "") and (
            report.unapplied not in str(said.get("message") or "")):
        out.append(Event("Normal", "ReplicasNotApplied", report.unapplied))
    failing = st.condition_of(after, st.FAILING)
    if failing.get("status") == "True":
        out.append(Event("Warning", str(failing.get("reason") or "RepeatedFailures"),
                         str(failing.get("message") or "")))
    seen: set[str] = set()
    unique = []
    for event in out:
        if event.reason not in seen:
            seen.add(event.reason)
            unique.append(Event(event.type, event.reason, clip(redact(event.message))))
    return unique


def _deleted(report: Report) -> str:
    actions = report.actions
    why = {d.name: d.reason for d in (*actions.deletes, *actions.standby)} if actions else {}
    tally = Counter(why.get(name, DeleteReason.SURPLUS) for name in report.deleted)
    parts = ", ".join(f"{tally[r]} {label}" for r, label in _DELETED.items() if tally[r])
    return f"deleted {_runners(report.deleted)}: {parts} ({_names(report.deleted)})"


def _runners(names: list[str]) -> str:
    return f"{len(names)} runner" + ("" if len(names) == 1 else "s")


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:NAMES_SHOWN])
    rest = len(names) - NAMES_SHOWN
    return f"{shown} and {rest} more" if rest > 0 else shown


def clip(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """``message`` within ``limit`` bytes of UTF-8 (never half a character), "…" where cut."""
    data = message.encode()
    if len(data) <= limit:
        return message
    return data[:limit - len("…".encode())].decode(errors="ignore") + "…"


# -- repeats ------------------------------------------------------------------------------------
ObjectKey = tuple[str, str, str]  # the involved object: namespace, name, uid
Key = tuple[str, str, str, str, str, str | None]  # object, type, reason, message (None: combined)


@dataclass(frozen=True)
class Post:
    """One write of an Event: a new object (``name`` None) or a repeat of the object ``name``
    (its ``count``, ``lastTimestamp`` and message updated)."""

    key: Key
    event: Event  # as written: a combined message once similar ones are combined
    count: int
    first: datetime
    last: datetime
    name: str | None = None


class Correlator:
    """Which Events are repeats (client-go's EventCorrelator, without its rate limit: passes are
    spaced by the work queue already).

    - The same (object, type, reason, message) within ``window`` of its last post is a repeat:
      the Event object is updated (``count`` + 1, ``lastTimestamp``), so a Warning that holds
      for an hour is one line of ``kubectl describe`` ("x60 over 1h"), kept fresh against the
      API server's event TTL (1 h by default), instead of 60 objects or none.
    - Messages name runners and retry times, so the same failure may say something new every
      pass: past ``similar`` distinct messages of one (object, type, reason) within ``window``,
      the others are one Event, "(combined from similar events): <the latest>", counted alike.

    Bounded: what has not been seen for ``window`` is forgotten (a repeat after that is a new
    object). Not thread-safe: the recorder's thread alone uses it.
    """

    def __init__(self, window: timedelta = WINDOW, similar: int = SIMILAR) -> None:
        self.window, self.similar = window, similar
        self._posted: OrderedDict[Key, Post] = OrderedDict()  # by last post, oldest first
        self._messages: OrderedDict[Key, tuple[datetime, set[str]]] = OrderedDict()

    def observe(self, obj: ObjectKey, event: Event, now: datetime) -> Post:
        """What to write for ``event`` on ``obj`` now. Say ``posted`` once it is written."""
        self._forget(now)
        group: Key = (*obj, event.type, event.reason, None)
        _, messages = self._messages.pop(group, (now, set()))
        if event.message in messages or len(messages) < self.similar:
            messages.add(event.message)
            key: Key = (*obj, event.type, event.reason, event.message)
        else:
            key, event = group, Event(event.type, event.reason, clip(COMBINED + event.message))
        self._messages[group] = (now, messages)
        last = self._posted.get(key)
        if last is None or last.name is None:
            return Post(key, event, 1, now, now)
        return Post(key, event, last.count + 1, last.first, now, last.name)

    def posted(self, post: Post, name: str) -> None:
        """``post`` was written, as the Event object ``name``."""
        self._posted.pop(post.key, None)
        self._posted[post.key] = Post(post.key, post.event, post.count, post.first, post.last,
                                      name)

    def _forget(self, now: datetime) -> None:
        """Drop what was last seen more than ``window`` ago (both tables run oldest first)."""
        posted, messages = self._posted, self._messages
        while posted and now - next(iter(posted.values())).last > self.window:
            posted.popitem(last=False)
        while messages and now - next(iter(messages.values()))[0] > self.window:
            messages.popitem(last=False)


# -- what the API receives ----------------------------------------------------------------------
def involved(obj: Mapping[str, Any]) -> dict[str, str]:
    """The ``involvedObject`` of a RunnerSet's Events."""
    meta = obj.get("metadata") or {}
    return {"apiVersion": str(obj.get("apiVersion") or API_VERSION),
            "kind": str(obj.get("kind") or KIND), "name": str(meta.get("name", "")),
            "namespace": str(meta.get("namespace", "")), "uid": str(meta.get("uid", "")),
            "resourceVersion": str(meta.get("resourceVersion", ""))}


def object_key(ref: Mapping[str, str]) -> ObjectKey:
    return ref["namespace"], ref["name"], ref["uid"]


def body(ref: Mapping[str, str], post: Post, name: str, instance: str) -> dict[str, Any]:
    """A new core/v1 Event named ``name`` about ``ref`` (``involved``), reported by
    ``instance`` (the controller's pod). ``eventTime`` is the first occurrence: with it set,
    the API server requires ``reportingComponent`` and ``reportingInstance``. It is a
    MicroTime, which the API server parses only with its six digits of fraction: written here
    as a string (the generated client sends strings as they are; a ``datetime`` it would
    write without a fraction on a whole second)."""
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": ref["namespace"]},
            "involvedObject": dict(ref), "type": post.event.type, "reason": post.event.reason,
            "message": post.event.message, "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT, "reportingInstance": instance[:128],
            "firstTimestamp": format_time(post.first), "lastTimestamp": format_time(post.last),
            "eventTime": format_micro_time(post.first), "count": post.count}


def repeat(post: Post) -> dict[str, Any]:
    """The merge patch of a repeat: what ``kubectl describe`` shows as "(xN over …)"."""
    return {"count": post.count, "lastTimestamp": format_time(post.last),
            "message": post.event.message}


def event_name(set_name: str, nanos: int) -> str:
    """``<set>.<hex nanoseconds>``, as client-go names Events, within 253 characters."""
    suffix = f".{nanos:x}"
    return set_name[:253 - len(suffix)].rstrip(".-") + suffix

