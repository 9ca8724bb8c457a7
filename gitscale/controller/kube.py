"""The Kubernetes API, behind a few verbs: the ``Kube`` the controller is given.

With ``kube_config.py`` (loading the kubeconfig, holding its credentials, making the clients)
and ``kube_answers.py`` (reading the answers, translating the client's errors), the only
modules that import ``kubernetes`` (``tests/controller/test_layers.py``).

Bodies travel as plain dicts (``RawObject``): every call asks the client for the raw response
(``_preload_content=False``) and parses the JSON itself, so 500 pods are not turned into model
objects and back. ``ApiException`` and connection failures become ``KubeError`` subclasses
(``NotFound``, ``Conflict``, ``Invalid``, ``Gone``: ``kube_answers.call``); nothing above these
modules sees the client.

No call waits forever: each has a connect timeout (``CONNECT_TIMEOUT``, 10 s) and a deadline
for its whole answer (``TIMEOUT``, 30 s from the request sent: its headers and body, however
slowly they come, ``kube_deadline.py``; the client has none by default, and a black-holed
connection, or an API server or a proxy that trickles its answer, would hold a worker, or a
leader's renewal, for good); a call over its deadline is a ``KubeError`` that says the API
server answered too slowly, like one that got no answer: the pass fails and backs off. A watch
has the same to connect and for its headers; its events may come for its ``timeout_seconds``
and ``TIMEOUT`` more (the API server ends it at ``timeout_seconds``: a watch that goes silent,
or trickles, past that is ended, and the informer watches again). Each call is tried once
(``kube_config.Once``: urllib3's three retries would multiply the timeout and log a warning
each, where the next pass, the informers' backoff and the elector retry by themselves; only a
read whose kept-alive connection was reset as it was reused is sent again). Lease calls take
the caller's timeout (below the renew deadline) for the whole call, through a client of their
own. Lists go by pages of ``page_size`` (``limit`` and ``continue``), each page reduced by
``keep`` before the next is read, so a relist of 10,000 pods never holds them all as the API
sent them; a continue token that expired meanwhile (410) starts the list again.
"""
from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Callable, cast

import kubernetes.client
import urllib3

from gitscale.controller.errors import CredentialsMissing, Gone, KubeError, NotFound
from gitscale.controller.kube_answers import (
    WatchEvent,
    answer,
    call,
    event_of,
    overdue,
    page_of,
)
from gitscale.controller.kube_config import without_retries
from gitscale.controller.kube_deadline import streaming
from gitscale.controller.observe import LABEL_SET, RawObject
from gitscale.redact import redact
from gitscale.runnerset_api import API_VERSION, GROUP, KIND, PLURAL, VERSION

JSON = "application/json"
Keep = Callable[[RawObject], RawObject]  # what a list keeps of each object
TIMEOUT = 30.0  # seconds for a call's whole answer, from its request sent (a watch's: more)
CONNECT_TIMEOUT = 10.0  # seconds to connect (at most TIMEOUT)
PAGE_SIZE = 500
# Objects' metadata only, as the API server sends it when asked (``PartialObjectMetadataList``)
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
RELISTS = 3  # times a list whose continue token expired is started again
log = logging.getLogger("gitscale.controller")


def _whole(obj: RawObject) -> RawObject:
    return obj


def _metadata(obj: RawObject) -> RawObject:
    return {"metadata": obj.get("metadata") or {}}



