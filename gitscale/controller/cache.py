"""What the controller knows of the cluster: stores fed by list+watch and by its own writes.

A pass reads only from here, so a pass that changes nothing makes no API call. The controller's
own writes go in at once (``put``), so a pass that runs before the watch has echoed them back
does not create the same runners twice. Objects never go back in time: an event older than
what is stored (by resourceVersion, when both are numbers) is ignored. A relist replaces the
contents in one step: a pass never sees a set with part of its runners (it would create the
rest again).

A store keeps only what the controller reads of an object (``keep``): no ``managedFields`` (a
third of a pod's JSON), and of a runner pod its metadata, its containers' names and the state
of its containers (``runner_pod_fields``). 10,000 pods as the API serves them take hundreds of
megabytes once parsed; what the controller reads of them, a tenth of that (README,
"Performance").
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

from gitscale.controller.errors import Gone, KubeError, NotFound
from gitscale.controller.observe import LABEL_SET, RawObject, key_of

log = logging.getLogger("gitscale.controller")

GONE_MAX = 10_000
BACKOFF_MAX = 30.0  # seconds: the longest wait between an informer's attempts
WATCH_MIN = 1.0  # seconds: a watch that ends sooner without an event failed
SAY_EVERY = 60.0  # seconds: a streak of failures is logged at most this often
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
Keep = Callable[[RawObject], RawObject]
Lister = Callable[[], tuple[list[RawObject], str]]
Watcher = Callable[[str, int], Iterator[tuple[str, RawObject]]]


def without_managed_fields(obj: RawObject) -> RawObject:
    """``obj`` without ``metadata.managedFields`` and kubectl's last-applied annotation (a
    copy of the whole object): bookkeeping of the API server and of kubectl, read by no one."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return obj
    kept = {k: v for k, v in meta.items() if k != "managedFields"}
    notes = kept.get("annotations")
    if isinstance(notes, dict) and LAST_APPLIED in notes:
        kept["annotations"] = {k: v for k, v in notes.items() if k != LAST_APPLIED}
    return cast(RawObject, {**obj, "metadata": kept})


def runner_pod_fields(pod: RawObject) -> RawObject:
    """What the controller reads of a runner pod (``observe.runner_of``, ``leftovers``): its
    metadata, its containers' names, and its phase, conditions and container states."""
    out: dict[str, Any] = dict(without_managed_fields(pod))
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    out["spec"] = {part: [{"name": c.get("name")} for c in spec[part] if isinstance(c, dict)]
                   for part in ("containers", "initContainers")
                   if isinstance(spec.get(part), list)}
    kept: dict[str, Any] = {k: status[k] for k in ("phase", "reason", "startTime")
                            if k in status}
    if isinstance(status.get("conditions"), list):
        kept["conditions"] = [_condition(c) for c in status["conditions"] if isinstance(c, dict)]
    for part in ("initContainerStatuses", "containerStatuses"):
        if isinstance(status.get(part), list):
            kept[part] = [{k: c[k] for k in ("name", "ready", "state") if k in c}
                          for c in status[part] if isinstance(c, dict)]
    out["status"] = kept
    return cast(RawObject, out)


def _condition(cond: dict[str, Any]) -> dict[str, Any]:
    """A pod condition as kept: its type, status, reason and time; the message only of a pod
    the scheduler could not place (``PodScheduled`` False: what ``Ready`` then quotes)."""
    keys: tuple[str, ...] = ("type", "status", "reason", "lastTransitionTime")
    if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
        keys += ("message",)
    return {k: cond[k] for k in keys if k in cond}


def _version(obj: RawObject) -> int | None:
    value = (obj.get("metadata") or {}).get("resourceVersion")
    return int(value) if isinstance(value, str) and value.isdigit() else None


def set_of_pod(pod: RawObject) -> str | None:
    meta = pod.get("metadata") or {}
    name = (meta.get("labels") or {}).get(LABEL_SET)
    return f"{meta.get('namespace', '')}/{name}" if name else None


