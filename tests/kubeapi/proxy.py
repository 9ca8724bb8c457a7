"""A TCP proxy on 127.0.0.1 in front of the API server that can black-hole one client's traffic.

    proxy = BlackHoleProxy(server.server_address).start()
    kube = Kube(client_for(proxy.url))     # this client goes through the proxy
    proxy.blackhole.set()                  # bytes stop flowing both ways; connections stay open
    proxy.blackhole.clear()                # they flow again
    proxy.stop()

What a network partition looks like to a client: its requests are sent and never answered, new
connections are accepted (the kernel's backlog) and never answered either. Nothing is closed,
so a client without a timeout waits forever.

    proxy.forget()                         # the connections open now are reset (RST) as soon
                                           # as the client sends on them again

What a load balancer's idle timeout, or a NAT table that dropped the flow, looks like to a
client that reuses a kept-alive connection: the request goes out, a reset comes back.
"""
from __future__ import annotations

import select
import socket
import struct
import threading


class BlackHoleProxy:
    def __init__(self, upstream: tuple[str | bytes | bytearray, int]) -> None:
        host, port = upstream[:2]
        self._upstream = (host.decode() if isinstance(host, (bytes, bytearray)) else host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.blackhole = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._forgotten: set[socket.socket] = set()  # client sides to reset when next used
        self.resets = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def start(self) -> BlackHoleProxy:
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._listener.close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.close()
            except OSError:
                pass

    def forget(self) -> None:
        """Reset each connection open now when its client next sends on it."""
        with self._lock:
            self._forgotten.update(self._sockets)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            try:
                server = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                client.close()
                continue
            for sock in (client, server):  # relayed as it comes: no 40 ms Nagle stall
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets.update((client, server))
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), name="proxy-pump",
                                 daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self._stop.is_set():
                if self.blackhole.is_set():
                    self._stop.wait(0.02)
                    continue
                readable, _, _ = select.select([src], [], [], 0.05)
                if not readable:
                    continue
                data = src.recv(65536)
                if not data:
                    break
                with self._lock:
                    forgotten = src in self._forgotten
                if forgotten:  # an RST, not a FIN: the client's request is lost
                    self.resets += 1
                    src.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    src.close()
                    dst.close()
                    break
                dst.sendall(data)
        except (OSError, ValueError):  # (ValueError: the other direction closed it: a reset)
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
