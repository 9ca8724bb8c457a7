"""What the controller knows of the cluster: stores fed by list+watch and by its own writes.

A pass reads only from here, so a pass that changes nothing makes no API call. The controller's
own writes go in at once (``put``), so a pass that runs before the watch has echoed them back
does not create the same runners twice. Objects never go back in time: an event older than
what is stored (by resourceVersion, when both are numbers) is ignored.
"""
from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from gitscale.controller.errors import Gone, KubeError
from gitscale.controller.observe import LABEL_SET, RawObject, key_of

log = logging.getLogger("gitscale.controller")

GONE_MAX = 10_000
Lister = Callable[[], tuple[list[RawObject], str]]
Watcher = Callable[[str, int], Iterator[tuple[str, RawObject]]]


def _version(obj: RawObject) -> int | None:
    value = (obj.get("metadata") or {}).get("resourceVersion")
    return int(value) if isinstance(value, str) and value.isdigit() else None


def set_of_pod(pod: RawObject) -> str | None:
    meta = pod.get("metadata") or {}
    name = (meta.get("labels") or {}).get(LABEL_SET)
    return f"{meta.get('namespace', '')}/{name}" if name else None


class Store:
    """Objects by ``namespace/name``; with ``index``, also grouped by the index's key."""

    def __init__(self, index: Callable[[RawObject], str | None] | None = None) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, RawObject] = {}
        self._index = index
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
        key = key_of(obj)
        with self._lock:
            if (obj.get("metadata") or {}).get("uid") in self._gone:
                return False
            old = self._objects.get(key)
            if old is not None:
                new_v, old_v = _version(obj), _version(old)
                if new_v is not None and old_v is not None and new_v < old_v:
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

    def replace(self, objects: list[RawObject], version: str = "") -> list[RawObject]:
        """After a (re)list at ``version``: exactly these objects, plus what is stored with a
        newer version (the controller's own writes after the list's snapshot: the watch, resumed
        from ``version``, will deliver them, and until it does a pass must still see them).
        Returns the objects that changed or went (a gone one as it was last stored)."""
        snapshot = int(version) if version.isdigit() else None
        with self._lock:
            before = dict(self._objects)
            self._objects, self._groups = {}, {}
        for obj in objects:
            self.put(obj)
        if snapshot is not None:
            for obj in before.values():
                stored = _version(obj)
                if stored is not None and stored > snapshot:
                    self.put(obj)
        with self._lock:
            after = dict(self._objects)
        return [after.get(key) or before[key] for key in before.keys() | after.keys()
                if before.get(key) != after.get(key)]

    def _unindex(self, key: str, old: RawObject | None) -> None:
        if old is not None and self._index is not None and (group := self._index(old)):
            members = self._groups.get(group, {})
            members.pop(key, None)
            if not members:
                self._groups.pop(group, None)


class Informer:
    """List, then watch from the list's version; list again on 410 or after an error."""

    def __init__(self, name: str, store: Store, list_: Lister, watch: Watcher,
                 on_change: Callable[[RawObject], None], stop: threading.Event, *,
                 watch_timeout: int = 300) -> None:
        self.name = name
        self.store = store
        self._list, self._watch = list_, watch
        self._on_change = on_change
        self._stop = stop
        self._timeout = watch_timeout
        self.synced = threading.Event()
        self.healthy = True
        self.thread = threading.Thread(target=self._run, name=f"informer-{name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                version = self._relist()
                failures = 0
                while not self._stop.is_set():
                    version = self._watch_once(version)
            except Gone:
                log.info("%s: watch expired, listing again", self.name)
            except KubeError as exc:
                failures += 1
                self.healthy = failures < 5
                log.warning("%s: %s (retrying)", self.name, exc)
                self._stop.wait(min(2 ** failures * 0.5, 30.0))

    def _relist(self) -> str:
        objects, version = self._list()
        changed = self.store.replace(objects, version)
        self.synced.set()
        self.healthy = True
        for obj in changed:
            self._on_change(obj)
        return version

    def _watch_once(self, version: str) -> str:
        for kind, obj in self._watch(version, self._timeout):
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
        return version
