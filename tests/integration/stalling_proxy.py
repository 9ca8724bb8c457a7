"""A TCP proxy on 127.0.0.1 in front of a real git server that can be told to hang: from
``hang()`` on, every connection (open or new) is accepted and kept, and not a byte more goes
either way — a git server, or a proxy or firewall before it, that stopped answering mid-way.
``release()`` closes what it held (without passing on what was held back, so nothing sent
during the hang reaches the server: a push held there never lands). ``hang_answers()`` holds
back only the answers to pushes: the push reaches the server and lands, and git never hears
so (a proxy that drops the answer, a post-receive hook that hangs)."""
from __future__ import annotations

import socket
import threading
from typing import Any


class StallingProxy:
    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.hung = threading.Event()
        self.answers_hung = threading.Event()  # the answer to a push (git-receive-pack) only
        self.connections = 0  # accepted so far
        self.stalled = 0  # connections accepted, and reads held back, since ``hang``
        self._server = socket.create_server(("127.0.0.1", 0))
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self._server.getsockname()[1])

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def hang(self) -> None:
        self.hung.set()

    def hang_answers(self) -> None:
        self.answers_hung.set()

    def release(self) -> None:
        """Close every connection held (git's side sees them end)."""
        with self._lock:
            held, self._held = self._held, []
        for sock in held:
            _close(sock)

    def close(self) -> None:
        self._closed = True
        _close(self._server)
        self.release()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            self.connections += 1
            with self._lock:
                self._held.append(client)
            if self.hung.is_set():
                self.stalled += 1
                continue  # accepted, never answered
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                self._held.append(upstream)
            pushed = threading.Event()  # a push's request went up this connection
            for source, sink, asks in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pipe, args=(source, sink, pushed, asks),
                                 daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, pushed: threading.Event,
              asks: bool) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if asks and self.answers_hung.is_set() and b"POST " in data \
                    and b"git-receive-pack" in data:
                pushed.set()
            held = not asks and pushed.is_set()  # the push's answer, and what follows
            if self.hung.is_set() or held:  # held back, its end too: the other side hears nothing
                self.stalled += 1
                if not data:
                    return
                continue
            if not data:
                _shut(sink)
                return
            try:
                sink.sendall(data)
            except OSError:
                return


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _close(sock: Any) -> None:
    """Shut down first: a close alone wakes no thread blocked reading it, and tells the peer
    nothing until that thread lets go."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
