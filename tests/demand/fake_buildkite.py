"""A fake Buildkite agent metrics API on 127.0.0.1.

    GET /v3/metrics/queue?name=QUEUE    Authorization: Token <agent token>

answers with the reference bodies (``metrics_*.json`` from buildkite-agent-metrics' tests, served
byte for byte) and the ``Buildkite-Agent-Metrics-Poll-Duration`` header; 401 for a missing or
wrong token, 404 for a queue it does not know. Every request is logged.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.demand.fake_github import QuietServer

PAYLOADS = Path(__file__).resolve().parents[2] / "fixtures" / "reference" / "payloads"


def metrics(name: str) -> bytes:
    """A reference body, e.g. ``metrics("TestCollectorWithSomeJobsAndAgentsForAQueue")``."""
    return (PAYLOADS / f"metrics_{name}.json").read_bytes()


@dataclass
class Request:
    method: str
    path: str
    status: int
    authorization: str | None


class FakeBuildkite:
    def __init__(self, *, token: str = "bkua_fake_agent_token",
                 poll_duration: str | None = "15s") -> None:
        self.token = token
        self.poll_duration = poll_duration
        self.queues: dict[str, bytes] = {}
        self.log: list[Request] = []
        self.lock = threading.Lock()
        self.server = QuietServer(("127.0.0.1", 0), _handler(self))
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        """The apiUrl (``…/v3``)."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/v3"

    def __enter__(self) -> "FakeBuildkite":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(fake: FakeBuildkite) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms stall

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            with fake.lock:
                fake.log.append(Request(self.command, self.path, status,
                                        self.headers.get("Authorization")))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            split = urlsplit(self.path)
            if self.headers.get("Authorization") != f"Token {fake.token}":
                self._send(401, b'{"message":"Invalid or missing agent token"}')
                return
            if split.path != "/v3/metrics/queue":
                self._send(404, b'{"message":"Not Found"}')
                return
            name = dict(parse_qsl(split.query)).get("name", "")
            if name not in fake.queues:
                self._send(404, b'{"message":"No queue named that"}')
                return
            headers = {}
            if fake.poll_duration is not None:
                headers["Buildkite-Agent-Metrics-Poll-Duration"] = fake.poll_duration
            self._send(200, fake.queues[name], headers)

    return Handler
