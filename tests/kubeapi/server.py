"""A Kubernetes-shaped API server on 127.0.0.1 for tests and benchmarks (no cluster needed).

The real ``kubernetes`` client talks to it over HTTP::

    server = start_api_server()                     # ephemeral port, daemon threads
    core = kubernetes.client.CoreV1Api(api_client(server.url))
    core.create_namespaced_pod("default", {"metadata": {"name": "p"}, "spec": {...}})
    server.set_pod_phase("default", "p", "Running")  # play kubelet: MODIFIED event, new version
    assert server.call_count("create", "pods") == 1
    server.stop()                                   # also ends open watch streams

Serves core/v1 pods, secrets, events and configmaps, coordination.k8s.io/v1 leases (leader
election) and gitscale.dev/v1alpha1 runnersets (with ``/status``); ``register_resource`` adds
another custom resource. Semantics live in store.py
(versions, conflicts, finalizers, GC), watch.py (streams) and handler.py (routes, verbs).

Test seams: ``calls``/``call_count``/``reset_calls`` (API calls by verb and resource),
``latency`` (seconds slept before every call), ``admit`` / ``quota`` (admission checks of creations: a ResourceQuota, a webhook that
denies), ``inject_error`` (fail the next N matching
calls, after letting ``skip`` through; ``applied``: make the call, then answer the error, as a
timeout after etcd stored the object; ``clear_errors`` ends them), ``hang`` (matching calls get
no answer until the returned event is set: a black-holed request), ``on_call`` (run a function
before every call, with its verb, resource and query), ``objects``/``get_object`` (read the
store without counting), ``create_object``,
``mutate_object``, ``set_pod_phase``, ``compact`` (force 410 for older watch resumes),
``drop_watches`` (end every open stream, as an apiserver restart would), ``cut_watches_after``
(seconds after which every watch stream ends cleanly, whatever its timeout: 0 ends each at once,
as a proxy that cuts long requests would; None, the default, never),
``graceful_pod_deletion`` (pods linger with deletionTimestamp until ``finish_pod_deletions``),
``write_kubeconfig`` (for a controller run as a subprocess) and ``log`` (one line per request,
``"METHOD /path?query -> status"``), ``slow`` (matching calls answered a byte at a time, or
stalled, from the start or after the headers: an API server that accepts a request and answers
too slowly, a watch that goes silent). ``running_api_server()`` is the context-manager form;
tests/kubeapi/fixtures.py has the ``kube_api`` and ``kube_client`` pytest fixtures.

Run it by hand with ``python -m tests.kubeapi.server [--port N] [--kubeconfig PATH]``.
"""
from __future__ import annotations

import argparse
import bisect
import collections
import copy
import json
import socket
import ssl
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from http.server import ThreadingHTTPServer
from pathlib import Path
from socketserver import BaseServer
from typing import Any, Callable, Iterator

import kubernetes.client

from tests.kubeapi.errors import APIError, quota_exceeded
from tests.kubeapi.handler import Handler
from tests.kubeapi.resources import Registry, ResourceType, custom_resource
from tests.kubeapi.selectors import matcher
from tests.kubeapi.store import Obj, Store, utc_now


@dataclass
class _InjectedError:
    verb: str | None
    resource: str | None
    error: APIError
    remaining: int
    skip: int = 0  # matching calls let through first
    applied: bool = False  # the call is made, and the error answered (a lost answer)


@dataclass
class _Hang:
    verb: str | None
    resource: str | None
    release: threading.Event


@dataclass
class Slow:
    """How a matching call is answered (``KubeAPIServer.slow``)."""
    verb: str | None
    resource: str | None
    every: float | None  # seconds between two bytes; None: a stall
    after: int | None  # bytes of the body sent at once, after the headers; None: none of it
    release: threading.Event  # once set, the rest goes out at once


def _resource_matches(wanted: str | None, counted: str) -> bool:
    """``pods`` matches ``pods``; ``runnersets`` matches ``runnersets.gitscale.dev`` and
    ``runnersets/status`` matches ``runnersets.gitscale.dev/status``."""
    if wanted is None or wanted == counted:
        return True
    base, _, sub = counted.partition("/")
    wanted_base, _, wanted_sub = wanted.partition("/")
    return sub == wanted_sub and base.split(".", 1)[0] == wanted_base


class KubeAPIServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # a controller opening many connections at once must not see resets

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, latency: float = 0.0,
                 history_size: int = 10_000, bookmark_interval: float = 1.0,
                 clock: Callable[[], datetime] = utc_now) -> None:
        super().__init__((host, port), Handler)
        self.registry = Registry()
        self.store = Store(self.registry, history_size=history_size, clock=clock)
        self.latency = latency
        self.bookmark_interval = bookmark_interval
        self.stopping = False
        self.watch_epoch = 0
        self.cut_watches_after: float | None = None
        self.open_watches = 0  # streams being served (guarded by store.lock)
        self.calls: collections.Counter[tuple[str, str]] = collections.Counter()
        # "METHOD PATH -> status" per request, in the order the requests arrived: a request
        # is written down once answered, and a client that sent its next request on another
        # connection as soon as it read the answer must not find it listed first
        self.log: list[str] = []
        self._log_order: list[int] = []  # (the arrival number of each line of ``log``)
        self._arrivals = 0
        self.metadata_lists: list[str] = []  # lists asked as PartialObjectMetadataList
        self._errors: list[_InjectedError] = []
        self._hangs: list[_Hang] = []
        self._slow: list[Slow] = []
        self._hooks: list[Callable[[str, str, dict[str, str]], None]] = []
        self._connections: set[socket.socket] = set()
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def address(self) -> str:
        host, port = self.server_address[:2]
        return f"{host!s}:{port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def start(self) -> KubeAPIServer:
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="kubeapi-server", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving: ends watch streams, closes kept-alive connections, frees the port."""
        with self.store.changed:
            self.stopping = True
            self.store.changed.notify_all()
        self.release_held()
        if self._thread is not None:
            self.shutdown()
            self._thread.join(timeout)
            self._thread = None
        deadline = time.monotonic() + timeout
        with self.store.changed:  # let streams finish their last chunk before sockets close
            self.store.changed.wait_for(lambda: self.open_watches == 0, timeout)
        while time.monotonic() < deadline:
            with self.store.lock:
                open_connections = list(self._connections)
            if not open_connections:
                break
            for conn in open_connections:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            time.sleep(0.01)
        self.server_close()

    def __enter__(self) -> KubeAPIServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def track_connection(self, conn: socket.socket, *, open_: bool) -> None:
        with self.store.lock:
            if open_:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A crash in the fake is a bug worth seeing; shutdown noise, or a client that gave up
        # waiting (a timeout) before the answer was written, is not.
        if not self.stopping and not isinstance(sys.exc_info()[1], ConnectionError):
            BaseServer.handle_error(self, request, client_address)

    # -- kinds -------------------------------------------------------------------------------
    def register_resource(self, group: str, version: str, plural: str, *, kind: str | None = None,
                          namespaced: bool = True, has_status: bool = True,
                          selectable_fields: tuple[str, ...] = ()) -> ResourceType:
        """Serve another custom resource (as an installed CRD would)."""
        return self.registry.add(custom_resource(group, version, plural, kind=kind,
                                                 namespaced=namespaced, has_status=has_status,
                                                 selectable_fields=selectable_fields))

    # -- counting, latency, injected failures (called by the handler) -------------------------
    def count(self, verb: str, resource: str) -> None:
        with self.store.lock:
            self.calls[(verb, resource)] += 1

    def arrived(self) -> int:
        """A request's arrival number, for ``record``."""
        with self.store.lock:
            self._arrivals += 1
            return self._arrivals

    def record(self, line: str, status: int, arrival: int) -> None:
        with self.store.lock:
            at = bisect.bisect(self._log_order, arrival)
            self._log_order.insert(at, arrival)
            self.log.insert(at, f"{line} -> {status}")

    def before_call(self, verb: str, resource: str, params: dict[str, str]) -> None:
        if self.latency > 0:
            time.sleep(self.latency)
        with self.store.lock:
            hooks = list(self._hooks)
            hangs = [h.release for h in self._hangs if h.verb in (None, verb)
                     and _resource_matches(h.resource, resource)]
        for hook in hooks:
            hook(verb, resource, params)
        for release in hangs:
            release.wait()
        with self.store.lock:
            for rule in self._errors:
                if (rule.remaining > 0 and not rule.applied and rule.verb in (None, verb)
                        and _resource_matches(rule.resource, resource)):
                    if rule.skip > 0:
                        rule.skip -= 1
                        continue
                    rule.remaining -= 1
                    raise rule.error

    def after_call(self, verb: str, resource: str) -> APIError | None:
        """The error to answer for a call that was made all the same (``applied`` rules)."""
        with self.store.lock:
            for rule in self._errors:
                if (rule.remaining > 0 and rule.applied and rule.verb in (None, verb)
                        and _resource_matches(rule.resource, resource)):
                    if rule.skip > 0:
                        rule.skip -= 1
                        continue
                    rule.remaining -= 1
                    return rule.error
        return None

    def call_count(self, verb: str | None = None, resource: str | None = None) -> int:
        """API calls so far, optionally only one verb (get, list, watch, create, update, patch,
        delete, deletecollection, discover) and/or one resource (``pods``, ``runnersets``,
        ``runnersets/status``…)."""
        with self.store.lock:
            return sum(n for (v, r), n in self.calls.items()
                       if verb in (None, v) and _resource_matches(resource, r))

    def calls_snapshot(self) -> dict[tuple[str, str], int]:
        with self.store.lock:
            return dict(self.calls)

    def reset_calls(self) -> None:
        with self.store.lock:
            self.calls.clear()
            self.log.clear()
            self._log_order.clear()

    def inject_error(self, verb: str | None = None, resource: str | None = None, *,
                     code: int = 500, reason: str = "InternalError",
                     message: str = "injected failure", times: int = 1,
                     skip: int = 0, applied: bool = False,
                     retry_after: int | None = None) -> None:
        """Fail the next ``times`` calls matching verb/resource with a Status of ``code``
        (after letting ``skip`` of them through). ``applied``: the call is made all the same,
        only its answer is the error (a timeout after etcd stored the object). ``retry_after``:
        seconds, in a ``Retry-After`` header and ``details.retryAfterSeconds`` (API Priority
        and Fairness's 429)."""
        with self.store.lock:
            self._errors.append(_InjectedError(verb, resource, APIError(
                code, reason, message, retry_after=retry_after), times, skip, applied))

    def hang(self, verb: str | None = None, resource: str | None = None) -> threading.Event:
        """Hold every matching call without an answer (a black-holed request) until the
        returned event is set; then it is served as usual. ``stop`` releases them all."""
        release = threading.Event()
        with self.store.lock:
            self._hangs.append(_Hang(verb, resource, release))
            if self.stopping:
                release.set()
        return release

    def release_held(self) -> None:
        """Answer every request ``hang`` holds, or ``slow`` slows, now: as their returned
        events would."""
        with self.store.lock:
            releases = [h.release for h in self._hangs] + [s.release for s in self._slow]
        for release in releases:
            release.set()

    def slow(self, verb: str | None = None, resource: str | None = None, *,
             every: float | None = None, after: int | None = None) -> threading.Event:
        """Answer every matching call slowly until the returned event is set (then the rest
        goes out at once; ``stop`` sets it too): from its first byte, or, with ``after``, once
        the status line, the headers and ``after`` bytes of the body have gone out at once.
        Slowly is one byte every ``every`` seconds (an overloaded API server, a proxy that
        trickles: each byte comes within any read timeout, the answer never), or without
        ``every``, nothing more (an answer stalled half-way; for a watch with ``after=0``, a
        stream gone silent)."""
        rule = Slow(verb, resource, every, after, threading.Event())
        with self.store.lock:
            self._slow.append(rule)
            if self.stopping:
                rule.release.set()
        return rule.release

    def slowness(self, verb: str, resource: str) -> Slow | None:
        """How slowly to answer this call (the handler's question): the first rule of
        ``slow`` that matches it and is not released, or None."""
        with self.store.lock:
            return next((rule for rule in self._slow if rule.verb in (None, verb)
                         and _resource_matches(rule.resource, resource)
                         and not rule.release.is_set()), None)

    def on_call(self, hook: Callable[[str, str, dict[str, str]], None]) -> None:
        """Run ``hook(verb, resource, query)`` before each call is served (in its thread)."""
        with self.store.lock:
            self._hooks.append(hook)

    def admit(self, resource: str, check: Callable[[str, Obj, list[Obj]], None]) -> None:
        """Run ``check(namespace, object, the namespace's objects of that resource)`` on every
        creation of ``resource``, dry runs too, as the API server's admission chain (a
        ResourceQuota, a validating webhook): it raises an ``APIError`` to refuse the object
        (``errors.quota_exceeded``, ``errors.webhook_denied``). Runs under the store's lock."""
        rt = self.registry.resolve(resource)
        with self.store.lock:
            self.store.admission.setdefault(rt.key, []).append(check)

    def quota(self, namespace: str, pods: int, name: str = "compute-resources") -> None:
        """A ResourceQuota of ``pods`` pods in ``namespace``: a creation past it is refused
        with the quota plugin's 403 (pods that have stopped, Succeeded or Failed, do not count,
        as for the real quota)."""
        rt = self.registry.resolve("pods")

        def check(ns: str, obj: Obj, existing: list[Obj]) -> None:
            used = sum((o.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                       for o in existing)
            if ns == namespace and used >= pods:
                raise quota_exceeded(rt, str(obj["metadata"]["name"]), name, used, pods)
        self.admit("pods", check)

    def clear_errors(self) -> None:
        """Forget every injected failure still pending (the outage is over), and every
        admission check (``admit``, ``quota``)."""
        with self.store.lock:
            self._errors.clear()
            self.store.admission.clear()

    # -- in-process hooks (not counted as API calls) ------------------------------------------
    @property
    def resource_version(self) -> int:
        return self.store.resource_version

    @property
    def graceful_pod_deletion(self) -> bool:
        return self.store.graceful_pod_deletion

    @graceful_pod_deletion.setter
    def graceful_pod_deletion(self, value: bool) -> None:
        self.store.graceful_pod_deletion = value

    def objects(self, resource: str = "pods", namespace: str | None = None, *,
                label_selector: str | None = None, field_selector: str | None = None) -> list[Obj]:
        """Deep copies of the stored objects, sorted by namespace/name."""
        rt = self.registry.resolve(resource)
        match = matcher(rt, namespace, label_selector, field_selector)
        with self.store.lock:
            return copy.deepcopy(self.store.snapshot(rt, match))

    def get_object(self, resource: str, name: str, namespace: str = "default") -> Obj | None:
        try:
            return copy.deepcopy(self.store.get(self.registry.resolve(resource), namespace, name))
        except APIError:
            return None

    def create_object(self, resource: str, body: Obj, namespace: str = "default") -> Obj:
        return self.store.create(self.registry.resolve(resource), namespace, body)

    def mutate_object(self, resource: str, name: str, fn: Callable[[Obj], None],
                      namespace: str = "default") -> Obj:
        """Apply ``fn`` to a copy of the object and store it (status included, no validation):
        a new resourceVersion and a MODIFIED event, unless nothing changed."""
        return self.store.mutate(self.registry.resolve(resource), namespace, name, fn)

    def set_pod_phase(self, namespace: str, name: str, phase: str,
                      container_statuses: list[dict[str, Any]] | None = None,
                      **status: Any) -> Obj:
        """Play kubelet: set ``status.phase`` (and containerStatuses / other status fields)."""
        def apply(pod: Obj) -> None:
            st = pod.setdefault("status", {})
            st["phase"] = phase
            if phase != "Pending" and "startTime" not in st:
                st["startTime"] = self.store.clock().astimezone(timezone.utc).strftime(
                    "%Y-%m-%dT%H:%M:%SZ")
            if container_statuses is not None:
                st["containerStatuses"] = container_statuses
            st.update(status)
        return self.mutate_object("pods", name, apply, namespace)

    def finish_pod_deletions(self) -> int:
        """With ``graceful_pod_deletion``: remove the terminating pods (the kubelet's part)."""
        return self.store.finish_pod_deletions(self.registry.resolve("pods"))

    def compact(self) -> None:
        self.store.compact()

    def drop_watches(self) -> None:
        """End every open watch stream cleanly (clients should re-watch from their version)."""
        with self.store.changed:
            self.watch_epoch += 1
            self.store.changed.notify_all()

    def serve_tls(self, directory: Path) -> Path:
        """Answer over TLS from now on, with a self-signed certificate for 127.0.0.1 (made with
        ``openssl``, written to ``directory``): the certificate, to trust (a kubeconfig's
        ``certificate-authority``, a service account's ``ca.crt``). ``url`` stays http://."""
        cert, key = directory / "apiserver.crt", directory / "apiserver.key"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                        str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"], check=True,
                       capture_output=True)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.socket = context.wrap_socket(self.socket, server_side=True)
        return cert

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        config = {"apiVersion": "v1", "kind": "Config", "current-context": "kubeapi",
                  "clusters": [{"name": "kubeapi", "cluster": {"server": self.url}}],
                  "users": [{"name": "kubeapi", "user": {"token": "kubeapi-test-token"}}],
                  "contexts": [{"name": "kubeapi", "context": {
                      "cluster": "kubeapi", "user": "kubeapi", "namespace": namespace}}]}
        path.write_text(json.dumps(config, indent=2))  # JSON is YAML: kubeconfig loaders read it
        return path


def start_api_server(**options: Any) -> KubeAPIServer:
    """A started server on 127.0.0.1 and an ephemeral port; call ``.stop()`` when done.
    ``options`` go to KubeAPIServer (latency, history_size, bookmark_interval, clock)."""
    return KubeAPIServer(**options).start()


@contextmanager
def running_api_server(**options: Any) -> Iterator[KubeAPIServer]:
    server = start_api_server(**options)
    try:
        yield server
    finally:
        server.stop()


def api_client(url: str) -> kubernetes.client.ApiClient:
    """A real ``ApiClient`` for ``url``: no kubeconfig, no proxy from the environment."""
    config = kubernetes.client.Configuration(host=url)
    config.proxy = None  # never route 127.0.0.1 through an HTTP(S)_PROXY
    return kubernetes.client.ApiClient(config)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per API call")
    parser.add_argument("--kubeconfig", type=Path, help="write a kubeconfig pointing here")
    args = parser.parse_args(argv)
    server = KubeAPIServer(port=args.port, latency=args.latency).start()
    print(server.url, flush=True)
    if args.kubeconfig:
        print(server.write_kubeconfig(args.kubeconfig), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