class Kube:
    def __init__(self, api: kubernetes.client.ApiClient, *, timeout: float = TIMEOUT,
                 page_size: int = PAGE_SIZE) -> None:
        self.api = api
        self.core = kubernetes.client.CoreV1Api(api)
        self.custom = kubernetes.client.CustomObjectsApi(api)
        self._lease_api = without_retries(api)
        self.coordination = kubernetes.client.CoordinationV1Api(self._lease_api)
        self.page_size = page_size
        self._timeout = (min(CONNECT_TIMEOUT, timeout), timeout)
        # Called in the calling thread after every call, answered or not (liveness: the
        # thread is not stuck).
        self.on_return: Callable[[], None] | None = None
        self._streams: set[urllib3.HTTPResponse] = set()
        self._watching = True  # False once stop_watches ran: a watch opening then ends at once
        self._lock = threading.Lock()

    def close(self) -> None:
        self.stop_watches()
        self.api.close()  # type: ignore[no-untyped-call]
        self._lease_api.close()  # type: ignore[no-untyped-call]

    def _call(self, what: str, fn: Callable[[], Any], *, read: bool = True) -> Any:
        """``fn``'s answer (a raw response), read whole and parsed: its JSON; or, not
        ``read``, the raw response, its body not read yet (a watch's stream)."""
        try:
            return answer(what, fn) if read else call(what, fn)
        finally:
            if self.on_return is not None:
                self.on_return()

    # -- RunnerSets -------------------------------------------------------------------------
    def list_runnersets(self, namespace: str | None,
                        keep: Keep = _whole) -> tuple[list[RawObject], str]:
        if namespace:
            return self._list(f"list RunnerSets in {namespace}", lambda kw: self.custom.
                              list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                            **kw), KIND, API_VERSION, keep)
        return self._list("list RunnerSets", lambda kw: self.custom.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, **kw), KIND, API_VERSION, keep)

    def watch_runnersets(self, namespace: str | None, version: str,
                         timeout: int) -> Iterator[WatchEvent]:
        kw = self._watch_args(version, timeout)
        if namespace:
            return self._stream("watch RunnerSets", timeout, lambda: self.custom.
                                list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                              **kw))
        return self._stream("watch RunnerSets", timeout, lambda: self.custom.
                            list_cluster_custom_object(GROUP, VERSION, PLURAL, **kw))

    def read_runnerset(self, namespace: str, name: str) -> RawObject | None:
        """The RunnerSet as the API server holds it now, or None when it is gone: a list by
        name (the Role grants list, not get; a list that names no resourceVersion is a
        consistent read: never older than a write already answered)."""
        items, _ = self._list(f"read RunnerSet {namespace}/{name}", lambda kw: self.custom.
                              list_namespaced_custom_object(
                                  GROUP, VERSION, namespace, PLURAL,
                                  field_selector=f"metadata.name={name}", **kw),
                              KIND, API_VERSION, _whole)
        return items[0] if items else None

    def patch_runnerset_status(self, namespace: str, name: str, status: Mapping[str, Any], *,
                               resource_version: str | None = None) -> RawObject:
        """A JSON merge patch of ``status`` through the status subresource; with
        ``resource_version``, only on that version of the set (Conflict otherwise: the API
        server takes a ``metadata.resourceVersion`` in a patch as a precondition, on the
        status subresource too, and the version counts every write to the object, its spec's
        included)."""
        body: dict[str, Any] = {"status": dict(status)}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        return self._merge_patch(f"update status of RunnerSet {namespace}/{name}",
                                 self.custom.patch_namespaced_custom_object_status,
                                 namespace, name, body)

    def patch_runnerset_finalizers(self, namespace: str, name: str, finalizers: list[str],
                                   resource_version: str) -> RawObject:
        """A JSON merge patch of ``metadata.finalizers`` (a list: replaced whole), only on
        ``resource_version`` (Conflict otherwise), so another controller's finalizer written
        meanwhile is never overwritten."""
        patch = {"metadata": {"finalizers": finalizers or None,
                              "resourceVersion": resource_version}}
        return self._merge_patch(f"update finalizers of RunnerSet {namespace}/{name}",
                                 self.custom.patch_namespaced_custom_object,
                                 namespace, name, patch)

    def _merge_patch(self, what: str, patch: Callable[..., Any], namespace: str, name: str,
                     body: dict[str, Any]) -> RawObject:
        """A JSON merge patch of the RunnerSet ``name`` (``patch``: the object or its status
        subresource); the object as the API server now holds it."""
        updated: RawObject = self._call(what, lambda: patch(
            GROUP, VERSION, namespace, PLURAL, name, body,
            _content_type="application/merge-patch+json", _preload_content=False,
            _request_timeout=self._timeout))
        return updated

    # -- pods and secrets ---------------------------------------------------------------------
    def list_pods(self, namespace: str | None,
                  keep: Keep = _whole) -> tuple[list[RawObject], str]:
        if namespace:
            return self._list("list runner pods", lambda kw: self.core.list_namespaced_pod(
                namespace, label_selector=LABEL_SET, **kw), "Pod", "v1", keep)
        return self._list("list runner pods", lambda kw: self.core.list_pod_for_all_namespaces(
            label_selector=LABEL_SET, **kw), "Pod", "v1", keep)

    def watch_pods(self, namespace: str | None, version: str,
                   timeout: int) -> Iterator[WatchEvent]:
        kw = self._watch_args(version, timeout)
        if namespace:
            return self._stream("watch runner pods", timeout, lambda: self.core.
                                list_namespaced_pod(namespace, label_selector=LABEL_SET, **kw))
        return self._stream("watch runner pods", timeout, lambda: self.core.
                            list_pod_for_all_namespaces(label_selector=LABEL_SET, **kw))

    def create_pod(self, body: RawObject, *, dry_run: bool = False) -> RawObject:
        """``dry_run``: admission (quota, webhooks) and validation only, nothing stored."""
        meta, raw_body = body["metadata"], cast(Any, body)  # the client takes dicts too
        created: RawObject = self._call(
            f"create pod {meta['namespace']}/{meta['name']}", lambda: self.core.
            create_namespaced_pod(meta["namespace"], raw_body, _content_type=JSON,
                                  dry_run="All" if dry_run else None,
                                  _preload_content=False, _request_timeout=self._timeout))
        return created

    def find_pod(self, namespace: str, name: str) -> RawObject | None:
        """The runner pod of that name, or None (a list by name: the Role grants no get)."""
        items, _ = self._list(f"look for pod {namespace}/{name}", lambda kw: self.core.
                              list_namespaced_pod(namespace, label_selector=LABEL_SET,
                                                  field_selector=f"metadata.name={name}", **kw),
                              "Pod", "v1", _whole)
        return items[0] if items else None

    def delete_pod(self, namespace: str, name: str) -> RawObject | None:
        """The pod as it now is (terminating), or None once it is gone. NotFound if it was."""
        raw: RawObject = self._call(f"delete pod {namespace}/{name}", lambda: self.core.
                                    delete_namespaced_pod(name, namespace, _preload_content=False,
                                                          _request_timeout=self._timeout))
        return raw if raw.get("kind") == "Pod" else None

    def create_secret(self, body: RawObject, *, dry_run: bool = False) -> RawObject:
        """Create a Secret (a runner's JIT config). Its values, as sent (base64) and decoded,
        are masked in the error when the API server refuses it: an admission webhook may quote
        the object. They are not held for masking (``redact.hold``): one per runner would
        fill the registry of a controller that runs for months. ``dry_run``: authorization,
        admission and validation only, nothing stored."""
        meta, raw_body = body["metadata"], cast(Any, body)
        try:
            self._call(f"create Secret {meta['namespace']}/{meta['name']}", lambda: self.core.
                       create_namespaced_secret(meta["namespace"], raw_body, _content_type=JSON,
                                                dry_run="All" if dry_run else None,
                                                _preload_content=False,
                                                _request_timeout=self._timeout))
        except KubeError as exc:
            masked = redact(str(exc), _secret_values(body))
            if masked == str(exc):
                raise
            raise type(exc)(masked, exc.status, exc.reason, unreachable=exc.unreachable,
                            retry_after=exc.retry_after) from None
        return body

    def own_secret(self, namespace: str, name: str, owners: list[dict[str, Any]]) -> None:
        """Replace a Secret's ownerReferences (a JIT config handed from its set to its pod)."""
        patch = {"metadata": {"ownerReferences": owners}}
        self._call(f"update owner of Secret {namespace}/{name}", lambda: self.core.
                   patch_namespaced_secret(name, namespace, patch,
                                           _content_type="application/merge-patch+json",
                                           _preload_content=False,
                                           _request_timeout=self._timeout))

    def delete_secret(self, namespace: str, name: str) -> None:
        """Delete a Secret; already gone is fine."""
        try:
            self._call(f"delete Secret {namespace}/{name}", lambda: self.core.
                       delete_namespaced_secret(name, namespace, _preload_content=False,
                                                _request_timeout=self._timeout))
        except NotFound:
            pass

    def list_runner_secrets(self, namespace: str, set_name: str) -> list[RawObject]:
        """The Secrets labelled as the set's (its runners' JIT configs): their metadata only
        (name, owners, creation time), asked for as ``PartialObjectMetadata`` so that no
        Secret's data reaches the controller; kept so even from a server that sent it."""
        items, _ = self._list(
            f"list Secrets of RunnerSet {namespace}/{set_name}", lambda kw: self.core.
            list_namespaced_secret(namespace, label_selector=f"{LABEL_SET}={set_name}",
                                   _headers={"Accept": METADATA_ONLY}, **kw),
            "PartialObjectMetadata", "meta.k8s.io/v1", _metadata)
        return items

    def read_secret(self, namespace: str, name: str) -> dict[str, str]:
        """A Secret's data, decoded. Its values are credentials: never log them."""
        try:
            raw = self._call(f"read Secret {namespace}/{name}", lambda: self.core.
                             read_namespaced_secret(name, namespace, _preload_content=False,
                                                    _request_timeout=self._timeout))
        except NotFound:
            raise CredentialsMissing(f"Secret {namespace}/{name} does not exist") from None
        try:
            return {k: base64.b64decode(v).decode() for k, v in (raw.get("data") or {}).items()}
        except (ValueError, UnicodeDecodeError):
            raise CredentialsMissing(f"Secret {namespace}/{name} holds undecodable data") \
                from None

    # -- events -------------------------------------------------------------------------------
    def create_event(self, body: Mapping[str, Any]) -> None:
        """A core/v1 Event in its object's namespace (``events.body``)."""
        meta, raw_body = body["metadata"], cast(Any, dict(body))
        self._call(f"create Event {meta['namespace']}/{meta['name']}", lambda: self.core.
                   create_namespaced_event(meta["namespace"], raw_body, _content_type=JSON,
                                           _preload_content=False,
                                           _request_timeout=self._timeout))

    def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """A JSON merge patch of an Event (a repeat: ``events.repeat``). NotFound once the API
        server's event TTL has removed it."""
        self._call(f"update Event {namespace}/{name}", lambda: self.core.patch_namespaced_event(
            name, namespace, dict(patch), _content_type="application/merge-patch+json",
            _preload_content=False, _request_timeout=self._timeout))

    # -- leader election (``timeout``: seconds for the whole call, one attempt) ----------------
    def read_lease(self, namespace: str, name: str, *, timeout: float) -> RawObject | None:
        try:
            lease: RawObject = self._call(
                f"read Lease {namespace}/{name}", lambda: self.coordination.
                read_namespaced_lease(name, namespace, _preload_content=False,
                                      _request_timeout=timeout))
        except NotFound:
            return None
        return lease

    def create_lease(self, body: RawObject, *, timeout: float) -> RawObject:
        """Conflict (AlreadyExists) when another candidate created it first."""
        meta, raw_body = body["metadata"], cast(Any, body)
        lease: RawObject = self._call(
            f"create Lease {meta['namespace']}/{meta['name']}", lambda: self.coordination.
            create_namespaced_lease(meta["namespace"], raw_body, _content_type=JSON,
                                    _preload_content=False, _request_timeout=timeout))
        return lease

    def replace_lease(self, body: RawObject, *, timeout: float) -> RawObject:
        """An update on ``metadata.resourceVersion``: Conflict when someone wrote it since."""
        meta, raw_body = body["metadata"], cast(Any, body)
        lease: RawObject = self._call(
            f"update Lease {meta['namespace']}/{meta['name']}", lambda: self.coordination.
            replace_namespaced_lease(meta["name"], meta["namespace"], raw_body,
                                     _content_type=JSON, _preload_content=False,
                                     _request_timeout=timeout))
        return lease

    # -- list plumbing ------------------------------------------------------------------------
    def _list(self, what: str, fetch: Callable[[dict[str, Any]], Any], kind: str,
              api_version: str, keep: Keep) -> tuple[list[RawObject], str]:
        """Every page of a list, each object through ``keep``; the list's resourceVersion."""
        for _ in range(RELISTS):
            items: list[RawObject] = []
            version, token = "", ""
            try:
                while True:
                    kw: dict[str, Any] = {"limit": self.page_size, "_preload_content": False,
                                          "_request_timeout": self._timeout}
                    if token:
                        kw["_continue"] = token
                    page, meta = page_of(self._call(what, lambda: fetch(kw)), kind,
                                         api_version)
                    items.extend(keep(item) for item in page)
                    version = version or str(meta.get("resourceVersion", ""))
                    token = str(meta.get("continue") or "")
                    if not token:
                        return items, version
            except Gone:
                if not token:
                    raise
                log.info("%s: the list expired while paging (410), listing again", what)
        raise Gone(f"{what}: the list expired while paging, {RELISTS} times", 410, "Expired")

    # -- watch plumbing -----------------------------------------------------------------------
    def stop_watches(self) -> None:
        """End every open watch stream (shutdown): their iterators then simply stop; so does
        one being opened now (its informer would otherwise hold the stop for its join's 5 s)."""
        with self._lock:
            self._watching = False
            streams = list(self._streams)
        for stream in streams:
            try:
                stream.shutdown()
            except Exception:  # noqa: BLE001 - closing is best effort
                stream.close()

    def _watch_args(self, version: str, timeout: int) -> dict[str, Any]:
        return {"watch": True, "resource_version": version, "allow_watch_bookmarks": True,
                "timeout_seconds": timeout, "_preload_content": False,
                "_request_timeout": self._timeout}

    def _stream(self, what: str, timeout: int,
                open_: Callable[[], Any]) -> Iterator[WatchEvent]:
        """The events of a watch the API server ends after ``timeout`` seconds: they may come
        for ``TIMEOUT`` seconds more (``kube_deadline.streaming``), then the stream is ended
        (an API server, or a proxy, that went silent or trickles: said, and the caller
        watches again)."""
        within = timeout + self._timeout[1]
        with streaming(within):
            response = self._call(what, open_, read=False)
        with self._lock:
            watching = self._watching
            if watching:
                self._streams.add(response)
        if not watching:  # stopped while it was being opened
            response.close()
            return
        try:
            buffer = b""
            for chunk in response.stream(amt=None, decode_content=False):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield event_of(what, line)
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            if overdue(exc) is not None:
                log.warning("%s: the API server answered too slowly: the watch, to end after "
                            "%ds, was not over %gs after it was asked; ended, to watch again",
                            what, timeout, within)
            return  # the stream broke (or was shut down): the caller watches again
        finally:
            with self._lock:
                self._streams.discard(response)
            response.release_conn()


def _secret_values(body: RawObject) -> list[str]:
    """A Secret's values: ``data`` as sent (base64) and decoded, and ``stringData``."""
    plain, data = body.get("stringData"), body.get("data")
    values = [str(v) for v in plain.values()] if isinstance(plain, dict) else []
    for value in data.values() if isinstance(data, dict) else ():
        values.append(str(value))
        try:
            values.append(base64.b64decode(str(value)).decode())
        except (ValueError, UnicodeDecodeError):
            pass
    return values
