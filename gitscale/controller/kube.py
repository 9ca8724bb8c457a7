"""The Kubernetes API, behind a few verbs. The only module that imports ``kubernetes``.

Bodies travel as plain dicts (``RawObject``): every call asks the client for the raw response
(``_preload_content=False``) and parses the JSON itself, so 500 pods are not turned into model
objects and back. ``ApiException`` and connection failures become ``KubeError`` subclasses here
(``NotFound``, ``Conflict``, ``Invalid``, ``Gone``); nothing above this module sees the client.

No call waits forever: each has a timeout (``timeout``: the read, 10 s at most to connect; the
client has none by default, and a black-holed connection would hold a worker, or a leader's
renewal, for good). Lease calls take the caller's timeout (below the renew deadline) and go
through a client of their own without urllib3's retries, which would multiply it: the elector
retries every retry period itself. Lists go by pages of ``page_size`` (``limit`` and
``continue``), each page reduced by ``keep`` before the next is read, so a relist of 10,000 pods
never holds them all as the API sent them; a continue token that expired meanwhile (410) starts
the list again.
"""
from __future__ import annotations

import base64
import copy
import json
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Callable, TypeVar, cast

import kubernetes.client
import kubernetes.config
import pydantic
import urllib3
import yaml
from kubernetes.client.exceptions import ApiException

from gitscale.controller.errors import (
    Conflict,
    CredentialsMissing,
    Gone,
    Invalid,
    KubeError,
    NotFound,
)
from gitscale.controller.observe import LABEL_SET, RawObject
from gitscale.redact import hold, redact
from gitscale.runnerset_api import API_VERSION, GROUP, KIND, PLURAL, VERSION

T = TypeVar("T")
JSON = "application/json"
WatchEvent = tuple[str, RawObject]  # (ADDED|MODIFIED|DELETED|BOOKMARK, object)
Keep = Callable[[RawObject], RawObject]  # what a list keeps of each object
TIMEOUT = 30.0  # seconds to wait for an answer (per attempt)
CONNECT_TIMEOUT = 10.0
PAGE_SIZE = 500
KEY_LIMIT = 64 * 1024  # a client key is a few KB: no more is read to hold
RELISTS = 3  # times a list whose continue token expired is started again
log = logging.getLogger("gitscale.controller")


def _whole(obj: RawObject) -> RawObject:
    return obj


def load(kubeconfig: str | None, pool_size: int = 32) -> kubernetes.client.ApiClient:
    """In-cluster config when running in a pod (and no kubeconfig is given), else a kubeconfig:
    ``--kubeconfig``, then $KUBECONFIG, then ~/.kube/config."""
    config = kubernetes.client.Configuration()
    try:
        if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=config)
        else:
            kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, client_configuration=config)
    except (kubernetes.config.ConfigException, OSError) as exc:
        raise KubeError(f"no usable Kubernetes configuration (in-cluster or {_where(kubeconfig)}):"
                        f" {exc}") from None
    except yaml.YAMLError as exc:  # the loader parses the file itself and lets this through
        raise KubeError(f"{_yaml_where(exc, kubeconfig)}: not a kubeconfig: not valid YAML "
                        f"({getattr(exc, 'problem', None) or type(exc).__name__})") from None
    except (ValueError, TypeError, AttributeError, LookupError) as exc:
        # not UTF-8, or YAML of another shape (a list, a number where a mapping goes): the
        # loader indexes it as it comes
        raise KubeError(redact(f"{_where(kubeconfig)}: not a kubeconfig of the expected shape "
                               f"({type(exc).__name__}: {exc})")) from None
    _hold_credentials(config)
    config.connection_pool_maxsize = pool_size
    return kubernetes.client.ApiClient(config)


def _hold_credentials(config: kubernetes.client.Configuration) -> None:
    """Hold (``redact.hold``) the credentials the configuration carries — the bearer token or
    basic-auth header (``api_key``) and the client key — so that an API server, a proxy or a
    library quoting one (a 401 that echoes the Authorization header) is masked in every error
    and log line. A token the client re-reads (a token file, an exec plugin, the in-cluster
    service account token, all through ``refresh_api_key_hook``, called before each request)
    is held as it is re-read."""
    _hold_api_keys(config)
    _hold_key_file(config.key_file)
    refresh: Any = config.refresh_api_key_hook  # (the client types it None)
    if refresh is not None:
        config.refresh_api_key_hook = _RefreshAndHold(refresh)  # type: ignore[assignment]