class Store:
    """Objects by ``namespace/name``, as ``keep`` reduces them; with ``index``, also grouped by
    the index's key."""

    def __init__(self, index: Callable[[RawObject], str | None] | None = None,
                 keep: Keep = without_managed_fields) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, RawObject] = {}
        self._index = index
        self.keep = keep
        self._groups: dict[str, dict[str, RawObject]] = {}
        # uids known deleted: a late echo of a deleted object must not bring it back
        self._gone: collections.OrderedDict[str, None] = collections.OrderedDict()

    def get(self, key: str) -> RawObject | None:
        with self._lock:
            return self._objects.get(key)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._objects)

    def group(self, key: str) -> list[RawObject]:
        with self._lock:
            return list(self._groups.get(key, {}).values())

    def put(self, obj: RawObject) -> bool:
        """Store ``obj`` unless what is stored is newer. True when it changed something."""
        key, obj = key_of(obj), self.keep(obj)
        with self._lock:
            if (obj.get("metadata") or {}).get("uid") in self._gone:
                return False
            old = self._objects.get(key)
            if old is not None and _older(obj, old):
                return False
            self._unindex(key, old)
            self._objects[key] = obj
            if self._index is not None and (group := self._index(obj)) is not None:
                self._groups.setdefault(group, {})[key] = obj
            return old is None or old != obj

    def remove(self, obj: RawObject) -> None:
        key = key_of(obj)
        with self._lock:
            uid = (obj.get("metadata") or {}).get("uid")
            if uid:
                self._gone[uid] = None
                while len(self._gone) > GONE_MAX:
                    self._gone.popitem(last=False)
            old = self._objects.get(key)
            if old is not None and (old.get("metadata") or {}).get("uid") not in (
                    None, (obj.get("metadata") or {}).get("uid")):
                return  # a newer object took the name
            self._unindex(key, self._objects.pop(key, None))

    def replace(self, objects: list[RawObject], version: str = "", *,
                kept: bool = False) -> list[RawObject]:
        """After a (re)list at ``version``: exactly these objects, plus what is stored with a
        newer version (the controller's own writes after the list's snapshot: the watch, resumed
        from ``version``, will deliver them, and until it does a pass must still see them).
        Returns the objects that changed or went (a gone one as it was last stored). ``kept``:
        the lister already reduced each object with ``keep`` (page by page, as it listed)."""
        snapshot = int(version) if version.isdigit() else None
        listed = [(key_of(obj), obj if kept else self.keep(obj)) for obj in objects]
        with self._lock:  # one step: a pass sees the store before or after, never in between
            before = self._objects
            after: dict[str, RawObject] = {}
            for key, obj in listed:
                if (obj.get("metadata") or {}).get("uid") not in self._gone:
                    after[key] = obj
            if snapshot is not None:
                for key, obj in before.items():
                    stored = _version(obj)
                    if stored is not None and stored > snapshot and (
                            key not in after or not _older(obj, after[key])):
                        after[key] = obj
            groups: dict[str, dict[str, RawObject]] = {}
            if self._index is not None:
                for key, obj in after.items():
                    if (group := self._index(obj)) is not None:
                        groups.setdefault(group, {})[key] = obj
            self._objects, self._groups = after, groups
        return [after.get(key) or before[key] for key in before.keys() | after.keys()
                if before.get(key) != after.get(key)]

    def _unindex(self, key: str, old: RawObject | None) -> None:
        if old is not None and self._index is not None and (group := self._index(old)):
            members = self._groups.get(group, {})
            members.pop(key, None)
            if not members:
                self._groups.pop(group, None)


def _older(obj: RawObject, than: RawObject) -> bool:
    new_v, old_v = _version(obj), _version(than)
    return new_v is not None and old_v is not None and new_v < old_v


