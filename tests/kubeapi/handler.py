"""HTTP plumbing: URL → (kind, namespace, name, subresource) → verb → store call → JSON.

Paths served (as the real API server lays them out)::

    /api/v1/namespaces/{ns}/{plural}[/{name}[/status]]
    /api/v1/{plural}[/{name}[/status]]                  cluster-wide list/watch, cluster kinds
    /apis/{group}/{version}/namespaces/{ns}/{plural}[/{name}[/status]]
    /apis/{group}/{version}/{plural}[/{name}[/status]]
    .../watch/...                                       the legacy watch prefix
    /api, /apis, /api/v1, /apis/{group}[/{version}], /version   discovery

Every answer is JSON; every failure is a ``Status`` with the real code and reason.
"""
from __future__ import annotations

import io
import json
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.kubeapi import discovery
from tests.kubeapi.errors import APIError, bad_request, method_not_allowed, no_route
from tests.kubeapi.resources import Registry, ResourceType
from tests.kubeapi.selectors import matcher
from tests.kubeapi.watch import serve_watch

if TYPE_CHECKING:
    from tests.kubeapi.server import KubeAPIServer, Slow


@dataclass(frozen=True)
class Route:
    rt: ResourceType
    namespace: str | None  # None: all namespaces (or a cluster-scoped kind)
    name: str | None
    subresource: str | None
    watch_path: bool

    @property
    def resource(self) -> str:
        """How calls are counted: ``pods``, ``pods/status``, ``runnersets.gitscale.dev``…"""
        return f"{self.rt.key}/{self.subresource}" if self.subresource else self.rt.key

    def verb(self, method: str, params: dict[str, str]) -> str:
        watching = self.watch_path or params.get("watch") in ("true", "1")
        if method == "GET":
            return "watch" if watching else ("get" if self.name else "list")
        verbs = {("POST", False): "create", ("PUT", True): "update", ("PATCH", True): "patch",
                 ("DELETE", True): "delete", ("DELETE", False): "deletecollection"}
        verb = verbs.get((method, self.name is not None))
        if verb is None or (self.subresource and verb not in ("update", "patch")):
            raise method_not_allowed(method)
        if self.rt.namespaced and self.namespace is None and verb != "watch":
            raise method_not_allowed(method)
        return verb


def parse_path(registry: Registry, path: str) -> Route:
    parts = [unquote(p) for p in path.strip("/").split("/")]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise no_route()
    watch_path = bool(rest) and rest[0] == "watch"
    if watch_path:
        rest = rest[1:]
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise no_route()
    rt = registry.by_url(group, version, rest[0])
    if rt is None or (namespace is not None and not rt.namespaced):
        raise no_route()
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    if subresource is not None and (subresource != "status" or not rt.has_status):
        raise no_route()
    if name is not None and rt.namespaced and namespace is None:
        raise no_route()
    return Route(rt, namespace, name, subresource, watch_path)