class _RefreshAndHold:
    """A configuration's ``refresh_api_key_hook`` that holds what the client's own hook
    refreshed. That hook installs a new hook of its own on each refresh (the kubeconfig
    loader's ``_set_config``): it is taken as the one to call next, and this one put back."""

    def __init__(self, refresh: Callable[[kubernetes.client.Configuration], None]) -> None:
        self.refresh = refresh

    def __call__(self, configuration: kubernetes.client.Configuration) -> None:
        key_file = configuration.key_file
        self.refresh(configuration)
        installed: Any = configuration.refresh_api_key_hook
        if installed is not self:
            if installed is not None:
                self.refresh = installed
            configuration.refresh_api_key_hook = self  # type: ignore[assignment]
        _hold_api_keys(configuration)
        if configuration.key_file != key_file:  # an exec plugin's new client key
            _hold_key_file(configuration.key_file)


def _hold_api_keys(config: kubernetes.client.Configuration) -> None:
    """An Authorization value (``Bearer t``, ``Basic dXNlcjpwdw==``): its credential held
    (the scheme stays readable: ``Bearer ***``), and a basic one's password."""
    for value in list(config.api_key.values()):
        scheme, _, credential = str(value).strip().partition(" ")
        hold(credential or scheme)
        if scheme.lower() == "basic" and credential:
            try:
                hold(base64.b64decode(credential).decode().partition(":")[2])
            except (ValueError, UnicodeDecodeError):
                pass
    if config.password:
        hold(str(config.password))


def _hold_key_file(path: str | None) -> None:
    """The client key (a PEM file the loader wrote, or the kubeconfig names) held: each of
    its lines is masked wherever it shows (``redact.secret_forms``)."""
    if not path:
        return
    try:
        with open(path, "rb") as key:
            text = key.read(KEY_LIMIT).decode("ascii", "replace")
    except OSError:
        return
    hold(text)


def _where(kubeconfig: str | None) -> str:
    return kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"


def _yaml_where(exc: yaml.YAMLError, kubeconfig: str | None) -> str:
    """The file and line of a YAML error (the file the loader read: $KUBECONFIG may list
    several), without the offending text (it may hold a token)."""
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return _where(kubeconfig)
    name = mark.name if mark.name and not mark.name.startswith("<") else _where(kubeconfig)
    return f"{name}:{mark.line + 1}"


def client_for(url: str, pool_size: int = 32) -> kubernetes.client.ApiClient:
    """An ApiClient for a plain URL (tests and benchmarks against a local API server)."""
    config = kubernetes.client.Configuration(host=url)
    config.proxy = None
    config.connection_pool_maxsize = pool_size
    return kubernetes.client.ApiClient(config)