class Informer:
    """List, then watch from the list's version; list again on 410 or after an error.

    Failures back off (``backoff`` seconds, doubling up to ``BACKOFF_MAX``), and only a watch
    that moved counts as recovered — it delivered an event (a bookmark too), or stayed open
    ``WATCH_MIN`` seconds and ended by itself —: a list that succeeds is no proof, since an
    API server whose lists answer while its watches fail (a 5xx, a 429 of API Priority and
    Fairness, a 410 at once because its watch cache lags) would otherwise have every runner
    pod listed again twice a second, for as long as it lasts (client-go's reflector backs off
    alike). A 410 on a watch that moved is the usual expiry: listed again at once (a 410 on
    the list itself is a failure of the list).

    A streak of failures is logged once when it starts, at most once a ``SAY_EVERY`` seconds
    while it lasts, and once when it ends.

    ``connected``: the last list or watch request was answered (readiness, not liveness: an
    API server that does not answer is not a reason to restart the controller). ``beat`` is
    called at every step of the loop (liveness: it iterates)."""

    def __init__(self, name: str, store: Store, list_: Lister, watch: Watcher,
                 on_change: Callable[[RawObject], None], stop: threading.Event, *,
                 watch_timeout: int = 300, beat: Callable[[], None] = lambda: None,
                 backoff: float = 0.5, clock: Callable[[], float] = time.monotonic,
                 missing: str = "") -> None:
        self.name = name
        self._missing = missing  # what a 404 on the list means (a CRD not installed)
        self.store = store
        self._list, self._watch = list_, watch
        self._on_change = on_change
        self._stop = stop
        self._timeout = watch_timeout
        self._beat = beat
        self._backoff = backoff  # the first wait after a failure; it doubles, up to BACKOFF_MAX
        self._clock = clock
        self.synced = threading.Event()
        self.connected = True
        self.error: KubeError | None = None  # the last list or watch's, while not connected
        self.failures = 0  # in a row: since the last watch that moved
        self._moved = False  # a watch moved since the last (re)list
        self._said_at: float | None = None  # when the streak was last logged
        self.thread = threading.Thread(target=self._run, name=f"informer-{name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._beat()
            try:
                version = self._relist()
                while not self._stop.is_set():
                    version = self._watch_once(version)
                    self._beat()
            except Gone as exc:
                if self._moved:  # the usual expiry of a watch that served: list again now
                    log.info("%s: watch expired, listing again", self.name)
                    continue
                self._failed(f"{exc} (at once after listing)")
            except KubeError as exc:
                self.connected, self.error = False, exc
                self._failed(f"{exc}: {self._missing}" if isinstance(exc, NotFound)
                             and self._missing else str(exc))

    def _failed(self, message: str) -> None:
        """One more failure in a row: say so (once a streak, then now and then), back off."""
        self.failures += 1
        wait = min(2 ** (self.failures - 1) * self._backoff, BACKOFF_MAX)
        now = self._clock()
        if self._said_at is None or now - self._said_at >= SAY_EVERY:
            self._said_at = now
            more = f", {self.failures} in a row" if self.failures > 1 else ""
            log.warning("%s: %s (retrying in %gs%s)", self.name, message, wait, more)
        else:
            log.debug("%s: %s (retrying in %gs)", self.name, message, wait)
        self._stop.wait(wait)

    def _recovered(self) -> None:
        """A watch moved: the streak of failures, if any, is over."""
        self._moved = True
        if self.failures and self._said_at is not None:
            log.info("%s: the API server answers again, after %d failed attempt(s)",
                     self.name, self.failures)
        self.failures, self._said_at = 0, None

    def _relist(self) -> str:
        try:
            objects, version = self._list()
        except Gone as exc:
            # The list itself refused 410 (its continue token expired while paging, time
            # after time: ``kube.RELISTS``): a failure of the list, backed off as any other,
            # not the usual expiry of a watch that served (listed again at once, for ever).
            raise KubeError(str(exc), exc.status, exc.reason) from None
        changed = self.store.replace(objects, version, kept=True)
        self.synced.set()
        self.connected, self.error = True, None
        self._moved = False
        for obj in changed:
            self._on_change(obj)
        return version

    def _watch_once(self, version: str) -> str:
        """Watch from ``version`` until the stream ends; the version reached. A stream that
        ended at once without an event (cut by a proxy, refused in its first bytes) is a
        failure: ``KubeError``, with no new version."""
        opened, moved = self._clock(), False
        for kind, obj in self._watch(version, self._timeout):
            self._beat()
            if not moved:
                moved = True
                self._recovered()
            meta: dict[str, Any] = obj.get("metadata") or {}
            version = str(meta.get("resourceVersion") or version)
            if kind == "BOOKMARK":
                continue
            if kind == "DELETED":
                self.store.remove(obj)
            elif not self.store.put(obj):
                continue
            self._on_change(obj)
            if self._stop.is_set():
                break
        if not moved and not self._stop.is_set():
            if self._clock() - opened < WATCH_MIN:
                raise KubeError(f"watch {self.name}: the stream ended at once, without an "
                                "event", 200)
            self._recovered()  # a quiet watch that ran its course
        return version
