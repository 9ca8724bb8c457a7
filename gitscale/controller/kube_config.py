"""Connecting to the Kubernetes API: the kubeconfig (or the in-cluster config) loaded, the
credentials it carries held for masking, and the clients ``kube.py``'s ``Kube`` speaks through.

``load`` reads the in-cluster configuration in a pod, else a kubeconfig; a file that is not one
is a ``KubeError`` naming the file (and the line, for bad YAML), never its content. Every
credential of the configuration — a bearer token, a basic-auth password, the client key, and
each token the client re-reads later (token file, exec plugin, service account) — is held
(``redact.hold``), so an API server or proxy that echoes one is masked in every error and log
line. Every client tries each call once (``Once``): urllib3's default (three retries, each
logged as a ``Retrying (Retry(...))`` warning) would turn one failed call into four lines and
four times its timeout, where the controller has its own retries and backoffs (the next pass,
the informers' relist backoff, the elector's retry period) and says a failure once, itself.
And every client's read timeout is the deadline of each answer, not of each read
(``kube_deadline.bound``): an answer trickled a byte at a time ends by it too.
``without_retries`` makes the Lease calls' client (a pool of its own).
"""
from __future__ import annotations

import base64
import copy
import logging
import os
from types import TracebackType
from typing import Any, Callable, Self

import kubernetes.client
import kubernetes.config
import yaml
from urllib3.connectionpool import ConnectionPool
from urllib3.exceptions import ProtocolError
from urllib3.response import BaseHTTPResponse
from urllib3.util.retry import Retry
from urllib3.util.util import reraise

from gitscale.controller.errors import KubeError
from gitscale.controller.kube_deadline import bound
from gitscale.redact import hold, redact

KEY_LIMIT = 64 * 1024  # a client key is a few KB: no more is read to hold


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
    return _client(config, pool_size)


def _client(config: kubernetes.client.Configuration,
            pool_size: int) -> kubernetes.client.ApiClient:
    """The client of ``config``: ``pool_size`` connections kept, each call tried once
    (``Once``), each answer whole by its deadline (``kube_deadline``)."""
    config.connection_pool_maxsize = pool_size
    config.retries = Once()  # (the client passes it to urllib3)
    _quiet_retries()
    return _bounded(kubernetes.client.ApiClient(config))


def _bounded(client: kubernetes.client.ApiClient) -> kubernetes.client.ApiClient:
    bound(client.rest_client.pool_manager)
    return client


class Once(Retry):
    """urllib3's retries as the controller's clients have them: each call is sent once, and a
    failure raises its cause itself (a refused connection, a timeout: not urllib3's
    ``MaxRetryError`` around it), which the controller says once and retries by itself (the
    set's next pass, the informers' backoff, the elector).

    Save one case, which is no failure of the API server: an idempotent request (GET, DELETE,
    PUT) whose connection broke before any answer came (``ProtocolError``: a kept-alive
    connection the API server, or a load balancer's idle timeout, dropped just as it was
    reused) is sent again at once, once, on a new connection, as urllib3 would. Not a POST or a
    PATCH (it may have been applied), not a timeout (the API server may be busy with it), not
    a status (a 429 is the controller's to back off from)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("total", 1)
        kwargs.setdefault("respect_retry_after_header", False)
        super().__init__(**kwargs)

    def increment(self, method: str | None = None, url: str | None = None,
                  response: BaseHTTPResponse | None = None, error: Exception | None = None,
                  _pool: ConnectionPool | None = None,
                  _stacktrace: TracebackType | None = None) -> Self:
        if error is not None and (self.history or not isinstance(error, ProtocolError) or (
                method is None or not self._is_method_retryable(method))):
            raise reraise(type(error), error, _stacktrace)
        return super().increment(method, url, response, error, _pool, _stacktrace)


class _RetryAtDebug(logging.Filter):
    """urllib3's ``Retrying (Retry(...)) after connection broken by …`` warning, at debug level:
    the one resend ``Once`` allows either succeeds (nothing to warn of) or fails with its
    own error, which the controller says."""

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("Retrying (") and record.levelno > logging.DEBUG:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


def _quiet_retries() -> None:
    pool_log = logging.getLogger("urllib3.connectionpool")
    if not any(isinstance(f, _RetryAtDebug) for f in pool_log.filters):
        pool_log.addFilter(_RetryAtDebug())


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
    return _client(config, pool_size)


def without_retries(api: kubernetes.client.ApiClient) -> kubernetes.client.ApiClient:
    """A client like ``api`` (same configuration and headers, calls tried once, answers by
    their deadline) with a connection pool of its own."""
    config = copy.deepcopy(api.configuration)
    config.retries = False
    client = _bounded(kubernetes.client.ApiClient(config))
    client.default_headers.update(api.default_headers)
    return client