class Kube:
    def __init__(self, api: kubernetes.client.ApiClient, *, timeout: float = TIMEOUT,
                 page_size: int = PAGE_SIZE) -> None:
        self.api = api
        self.core = kubernetes.client.CoreV1Api(api)
        self.custom = kubernetes.client.CustomObjectsApi(api)
        self._lease_api = _without_retries(api)
        self.coordination = kubernetes.client.CoordinationV1Api(self._lease_api)
        self.page_size = page_size
        self._timeout = (min(CONNECT_TIMEOUT, timeout), timeout)
        # Called in the calling thread after every call, answered or not (liveness: the
        # thread is not stuck).
        self.on_return: Callable[[], None] | None = None
        self._streams: set[urllib3.HTTPResponse] = set()
        self._lock = threading.Lock()

    def close(self) -> None:
        self.stop_watches()
        self.api.close()  # type: ignore[no-untyped-call]
        self._lease_api.close()  # type: ignore[no-untyped-call]

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return _call(what, fn)
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
        kw = _watch_args(version, timeout)
        if namespace:
            return self._stream("watch RunnerSets", lambda: self.custom.
                                list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                              **kw))
        return self._stream("watch RunnerSets", lambda: self.custom.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, **kw))

    def patch_runnerset_status(self, namespace: str, name: str,
                               status: Mapping[str, Any]) -> RawObject:
        """A JSON merge patch of ``status`` through the status subresource."""
        raw = self._call(f"update status of RunnerSet {namespace}/{name}", lambda: self.custom.
                         patch_namespaced_custom_object_status(
                             GROUP, VERSION, namespace, PLURAL, name, {"status": dict(status)},
                             _content_type="application/merge-patch+json",
                             _preload_content=False, _request_timeout=self._timeout))
        updated: RawObject = _json(raw)
        return updated

    def patch_runnerset_finalizers(self, namespace: str, name: str, finalizers: list[str],
                                   resource_version: str) -> RawObject:
        """A JSON merge patch of ``metadata.finalizers`` (a list: replaced whole), only on
        ``resource_version`` (Conflict otherwise), so another controller's finalizer written
        meanwhile is never overwritten."""
        patch = {"metadata": {"finalizers": finalizers or None,
                              "resourceVersion": resource_version}}
        raw = self._call(f"update finalizers of RunnerSet {namespace}/{name}", lambda: self.
                         custom.patch_namespaced_custom_object(
                             GROUP, VERSION, namespace, PLURAL, name, patch,
                             _content_type="application/merge-patch+json",
                             _preload_content=False, _request_timeout=self._timeout))
        updated: RawObject = _json(raw)
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
        kw = _watch_args(version, timeout)
        if namespace:
            return self._stream("watch runner pods", lambda: self.core.list_namespaced_pod(
                namespace, label_selector=LABEL_SET, **kw))
        return self._stream("watch runner pods", lambda: self.core.list_pod_for_all_namespaces(
            label_selector=LABEL_SET, **kw))

    def create_pod(self, body: RawObject, *, dry_run: bool = False) -> RawObject:
        """``dry_run``: admission (quota, webhooks) and validation only, nothing stored."""
        meta, raw_body = body["metadata"], cast(Any, body)  # the client takes dicts too
        created: RawObject = _json(self._call(
            f"create pod {meta['namespace']}/{meta['name']}", lambda: self.core.
            create_namespaced_pod(meta["namespace"], raw_body, _content_type=JSON,
                                  dry_run="All" if dry_run else None,
                                  _preload_content=False, _request_timeout=self._timeout)))
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
        raw: RawObject = _json(self._call(f"delete pod {namespace}/{name}", lambda: self.core.
                                          delete_namespaced_pod(
                                              name, namespace, _preload_content=False,
                                              _request_timeout=self._timeout)))
        return raw if raw.get("kind") == "Pod" else None

    def create_secret(self, body: RawObject) -> RawObject:
        """Create a Secret (a runner's JIT config). Its values, as sent (base64) and decoded,
        are masked in the error when the API server refuses it: an admission webhook may quote
        the object. They are not held for masking (``redact.hold``): one per runner would
        fill the registry of a controller that runs for months."""
        meta, raw_body = body["metadata"], cast(Any, body)
        try:
            self._call(f"create Secret {meta['namespace']}/{meta['name']}", lambda: self.core.
                       create_namespaced_secret(meta["namespace"], raw_body, _content_type=JSON,
                                                _preload_content=False,
                                                _request_timeout=self._timeout))
        except KubeError as exc:
            masked = redact(str(exc), _secret_values(body))
            if masked == str(exc):
                raise
            raise type(exc)(masked, exc.status, exc.reason) from None
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

    def read_secret(self, namespace: str, name: str) -> dict[str, str]:
        """A Secret's data, decoded. Its values are credentials: never log them."""
        try:
            raw = _json(self._call(f"read Secret {namespace}/{name}", lambda: self.core.
                                   read_namespaced_secret(name, namespace,
                                                          _preload_content=False,
                                                          _request_timeout=self._timeout)))
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
            lease: RawObject = _json(self._call(
                f"read Lease {namespace}/{name}", lambda: self.coordination.
                read_namespaced_lease(name, namespace, _preload_content=False,
                                      _request_timeout=timeout)))
        except NotFound:
            return None
        return lease

    def create_lease(self, body: RawObject, *, timeout: float) -> RawObject:
        """Conflict (AlreadyExists) when another candidate created it first."""
        meta, raw_body = body["metadata"], cast(Any, body)
        lease: RawObject = _json(self._call(
            f"create Lease {meta['namespace']}/{meta['name']}", lambda: self.coordination.
            create_namespaced_lease(meta["namespace"], raw_body, _content_type=JSON,
                                    _preload_content=False, _request_timeout=timeout)))
        return lease

    def replace_lease(self, body: RawObject, *, timeout: float) -> RawObject:
        """An update on ``metadata.resourceVersion``: Conflict when someone wrote it since."""
        meta, raw_body = body["metadata"], cast(Any, body)
        lease: RawObject = _json(self._call(
            f"update Lease {meta['namespace']}/{meta['name']}", lambda: self.coordination.
            replace_namespaced_lease(meta["name"], meta["namespace"], raw_body,
                                     _content_type=JSON, _preload_content=False,
                                     _request_timeout=timeout)))
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
                    page, meta = _page(self._call(what, lambda: fetch(kw)), kind, api_version)
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
        """End every open watch stream (shutdown): their iterators then simply stop."""
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            try:
                stream.shutdown()
            except Exception:  # noqa: BLE001 - closing is best effort
                stream.close()

    def _stream(self, what: str, open_: Callable[[], Any]) -> Iterator[WatchEvent]:
        response = self._call(what, open_)
        with self._lock:
            self._streams.add(response)
        try:
            buffer = b""
            for chunk in response.stream(amt=None, decode_content=False):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield _event(what, line)
        except (urllib3.exceptions.HTTPError, OSError, ValueError):
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


