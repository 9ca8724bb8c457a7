"""The object store behind the fake API server: the semantics of an etcd-backed registry.

One lock guards everything (``Store.lock``; ``Store.changed`` is its condition, notified on
every write). Stored objects are never mutated in place: each write stores a new dict, so a
reference taken under the lock can be serialised after it is released, and watch events keep
the exact object they announced.

What it does like a real API server:
- one global ``resourceVersion`` counter (a string on objects), bumped by every write, each write
  recorded as one watch event in a bounded history (older watch starts get 410 Expired);
- ``uid``, ``creationTimestamp`` and ``generation`` (bumped when anything but metadata/status
  changes) are set by the server; a write that changes nothing is a no-op (no new version, no
  event);
- optimistic concurrency: a stale ``metadata.resourceVersion`` in an update or patch is a 409
  (a precondition, checked before a ``/status`` write keeps only ``.status``, as the registry
  checks it before the status strategy runs);
- kinds with a status subresource: the main endpoint keeps the stored ``.status`` and ``/status``
  changes only ``.status``;
- deletion honours ``metadata.finalizers`` (``deletionTimestamp`` first, removal when the last
  finalizer goes) and delete preconditions, then garbage-collects dependents by
  ``ownerReferences`` synchronously, by ``propagationPolicy``: ``Background`` (the default)
  deletes the dependents once the owner is gone; ``Orphan`` strips the references;
  ``Foreground`` marks the owner (``deletionTimestamp`` and the ``foregroundDeletion``
  finalizer) and deletes every dependent at once, whatever other finalizers hold the owner (as
  the garbage collector does: a finalizer of the owner does not protect its dependents), then
  drops ``foregroundDeletion`` once no dependent with ``blockOwnerDeletion: true`` is left;
- a continue token from before a compaction (``compact``) is 410 Expired, as etcd's is.
"""
from __future__ import annotations

import base64
import copy
import json
import secrets
import threading
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable

from tests.kubeapi import errors
from tests.kubeapi.errors import APIError, bad_request, conflict, invalid, not_found
from tests.kubeapi.objects import (STRATEGIC_MERGE_PATCH, Obj, PatchFailed, apply_patch,
                                   desired_state, fold_string_data, owner_uids, parse_patch,
                                   timestamp, utc_now)
from tests.kubeapi.resources import Registry, ResourceType
from tests.kubeapi.selectors import Matcher
from tests.kubeapi.validation import (
    check_kind,
    check_metadata,
    check_name,
    check_pod_spec,
    check_pod_update,
)

#: metadata a client cannot change through an update or a patch
_SERVER_OWNED = ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                 "deletionGracePeriodSeconds", "generation")
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # what the apiserver's generateName draws from
#: As on a live cluster, versions never start at 0: an empty list still carries a version to
#: watch from (``resourceVersion=0`` would mean "any", i.e. replay the current state).
FIRST_RESOURCE_VERSION = 1000
FOREGROUND = "foregroundDeletion"  # the finalizer of an owner deleted in the foreground


@dataclass(frozen=True)
class WatchEvent:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    rt: ResourceType
    obj: Obj
    old: Obj | None  # the previous state, for MODIFIED (selector transitions)


def _is_pods(rt: ResourceType) -> bool:
    return rt.group == "" and rt.plural == "pods"