def _dry_run(params: dict[str, str], options: dict[str, Any]) -> bool:
    return params.get("dryRun") == "All" or "All" in (options.get("dryRun") or [])


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # headers and body are two writes: with Nagle's algorithm the body waited for the client's
    # delayed ACK of the headers, 40 ms on every call over a kept-alive connection
    disable_nagle_algorithm = True
    server: KubeAPIServer

    def setup(self) -> None:
        super().setup()
        self.server.track_connection(self.connection, open_=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track_connection(self.connection, open_=False)

    def log_message(self, format: str, *args: Any) -> None:  # the stdlib names it "format"
        pass  # the call counters and server.log are the record

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # -- dispatch ----------------------------------------------------------------------------
    def _handle(self, method: str) -> None:
        url = urlsplit(self.path)
        params = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        status = streaming = 0
        # recorded as the answer goes out (``_send_json``), not after: a client that has its
        # answer finds the call in ``server.log`` (a list's last page was missing from it)
        self._arrival, self._recorded, self._hidden = self.server.arrived(), False, False
        try:
            raw = self._read_body()
            doc = discovery.document(self.server, url.path) if method == "GET" else None
            if doc is not None:
                self.server.count("discover", url.path)
                status = self._send_json(200, doc)
                return
            try:
                route = parse_path(self.server.registry, url.path)
                verb = route.verb(method, params)
            except APIError:
                self.server.count(method.lower(), "unknown")
                raise
            self.server.count(verb, route.resource)
            self.server.before_call(verb, route.resource, params)
            slow = self.server.slowness(verb, route.resource)
            if slow is not None:  # this answer goes out slowly; the connection ends with it
                self.wfile, self.close_connection = _SlowWriter(self.wfile, slow), True
            if verb == "watch":
                status = streaming = 200
                serve_watch(self, self.server, route.rt, route.namespace, route.name, params)
                return
            lost = self.server.after_call(verb, route.resource)
            if lost is not None:  # made, but its answer is lost: the client sees the error
                real, self.wfile, self._hidden = self.wfile, io.BytesIO(), True
                try:
                    self._dispatch(verb, route, params, raw)
                finally:
                    self.wfile, self._hidden = real, False
                raise lost
            status = self._dispatch(verb, route, params, raw)
        except APIError as exc:
            status = self._send_json(exc.code, exc.status(), {} if exc.retry_after is None
                                     else {"Retry-After": str(exc.retry_after)})
        except Exception as exc:  # a bug in the fake must still answer
            if streaming:
                raise
            status = self._send_json(500, APIError(500, "InternalError",
                                                   f"kubeapi fake crashed: {exc!r}").status())
            raise
        finally:
            if isinstance(self.wfile, _SlowWriter):
                self.wfile = self.wfile.inner
            if not self._recorded:  # (a watch's stream, or an answer never sent)
                self.server.record(f"{method} {self.path}", status, self._arrival)

    def _dispatch(self, verb: str, route: Route, params: dict[str, str], raw: bytes) -> int:
        store, rt, ns = self.server.store, route.rt, route.namespace or ""
        if verb == "get":
            assert route.name is not None
            return self._send_json(200, store.get(rt, ns, route.name))
        if verb == "list":
            match = matcher(rt, route.namespace, params.get("labelSelector"),
                            params.get("fieldSelector"))
            try:
                limit = int(params.get("limit") or 0)
            except ValueError:
                raise bad_request(f"invalid limit {params['limit']!r}") from None
            items, rv, token, remaining = store.list_objects(rt, match, limit=limit,
                                                     continue_token=params.get("continue"))
            meta: dict[str, Any] = {"resourceVersion": str(rv)}
            if token:
                meta.update({"continue": token, "remainingItemCount": remaining})
            if "as=PartialObjectMetadataList" in self.headers.get("Accept", ""):
                # metadata only, as the API server sends it when asked (kubectl get -o name)
                self.server.metadata_lists.append(route.resource)
                partial = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1"}
                return self._send_json(200, {
                    "kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                    "metadata": meta,
                    "items": [{**partial, "metadata": i["metadata"]} for i in items]})
            return self._send_json(200, {"kind": f"{rt.kind}List", "apiVersion": rt.api_version,
                                         "metadata": meta, "items": items})
        if verb == "create":
            body = self._json(raw)
            return self._send_json(201, store.create(rt, ns, body, dry_run=_dry_run(params, {})))
        if verb == "update":
            assert route.name is not None
            return self._send_json(200, store.update(rt, ns, route.name, self._json(raw),
                                                     subresource=route.subresource,
                                                     dry_run=_dry_run(params, {})))
        if verb == "patch":
            assert route.name is not None
            content_type = self.headers.get("Content-Type", "")
            return self._send_json(200, store.patch(rt, ns, route.name, raw, content_type,
                                                    subresource=route.subresource,
                                                    dry_run=_dry_run(params, {})))
        options = self._delete_options(params, raw)
        if verb == "delete":
            assert route.name is not None
            obj, gone = store.delete(rt, ns, route.name, options,
                                     dry_run=_dry_run(params, options))
            if not gone:  # the real server says 202 only for an explicit orphanDependents=false
                return self._send_json(202 if options.get("orphanDependents") is False else 200,
                                       obj)
            if rt.return_deleted_object:
                return self._send_json(200, obj)
            return self._send_json(200, _success(rt, obj))
        match = matcher(rt, route.namespace, params.get("labelSelector"),
                        params.get("fieldSelector"))
        store.delete_collection(rt, match, options)
        return self._send_json(200, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                     "status": "Success"})

    # -- I/O ---------------------------------------------------------------------------------
    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    @staticmethod
    def _json(raw: bytes) -> Any:
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise bad_request(f"the request body is not valid JSON: {exc}") from None

    def _delete_options(self, params: dict[str, str], raw: bytes) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if params.get("gracePeriodSeconds"):
            options["gracePeriodSeconds"] = int(params["gracePeriodSeconds"])
        if params.get("propagationPolicy"):
            options["propagationPolicy"] = params["propagationPolicy"]
        if params.get("orphanDependents"):
            options["orphanDependents"] = params["orphanDependents"] == "true"
        if raw.strip():
            body = self._json(raw)
            if not isinstance(body, dict):
                raise bad_request("DeleteOptions must be an object")
            options.update({k: v for k, v in body.items() if v is not None})
        return options

    def _send_json(self, code: int, body: Any, headers: dict[str, str] | None = None) -> int:
        data = json.dumps(body, separators=(",", ":")).encode()
        if not self._hidden and not self._recorded:
            self._recorded = True
            self.server.record(f"{self.command} {self.path}", code, self._arrival)
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        return code


class _SlowWriter(io.RawIOBase):
    """The handler's ``wfile`` while it answers a call ``KubeAPIServer.slow`` matched: what
    ``rule.after`` lets through at once (the first write, the status line and headers, and so
    many bytes of the body), then the rest a byte every ``rule.every`` seconds, or nothing; all
    at once after ``rule.release``."""

    def __init__(self, inner: Any, rule: Slow) -> None:
        super().__init__()
        self.inner, self.rule = inner, rule
        self.writes = self.body = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:  # (bytes, or a buffer of them)
        data = bytes(data)
        self.writes += 1
        at_once = 0
        if self.rule.after is not None:
            # (``end_headers`` writes the status line and headers at once: the first write)
            at_once = len(data) if self.writes == 1 else min(
                max(self.rule.after - self.body, 0), len(data))
            self.body += at_once if self.writes > 1 else 0
        self.inner.write(data[:at_once])
        release, every = self.rule.release, self.rule.every
        for at in range(at_once, len(data)) if every is not None else ():
            if not release.is_set():
                release.wait(every)
            self.inner.write(data[at:at + 1])
        if every is None and at_once < len(data):
            release.wait()
            self.inner.write(data[at_once:])
        return len(data)

    def flush(self) -> None:
        self.inner.flush()


def _success(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata", {})
    details: dict[str, Any] = {"name": meta.get("name"), "kind": rt.plural, "uid": meta.get("uid")}
    if rt.group:
        details["group"] = rt.group
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": details}