def _watch_args(version: str, timeout: int) -> dict[str, Any]:
    return {"watch": True, "resource_version": version, "allow_watch_bookmarks": True,
            "timeout_seconds": timeout, "_preload_content": False,
            "_request_timeout": (10, timeout + 30)}


def _event(what: str, line: bytes) -> WatchEvent:
    try:
        event = json.loads(line)
        kind, obj = event["type"], event["object"]
    except (ValueError, KeyError, TypeError):
        raise KubeError(f"{what}: the stream sent something that is not a watch event") from None
    if kind == "ERROR":
        code = int(obj.get("code", 0))
        cls = Gone if code == 410 else KubeError
        raise cls(f"{what}: {obj.get('message', 'error')}", code, str(obj.get("reason", "")))
    return kind, obj


def _call(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except ApiException as exc:
        raise _translate(what, exc) from None
    except pydantic.ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}"
                             for e in exc.errors()[:5])
        raise Invalid(f"{what}: the object is not valid: {problems}", 422, "Invalid") from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise KubeError(f"{what}: the API server did not answer ({type(exc).__name__})") from None


def _translate(what: str, exc: ApiException) -> KubeError:
    status = int(exc.status or 0)
    reason, message = str(exc.reason or ""), ""
    try:
        body = json.loads(exc.body or "{}")
        reason, message = str(body.get("reason") or reason), str(body.get("message") or "")
    except (ValueError, TypeError, AttributeError):
        pass
    # The API server's words may echo a credential (an admission webhook's URL with user info):
    # masked here, so no status, log or Event built from the error shows it.
    text = redact(f"{what}: {status} {reason}" + (f": {message}" if message else ""))
    cls = {404: NotFound, 409: Conflict, 410: Gone, 422: Invalid}.get(status, KubeError)
    return cls(text, status, reason)


def _json(response: Any) -> Any:
    try:
        return json.loads(response.data or b"{}")
    except ValueError:
        raise KubeError("the API server answered something that is not JSON") from None


def _page(response: Any, kind: str, api_version: str) -> tuple[list[RawObject], dict[str, Any]]:
    body = _json(response)
    items: list[RawObject] = body.get("items") or []
    for item in items:  # list items carry neither kind nor apiVersion
        item.setdefault("kind", kind)
        item.setdefault("apiVersion", api_version)
    return items, body.get("metadata") or {}


def _without_retries(api: kubernetes.client.ApiClient) -> kubernetes.client.ApiClient:
    """A client like ``api`` (same configuration and headers) whose calls are tried once."""
    config = copy.deepcopy(api.configuration)
    config.retries = False
    client = kubernetes.client.ApiClient(config)
    client.default_headers.update(api.default_headers)
    return client
