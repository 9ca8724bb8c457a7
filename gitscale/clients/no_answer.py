"""Why there was no answer, in words a person can act on: the name did not resolve, the port
refused, TLS failed (a certificate no CA vouches for, or a plain-HTTP server spoken to with
https://), a proxy (taken from the environment, as httpx does) was down or refused the tunnel,
or the server did not answer in time. httpx wraps the OS's error in its own and httpcore's;
the cause is read from under them. Host and port only: never a path, a query or credentials."""
from __future__ import annotations

import socket
import ssl
import urllib.request

import httpx

from gitscale.clients.deadline import ResolveTimeout
from gitscale.redact import redact


class Overdue(httpx.TimeoutException):
    """The answer did not arrive whole by the request's deadline (``http.DEADLINE_TIMEOUTS``):
    each piece came within the timeout, the whole did not — a server or proxy trickling it."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no whole answer within {seconds:g}s")
        self.seconds = seconds


def describe(exc: httpx.HTTPError, url: str, timeout: float) -> str:
    """What went wrong, in words a person can act on: DNS, refused, TLS, proxy, timeout."""
    target = httpx.URL(url)
    host = target.host
    where = f"{host}:{target.port or (443 if target.scheme == 'https' else 80)}"
    proxy = proxy_for(url)
    seconds = f"{timeout:g}s"
    if isinstance(exc, Overdue):
        return (f"timed out: the answer from {where} was not whole within "
                f"{exc.seconds:g}s (it came too slowly)")
    if isinstance(exc, httpx.ConnectTimeout) and isinstance(exc.__cause__, ResolveTimeout):
        name = proxy.rsplit(":", 1)[0] if proxy else host
        what = "the proxy's host " if proxy else ""
        return f"DNS resolution of {what}{name} gave no answer within {seconds}"
    if isinstance(exc, httpx.ProxyError):
        return f"proxy error from the proxy {proxy or '(unknown)'}: {_words(exc)}"
    if isinstance(exc, httpx.ConnectTimeout):
        return f"timed out after {seconds} connecting to {_via(where, proxy)}"
    if isinstance(exc, httpx.ReadTimeout):
        return f"timed out: no answer within {seconds} from {where}"
    if isinstance(exc, httpx.WriteTimeout):
        return f"timed out after {seconds} sending the request to {where}"
    if isinstance(exc, httpx.PoolTimeout):
        return f"timed out after {seconds} waiting for a free connection to {where}"
    if isinstance(exc, httpx.ConnectError):
        return _connect_failure(_os_error(exc), exc, host, where, proxy)
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"the connection to {where} broke mid-answer ({_words(exc)})"
    if isinstance(exc, (httpx.ReadError, httpx.WriteError)):
        return f"the connection to {where} was reset ({_words(exc)})"
    return f"{type(exc).__name__}: {_words(exc)}"


def _connect_failure(error: OSError | None, exc: Exception, host: str, where: str,
                     proxy: str | None) -> str:
    if isinstance(error, socket.gaierror):
        name = proxy.rsplit(":", 1)[0] if proxy else host
        what = "the proxy's host " if proxy else ""
        return f"DNS resolution failed for {what}{name} ({error.strerror or error})"
    if isinstance(error, ConnectionRefusedError):
        return f"connection refused by {_via(where, proxy)}"
    if isinstance(error, ssl.SSLCertVerificationError):
        return (f"TLS certificate error from {host}: "
                f"{error.verify_message or error.reason or error}")
    if isinstance(error, ssl.SSLError):
        reason = error.reason or str(error)
        plain = reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE",
                           "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST")
        hint = " (is it a plain-HTTP server? then its URL starts with http://)" if plain else ""
        return f"TLS error from {where}: {reason.lower().replace('_', ' ')}{hint}"
    if isinstance(error, TimeoutError):
        return f"timed out connecting to {_via(where, proxy)}"
    if error is not None:
        return f"cannot connect to {_via(where, proxy)}: {error.strerror or error}"
    return f"cannot connect to {_via(where, proxy)}: {_words(exc)}"


def _via(where: str, proxy: str | None) -> str:
    return f"the proxy {proxy} (for {where})" if proxy else where


def _os_error(exc: BaseException) -> OSError | None:
    """The OS's own error under httpx's and httpcore's wrappers."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return None
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _words(exc: BaseException) -> str:
    return redact(str(exc)) or type(exc).__name__


def proxy_for(url: str) -> str | None:
    """The proxy (host:port, no credentials) httpx takes from the environment for ``url``."""
    target = httpx.URL(url)
    proxies = urllib.request.getproxies_environment()
    chosen = proxies.get(target.scheme) or proxies.get("all")
    if not chosen or urllib.request.proxy_bypass(target.host):
        return None
    parsed = httpx.URL(chosen if "://" in chosen else f"http://{chosen}")
    return f"{parsed.host}:{parsed.port or (443 if parsed.scheme == 'https' else 80)}"
