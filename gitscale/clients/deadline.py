"""A deadline for a whole request, and a bound on resolving a host's name.

httpx's timeouts are per operation: the read timeout bounds the wait for each piece of an
answer, not for the answer. A server (or a proxy in front of it) that sends its headers, or
its body, a byte every few seconds never trips it, and a pass that asked it waited for good.
And the connect timeout bounds the TCP connect, not the name's resolution before it:
``getaddrinfo`` blocks as long as the resolver retries (in a pod, ``ndots:5`` and its search
domains make that minutes when the cluster's DNS does not answer).

``bound(client)`` gives every connection of an ``httpx.Client`` (its own transport and those
of the proxies taken from the environment) a network layer that:

- clamps each read and write to what is left of the deadline of the request under way in this
  thread (``until``): once it has passed, the next read fails as a timeout;
- resolves the host in a helper thread and waits for it at most the connect timeout (and what
  is left of the deadline), then connects to the addresses found, in order.

The deadline is the thread's (a client serves several threads, each with its own request).
Knowledge of httpcore's network layer lives here only (its ``NetworkBackend`` interface;
httpx 0.28 gives no public way to pass one, so ``bound`` sets it on each pool).
"""
from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from typing import Any, Callable, Iterable, Iterator

import httpcore
import httpx

Resolve = Callable[[str, int], list[tuple[Any, ...]]]
_local = threading.local()


class ResolveTimeout(httpcore.ConnectTimeout):
    """The name did not resolve within the connect timeout (the cause of httpx's
    ``ConnectTimeout``: httpcore's pool drops the causes of its own errors, not the type)."""

    def __init__(self, host: str, seconds: float) -> None:
        super().__init__(f"resolving {host} gave no answer within {seconds:g}s")
        self.host = host
        self.seconds = seconds


def getaddrinfo(host: str, port: int) -> list[tuple[Any, ...]]:
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)


@contextlib.contextmanager
def until(deadline: float) -> Iterator[None]:
    """Every read and write of this thread's requests ends by ``deadline`` (monotonic)."""
    previous = getattr(_local, "deadline", None)
    _local.deadline = deadline
    try:
        yield
    finally:
        _local.deadline = previous


def _left(timeout: float | None) -> float | None:
    """``timeout``, cut to what is left of this thread's deadline; ``None``: no deadline."""
    deadline: float | None = getattr(_local, "deadline", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self.inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        left = _left(timeout)
        if left is not None and left <= 0:
            raise httpcore.ReadTimeout("the request's deadline has passed")
        return self.inner.read(max_bytes, left)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        left = _left(timeout)
        if left is not None and left <= 0:
            raise httpcore.WriteTimeout("the request's deadline has passed")
        self.inner.write(buffer, left)

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _Stream(self.inner.start_tls(ssl_context, server_hostname, _left(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class Backend(httpcore.NetworkBackend):
    """httpcore's own (blocking sockets), with the deadline and a bounded name resolution."""

    def __init__(self, inner: httpcore.NetworkBackend, resolve: Resolve = getaddrinfo) -> None:
        self.inner = inner
        self.resolve = resolve

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        addresses = self._resolved(host, port, _left(timeout))
        last: Exception | None = None
        for address in addresses:
            try:
                return _Stream(self.inner.connect_tcp(
                    address, port, _left(timeout), local_address, socket_options))
            except httpcore.ConnectTimeout:
                raise
            except httpcore.ConnectError as exc:  # this address refused: the next one
                last = exc
        assert last is not None  # (getaddrinfo never answers an empty list)
        raise last

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None
                            ) -> httpcore.NetworkStream:
        return _Stream(self.inner.connect_unix_socket(path, _left(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)

    def _resolved(self, host: str, port: int, timeout: float | None) -> list[str]:
        """The addresses of ``host`` (an address is its own), in the resolver's order,
        within ``timeout``: the lookup runs in a daemon thread, left to finish by itself
        when it takes longer (the resolver's own retries end it)."""
        try:
            socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
            return [host]
        except OSError:
            pass
        found: list[list[tuple[Any, ...]]] = []
        failed: list[BaseException] = []

        def lookup() -> None:
            try:
                found.append(self.resolve(host, port))
            except BaseException as exc:  # noqa: BLE001 - given to the waiting thread
                failed.append(exc)
        worker = threading.Thread(target=lookup, name=f"resolve {host}", daemon=True)
        worker.start()
        worker.join(None if timeout is None else max(timeout, 0.0))
        if failed:
            try:
                raise failed[0]
            except OSError as exc:  # (its context survives httpcore's ``raise … from None``)
                raise httpcore.ConnectError(str(exc)) from exc
        if not found:
            raise ResolveTimeout(host, timeout or 0.0)
        addresses = list(dict.fromkeys(str(info[4][0]) for info in found[0]))
        if not addresses:
            raise httpcore.ConnectError(f"{host} resolves to no address")
        return addresses


def bound(client: httpx.Client, resolve: Resolve = getaddrinfo) -> httpx.Client:
    """``client`` with every pool it sends through on ``Backend`` (a transport given by a
    test, e.g. ``httpx.MockTransport``, has no pool: left as it is). Returns ``client``."""
    transports = [client._transport, *client._mounts.values()]  # noqa: SLF001 - see above
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        inner = getattr(pool, "_network_backend", None)
        if inner is not None and not isinstance(inner, Backend):
            pool._network_backend = Backend(inner, resolve)  # type: ignore[union-attr]
    return client
