"""A smart-HTTP git server for tests: ``git http-backend`` (CGI) behind HTTP Basic auth.

    server = GitHTTPServer(root, user="x-access-token", token="s3cret")
    server.start()            # a daemon thread; server.url("config.git")
    ...
    server.stop()

Every request is answered only with the right credentials (401 + ``WWW-Authenticate``
otherwise); the authenticated user reaches http-backend as ``REMOTE_USER``, which is also what
enables receive-pack (push). Request bodies may be Content-Length or chunked; gzip'd bodies are
passed through unchanged with ``HTTP_CONTENT_ENCODING`` (http-backend inflates them itself).

``server.log`` holds one line per request: the request line, the status and whether the request
was authenticated. It never holds the Authorization header. ``server.on_request`` (optional) is
called inside each request, while the git client that sent it is still running.
"""
from __future__ import annotations

import base64
import hmac
import os
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable
from urllib.parse import unquote, urlsplit


class GitHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, project_root: Path, *, user: str, token: str,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__((host, port), _Handler)
        self.project_root = project_root
        self.user = user
        self.token = token
        self.log: list[str] = []
        self.statuses: list[int] = []
        self.bodies: list[str] = []  # how each request body came: "chunked", "gzip", …
        self.on_request: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._git = shutil.which("git") or "git"

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def url(self, name: str = "config.git") -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="git-http-server", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def authorized(self, header: str | None) -> bool:
        if not header or not header.startswith("Basic "):
            return False
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return False
        user, _, password = decoded.partition(":")
        return (hmac.compare_digest(user.encode(), self.user.encode())
                and hmac.compare_digest(password.encode(), self.token.encode()))

    def record(self, line: str, status: int) -> None:
        with self._lock:
            self.log.append(line)
            self.statuses.append(status)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms stall
    server: GitHTTPServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._serve()

    def do_POST(self) -> None:  # noqa: N802
        self._serve()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # requests are recorded in server.log by _serve (without any header)

    # -- one request -----------------------------------------------------------------------
    def _serve(self) -> None:
        body = self._read_body()
        if self.server.on_request is not None:
            self.server.on_request()
        authenticated = self.server.authorized(self.headers.get("Authorization"))
        if not authenticated:
            self._send(401, [("WWW-Authenticate", 'Basic realm="gitscale-test"'),
                             ("Content-Type", "text/plain")], b"authentication required\n")
            self.server.record(f"{self.requestline} 401 anonymous", 401)
            return
        status, headers, payload = self._cgi(body)
        self._send(status, headers, payload)
        self.server.record(f"{self.requestline} {status} user={self.server.user}", status)

    def _read_body(self) -> bytes:
        kinds = []
        if self.headers.get("Content-Encoding"):
            kinds.append(self.headers["Content-Encoding"].strip().lower())
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        if chunked:
            kinds.append("chunked")
        with self.server._lock:
            self.server.bodies.extend(kinds)
        if chunked:
            chunks = []
            while True:
                size_line = self.rfile.readline()
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()  # CRLF after each chunk
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _cgi(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        url = urlsplit(self.path)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.server.project_root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": self.request_version,
            "SERVER_SOFTWARE": "gitscale-test",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": unquote(url.path),
            "QUERY_STRING": url.query,
            "REMOTE_ADDR": self.client_address[0],
            "REMOTE_USER": self.server.user,
            "AUTH_TYPE": "Basic",
            "CONTENT_LENGTH": str(len(body)),
        }
        if self.headers.get("Content-Type"):
            env["CONTENT_TYPE"] = self.headers["Content-Type"]
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        proc = subprocess.run([self.server._git, "http-backend"], input=body, env=env,
                              capture_output=True, timeout=60)
        return _parse_cgi(proc.stdout, proc.stderr)

    def _send(self, status: int, headers: list[tuple[str, str]], payload: bytes) -> None:
        self.send_response(status)
        for name, value in headers:
            if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def _parse_cgi(stdout: bytes, stderr: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    """A CGI response (headers, a blank line, the body) → (status, headers, body)."""
    for separator in (b"\r\n\r\n", b"\n\n"):
        head, found, payload = stdout.partition(separator)
        if found:
            break
    else:
        return 500, [("Content-Type", "text/plain")], b"bad CGI response\n" + stderr
    status = 200
    headers = []
    for raw in head.decode("latin-1").splitlines():
        name, _, value = raw.partition(":")
        if name.strip().lower() == "status":
            status = int(value.strip().split()[0])
        elif name.strip():
            headers.append((name.strip(), value.strip()))
    return status, headers, payload