class Store:
    def __init__(self, registry: Registry, *, history_size: int = 10_000,
                 clock: Callable[[], datetime] = utc_now,
                 initial_resource_version: int = FIRST_RESOURCE_VERSION) -> None:
        self.registry = registry
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.history_size = history_size
        self.clock = clock
        #: pods stay (with deletionTimestamp) after DELETE until finish_pod_deletions()
        self.graceful_pod_deletion = False
        self.compacted_rv = initial_resource_version  # watch starts below this: 410 Expired
        self._rv = initial_resource_version
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self._by_uid: dict[str, tuple[ResourceType, str, str]] = {}
        self._dependents: dict[str, set[tuple[ResourceType, str, str]]] = {}
        self._history: deque[WatchEvent] = deque()
        #: by resource key: admission checks of a creation, ``check(namespace, obj, the
        #: namespace's objects of that resource)``, raising an APIError to refuse it (called
        #: with the lock held)
        self.admission: dict[str, list[Callable[[str, Obj, list[Obj]], None]]] = {}

    # -- reads -------------------------------------------------------------------------------
    @property
    def resource_version(self) -> int:
        return self._rv

    def get(self, rt: ResourceType, ns: str, name: str) -> Obj:
        with self.lock:
            return self._get(rt, ns, name)

    def list_objects(self, rt: ResourceType, match: Matcher, *, limit: int = 0,
                     continue_token: str | None = None
                     ) -> tuple[list[Obj], int, str | None, int]:
        """(items sorted by namespace/name, list resourceVersion, continue token, remaining).
        A continue token resumes after the last key returned (no snapshot: later writes show)."""
        start: tuple[str, str] | None = None
        snapshot: int | None = None
        if continue_token:
            try:
                token = json.loads(base64.b64decode(continue_token))
                ns, name = token["start"]
                start, snapshot = (str(ns), str(name)), int(token["rv"])
            except (ValueError, KeyError, TypeError):
                raise bad_request("continue key is not valid") from None
        with self.lock:
            if snapshot is not None and snapshot < self.compacted_rv:
                raise errors.expired(
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter.")
            # every page of one list carries the first page's version, as on a real server
            rv = self._rv if snapshot is None else snapshot
            keys = sorted(self._objects.get(rt.key, {}))
            items = [self._objects[rt.key][k] for k in keys
                     if (start is None or k > start) and match(self._objects[rt.key][k])]
        if limit <= 0 or len(items) <= limit:
            return items, rv, None, 0
        page, rest = items[:limit], items[limit:]
        last = page[-1]["metadata"]
        token = base64.b64encode(json.dumps(
            {"rv": rv, "start": [last.get("namespace", ""), last["name"]]}).encode()).decode()
        return page, rv, token, len(rest)

    def events_since(self, since: int) -> list[WatchEvent]:
        """Events after ``since`` (caller holds the lock); 410 when history no longer has them."""
        if since < self.compacted_rv:
            raise errors.expired(f"too old resource version: {since} ({self.compacted_rv})")
        out = []
        for event in reversed(self._history):
            if event.rv <= since:
                break
            out.append(event)
        out.reverse()
        return out

    def compact(self) -> None:
        """Forget all watch history, as etcd compaction does: older resumes get 410."""
        with self.lock:
            self._history.clear()
            self.compacted_rv = self._rv

    def snapshot(self, rt: ResourceType, match: Matcher) -> list[Obj]:
        """Matching objects (caller holds the lock)."""
        return [obj for _, obj in sorted(self._objects.get(rt.key, {}).items()) if match(obj)]

    # -- writes ------------------------------------------------------------------------------
    def create(self, rt: ResourceType, ns: str, body: Any, *, dry_run: bool = False) -> Obj:
        ns = ns if rt.namespaced else ""
        obj = self._incoming(rt, ns, body)
        meta = obj["metadata"]
        if meta.get("resourceVersion"):
            raise APIError(500, "InternalError",
                           "resourceVersion should not be set on objects to be created")
        for key in ("uid", "creationTimestamp", "deletionTimestamp",
                    "deletionGracePeriodSeconds", "generation"):
            meta.pop(key, None)
        if rt.has_status:  # the real registries reset status on create
            obj.pop("status", None)
            if _is_pods(rt):
                obj["status"] = {"phase": "Pending"}
        if rt.group == "" and rt.plural == "secrets":
            fold_string_data(obj)
        with self.lock:
            name = meta.get("name") or ""
            if not name and meta.get("generateName"):
                name = self._generate_name(rt, ns, str(meta["generateName"]))
            if not name:
                raise invalid(rt, "", "metadata.name: Required value: name or generateName is "
                              "required")
            meta["name"] = name
            check_name(rt, name)
            check_metadata(rt, meta)
            if _is_pods(rt):
                check_pod_spec(rt, name, obj.get("spec"))
            if (ns, name) in self._objects.get(rt.key, {}):
                raise errors.already_exists(rt, name)
            for check in self.admission.get(rt.key, ()):  # dry runs are admitted the same way
                check(ns, obj, [o for (n, _), o in sorted(self._objects.get(rt.key, {}).items())
                                if n == ns])
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=timestamp(self.clock()),
                        generation=1)
            if dry_run:
                return obj
            meta["resourceVersion"] = str(self._next_rv())
            self._put(rt, obj, None)
            self._emit("ADDED", rt, obj, None)
            return obj

    def update(self, rt: ResourceType, ns: str, name: str, body: Any, *,
               subresource: str | None = None, dry_run: bool = False) -> Obj:
        candidate = self._incoming(rt, ns, body, url_name=name)
        wanted_rv = candidate["metadata"].get("resourceVersion")
        with self.lock:
            old = self._get(rt, ns, name)
            if wanted_rv:
                if wanted_rv != old["metadata"]["resourceVersion"]:
                    raise conflict(rt, name)
            elif not rt.allow_unconditional_update:
                raise invalid(rt, name, "metadata.resourceVersion: Invalid value: 0x0: must be "
                              "specified for an update")
            new = self._apply_subresource(rt, old, candidate, subresource)
            return self._write(rt, old, new, dry_run=dry_run)

    def patch(self, rt: ResourceType, ns: str, name: str, raw: bytes, content_type: str, *,
              subresource: str | None = None, dry_run: bool = False) -> Obj:
        media = content_type.split(";")[0].strip().lower()
        if media == STRATEGIC_MERGE_PATCH and rt.group:  # no SMP for custom resources
            raise errors.unsupported_media_type(media)
        patch = parse_patch(media, raw)
        with self.lock:
            old = self._get(rt, ns, name)
            try:
                doc = apply_patch(media, old, patch)
            except PatchFailed as exc:
                raise invalid(rt, name, "the server rejected our request due to an error in "
                              f"our request: {exc}") from None
            candidate = self._incoming(rt, ns, doc, url_name=name)
            wanted_rv = candidate["metadata"].get("resourceVersion")
            if wanted_rv and wanted_rv != old["metadata"]["resourceVersion"]:
                raise conflict(rt, name)
            new = self._apply_subresource(rt, old, candidate, subresource)
            return self._write(rt, old, new, dry_run=dry_run)

    def delete(self, rt: ResourceType, ns: str, name: str, options: dict[str, Any], *,
               dry_run: bool = False) -> tuple[Obj, bool]:
        """(the object, whether it is gone); finalizers or a grace period keep it for now."""
        policy = options.get("propagationPolicy") or (
            "Orphan" if options.get("orphanDependents") else "Background")
        if policy not in ("Orphan", "Background", "Foreground"):
            raise bad_request(f"unsupported propagationPolicy {policy!r}")
        with self.lock:
            obj = self._get(rt, ns, name)
            meta = obj["metadata"]
            pre = options.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != meta["uid"]:
                raise conflict(rt, name, f"Precondition failed: UID in precondition: "
                               f"{pre['uid']}, UID in object meta: {meta['uid']}")
            if pre.get("resourceVersion") and pre["resourceVersion"] != meta["resourceVersion"]:
                raise conflict(rt, name, f"Precondition failed: ResourceVersion in precondition: "
                               f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                               f"{meta['resourceVersion']}")
            if dry_run:
                return obj, not meta.get("finalizers")
            if policy == "Orphan":
                self._collect(meta["uid"], "Orphan")
            return self._delete(rt, obj, policy, options.get("gracePeriodSeconds"))

    def delete_collection(self, rt: ResourceType, match: Matcher, options: dict[str, Any]) -> int:
        with self.lock:
            victims = self.snapshot(rt, match)
        count = 0
        for obj in victims:
            meta = obj["metadata"]
            try:
                self.delete(rt, meta.get("namespace", ""), meta["name"], options)
                count += 1
            except APIError as exc:  # already gone (GC'd by an earlier victim)
                if exc.code != 404:
                    raise
        return count

    # -- in-process hooks (no validation: the caller plays kubelet or scheduler) ---------------
    def mutate(self, rt: ResourceType, ns: str, name: str, fn: Callable[[Obj], None]) -> Obj:
        with self.lock:
            old = self._get(rt, ns, name)
            new = copy.deepcopy(old)
            fn(new)
            return self._write(rt, old, new, validate=False)

    def finish_pod_deletions(self, rt: ResourceType) -> int:
        """Remove every terminating object without finalizers (what the kubelet would do)."""
        with self.lock:
            gone = [obj for obj in self.snapshot(rt, lambda o: True)
                    if obj["metadata"].get("deletionTimestamp")
                    and not obj["metadata"].get("finalizers")]
            for obj in gone:
                self._remove(rt, obj, "Background")
            return len(gone)

    # -- internals (caller holds the lock) -----------------------------------------------------
    def _get(self, rt: ResourceType, ns: str, name: str) -> Obj:
        obj = self._objects.get(rt.key, {}).get((ns if rt.namespaced else "", name))
        if obj is None:
            raise not_found(rt, name)
        return obj

    def _incoming(self, rt: ResourceType, ns: str, body: Any, *,
                  url_name: str | None = None) -> Obj:
        """A deep copy of a request body with kind, apiVersion and namespace checked and set."""
        if not isinstance(body, dict):
            raise bad_request(f"the body of the request must be a {rt.kind} object")
        check_kind(rt, body)
        obj = copy.deepcopy(body)
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        if rt.namespaced:
            if meta.get("namespace") not in (None, "", ns):
                raise bad_request("the namespace of the provided object does not match the "
                                  "namespace sent on the request")
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        if url_name is not None and meta.get("name") != url_name:
            raise bad_request(f"the name of the object ({meta.get('name')}) does not match the "
                              f"name on the URL ({url_name})")
        return obj

    def _apply_subresource(self, rt: ResourceType, old: Obj, candidate: Obj,
                           subresource: str | None) -> Obj:
        if subresource == "status":
            new = copy.deepcopy(old)
            if "status" in candidate:
                new["status"] = candidate["status"]
            else:
                new.pop("status", None)
            return new
        if rt.has_status:
            candidate.pop("status", None)
            if "status" in old:
                candidate["status"] = copy.deepcopy(old["status"])
        if rt.group == "" and rt.plural == "secrets":
            fold_string_data(candidate)
        return candidate

    def _write(self, rt: ResourceType, old: Obj, new: Obj, *, dry_run: bool = False,
               validate: bool = True) -> Obj:
        old_meta, meta = old["metadata"], new.setdefault("metadata", {})
        for key in _SERVER_OWNED:
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        new["apiVersion"], new["kind"] = rt.api_version, rt.kind
        if validate:
            check_metadata(rt, meta)
            if _is_pods(rt):
                check_pod_update(rt, old, new)
        if new == old:
            return old  # a no-op write: no new resourceVersion, no event
        if desired_state(new) != desired_state(old):
            meta["generation"] = int(old_meta.get("generation") or 0) + 1
        if dry_run:
            return new
        if (meta.get("deletionTimestamp") and not meta.get("finalizers")
                and not meta.get("deletionGracePeriodSeconds")):
            return self._remove(rt, new, "Background")  # the last finalizer went
        meta["resourceVersion"] = str(self._next_rv())
        self._put(rt, new, old)
        self._emit("MODIFIED", rt, new, old)
        return new

    def _delete(self, rt: ResourceType, obj: Obj, policy: str,
                grace: int | None) -> tuple[Obj, bool]:
        if policy == "Foreground":
            return self._delete_foreground(rt, obj)
        meta = obj["metadata"]
        terminating = bool(meta.get("deletionTimestamp"))
        if meta.get("finalizers"):
            return (obj if terminating else self._mark_terminating(rt, obj, 0)), False
        if _is_pods(rt) and self.graceful_pod_deletion and grace != 0:
            if terminating:
                return obj, False
            seconds = grace if grace is not None else int(
                (obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
            return self._mark_terminating(rt, obj, max(seconds, 1)), False
        return self._remove(rt, obj, policy), True

    def _delete_foreground(self, rt: ResourceType, obj: Obj) -> tuple[Obj, bool]:
        """Mark the owner, delete every dependent now, and let the owner go once no dependent
        blocks it (and no other finalizer holds it)."""
        meta = obj["metadata"]
        if FOREGROUND not in (meta.get("finalizers") or []):
            new = copy.deepcopy(obj)
            new_meta = new["metadata"]
            new_meta["finalizers"] = [*(new_meta.get("finalizers") or []), FOREGROUND]
            if not new_meta.get("deletionTimestamp"):
                new_meta["deletionTimestamp"] = timestamp(self.clock())
                new_meta["deletionGracePeriodSeconds"] = 0
            new_meta["resourceVersion"] = str(self._next_rv())
            self._put(rt, new, obj)
            self._emit("MODIFIED", rt, new, obj)
            obj = new
        self._collect(obj["metadata"]["uid"], "Background")
        return self._release_foreground(rt, obj)

    def _release_foreground(self, rt: ResourceType, obj: Obj) -> tuple[Obj, bool]:
        """Drop ``foregroundDeletion`` when no dependent with blockOwnerDeletion is left."""
        uid = obj["metadata"]["uid"]
        for dep_rt, ns, name in self._dependents.get(uid, set()):
            dep = self._objects.get(dep_rt.key, {}).get((ns, name))
            refs = (dep or {}).get("metadata", {}).get("ownerReferences") or []
            if any(r.get("uid") == uid and r.get("blockOwnerDeletion") for r in refs):
                return obj, False
        new = copy.deepcopy(obj)
        new["metadata"]["finalizers"] = [
            f for f in new["metadata"].get("finalizers") or [] if f != FOREGROUND] or None
        if new["metadata"]["finalizers"] is None:
            new["metadata"].pop("finalizers")
        result = self._write(rt, obj, new, validate=False)
        key = (result["metadata"].get("namespace", "") if rt.namespaced else "",
               result["metadata"]["name"])
        return result, key not in self._objects.get(rt.key, {})

    def _mark_terminating(self, rt: ResourceType, obj: Obj, seconds: int) -> Obj:
        new = copy.deepcopy(obj)
        meta = new["metadata"]
        meta["deletionTimestamp"] = timestamp(self.clock() + timedelta(seconds=seconds))
        meta["deletionGracePeriodSeconds"] = seconds
        meta["resourceVersion"] = str(self._next_rv())
        self._put(rt, new, obj)
        self._emit("MODIFIED", rt, new, obj)
        return new

    def _remove(self, rt: ResourceType, obj: Obj, policy: str) -> Obj:
        meta = obj["metadata"]
        ns, name = meta.get("namespace", "") if rt.namespaced else "", meta["name"]
        stored = self._objects[rt.key].pop((ns, name))
        self._by_uid.pop(stored["metadata"]["uid"], None)
        for owner in owner_uids(stored):
            self._dependents.get(owner, set()).discard((rt, ns, name))
        final = copy.deepcopy(obj)
        final["metadata"]["resourceVersion"] = str(self._next_rv())
        self._emit("DELETED", rt, final, stored)
        self._collect(stored["metadata"]["uid"], policy)
        for owner in owner_uids(stored):  # an owner deleted in the foreground may go now
            if owner not in self._by_uid:
                continue
            owner_rt, owner_ns, owner_name = self._by_uid[owner]
            held = self._objects[owner_rt.key][(owner_ns, owner_name)]
            if FOREGROUND in (held["metadata"].get("finalizers") or []):
                self._release_foreground(owner_rt, held)
        return final

    def _collect(self, owner_uid: str, policy: str) -> None:
        """Garbage-collect (or orphan) the dependents of a deleted owner."""
        dependents = self._dependents.pop(owner_uid, set())
        for rt, ns, name in sorted(dependents, key=lambda d: (d[0].key, d[1], d[2])):
            dep = self._objects.get(rt.key, {}).get((ns, name))
            if dep is None:
                continue
            refs = dep["metadata"].get("ownerReferences") or []
            others = [r for r in refs if r.get("uid") != owner_uid]
            alive = [r for r in others if r.get("uid") in self._by_uid]
            if policy == "Orphan" or alive:
                new = copy.deepcopy(dep)
                kept = others if policy == "Orphan" else alive
                if kept:
                    new["metadata"]["ownerReferences"] = kept
                else:
                    new["metadata"].pop("ownerReferences", None)
                self._write(rt, dep, new, validate=False)
            else:
                self._delete(rt, dep, "Background", None)

    def _put(self, rt: ResourceType, obj: Obj, old: Obj | None) -> None:
        meta = obj["metadata"]
        key = (meta.get("namespace", "") if rt.namespaced else "", meta["name"])
        self._objects.setdefault(rt.key, {})[key] = obj
        self._by_uid[meta["uid"]] = (rt, key[0], key[1])
        for owner in owner_uids(old) if old else ():
            self._dependents.get(owner, set()).discard((rt, *key))
        for owner in owner_uids(obj):
            self._dependents.setdefault(owner, set()).add((rt, *key))

    def _emit(self, kind: str, rt: ResourceType, obj: Obj, old: Obj | None) -> None:
        self._history.append(WatchEvent(self._rv, kind, rt, obj, old))
        while len(self._history) > self.history_size:
            self.compacted_rv = self._history.popleft().rv
        self.changed.notify_all()

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _generate_name(self, rt: ResourceType, ns: str, prefix: str) -> str:
        existing = self._objects.get(rt.key, {})
        while True:
            name = prefix[:58] + "".join(secrets.choice(_NAME_CHARS) for _ in range(5))
            if (ns, name) not in existing:
                return name
