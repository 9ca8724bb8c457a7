"""A Buildkite-shaped REST server on 127.0.0.1: the agents API as its documentation shows it.

``GET /v2/organizations/{org}/agents`` answers the organization's *connected* agents (the
documented rule: disconnected agents are not listed; an agent ``stopping`` — told to stop
from Buildkite's UI or API, finishing its job — is still connected, and listed),
``per_page`` (max 100) / ``page``
paging with a ``Link: <…>; rel="next"`` header, each agent with ``id``, ``name``,
``connection_state``, ``hostname``, ``meta_data`` and ``job`` (the job it is running, or
null). A bearer token is required (401 ``{"message": "Authentication required…"}``).

Rate limits as documented: every answer carries ``RateLimit-Remaining``, ``RateLimit-Limit``
and ``RateLimit-Reset`` (seconds until the window resets); past the limit, 429 with
``RateLimit-Remaining: 0``.

Test seams: ``agents`` (name → state), ``connect(name, busy=)``, ``disconnect(name)``,
``calls`` (paths with their query), ``limited_for`` (seconds: answer 429 until set to None),
``down`` (a status, say 502: every request answers it until set to None — Buildkite down),
``raw`` (status, content type and bytes every request answers as they are: a proxy's HTML page).
"""
from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


class FakeBuildkite(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, token: str, org: str = "acme") -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.token, self.org = token, org
        self.lock = threading.Lock()
        self.agents: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.limited_for: int | None = None  # seconds left of an exhausted rate-limit window
        self.down: int | None = None  # the status every request answers (an outage)
        # (status, content type, body) every request answers as it is: an HTML page, garbage
        self.raw: tuple[int, str, bytes] | None = None
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> FakeBuildkite:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def connect(self, name: str, *, busy: bool = False, state: str = "connected") -> None:
        """An agent of the list; ``state``: its ``connection_state`` (``stopping``: told to
        stop from Buildkite's UI or API, finishing its job)."""
        job = {"id": str(uuid.uuid4()), "type": "script", "name": "rspec", "state": "running",
               "agent_query_rules": ["queue=linux"]} if busy else None
        with self.lock:
            self.agents[name] = {"id": str(uuid.uuid4()), "name": name,
                                 "connection_state": state, "hostname": name,
                                 "meta_data": ["queue=linux"], "job": job,
                                 "version": "3.92.0", "created_at": "2026-11-23T09:00:00.000Z"}

    def disconnect(self, name: str) -> None:
        with self.lock:
            self.agents[name]["connection_state"] = "disconnected"
            self.agents[name]["job"] = None


class _Handler(BaseHTTPRequestHandler):
    server: FakeBuildkite

    def log_message(self, *args: object) -> None:
        pass

    def _reply(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        srv = self.server
        url = urlsplit(self.path)
        with srv.lock:
            srv.calls.append(self.path)
        if srv.down is not None:
            return self._reply(srv.down, {"message": "Bad Gateway"})
        if srv.raw is not None:
            code, kind, data = srv.raw
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return None
        if srv.limited_for is not None:
            return self._reply(429, {"message": "You have exceeded your API rate limit"},
                               {"RateLimit-Remaining": "0", "RateLimit-Limit": "200",
                                "RateLimit-Reset": str(srv.limited_for)})
        if self.headers.get("Authorization") != f"Bearer {srv.token}":
            return self._reply(401, {"message": "Authentication required. Please supply a "
                                                "valid API Access Token."})
        if url.path != f"/v2/organizations/{srv.org}/agents":
            return self._reply(404, {"message": "Not Found"})
        query = parse_qs(url.query)
        per_page = min(int(query.get("per_page", ["30"])[0]), 100)
        page = int(query.get("page", ["1"])[0])
        with srv.lock:
            connected = [dict(a) for _, a in sorted(srv.agents.items())
                         if a["connection_state"] in ("connected", "stopping")]
        chunk = connected[(page - 1) * per_page: page * per_page]
        headers = {"RateLimit-Remaining": "199", "RateLimit-Limit": "200", "RateLimit-Reset": "60"}
        if page * per_page < len(connected):
            nxt = f"{srv.url}{url.path}?page={page + 1}&per_page={per_page}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        self._reply(200, chunk, headers)
