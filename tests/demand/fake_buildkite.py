"""A fake Buildkite agent metrics API, and GraphQL API, on 127.0.0.1.

    GET /v3/metrics/queue?name=QUEUE    Authorization: Token <agent token>
    POST /graphql/v1                    Authorization: Bearer <API access token>

The metrics API answers with the reference bodies (``metrics_*.json`` from
buildkite-agent-metrics' tests, served byte for byte) and the
``Buildkite-Agent-Metrics-Poll-Duration`` header; 401 for a missing or wrong token, 404 for a
queue it does not know. The GraphQL endpoint answers the one query gitscale sends,
``organization(slug:) { jobs(state:, type: [COMMAND], agentQueryRules: ["queue=Q"],
cluster:|clustered: false, first:, after:) }``, from ``jobs`` (per queue, in order), a page of
``first`` at a time with ``pageInfo``; a null organization for another slug; 401 for a wrong
token; ``graphql_answer`` (status, body, content type) replaces the answer when set (an
``errors`` answer, an HTML page). Every request is logged.
"""
from __future__ import annotations

import base64
import json
import re
import threading
from dataclasses import dataclass, field
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
    body: dict[str, Any] = field(default_factory=dict)  # a POST's JSON


@dataclass(frozen=True)
class Job:
    uuid: str
    state: str  # SCHEDULED, RUNNING, WAITING, FINISHED, ...
    cluster: str | None = None  # the cluster's UUID; None: unclustered


class FakeBuildkite:
    def __init__(self, *, token: str = "bkua_fake_agent_token",
                 poll_duration: str | None = "15s",
                 api_token: str = "bkua_fake_api_token", organization: str = "test") -> None:
        self.token = token
        self.poll_duration = poll_duration
        self.queues: dict[str, bytes] = {}
        self.api_token = api_token
        self.organization = organization
        self.jobs: dict[str, list[Job]] = {}
        self.graphql_answer: tuple[int, bytes, str] | None = None
        self.log: list[Request] = []
        self.lock = threading.Lock()
        self.server = QuietServer(("127.0.0.1", 0), _handler(self))
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        """The apiUrl (``…/v3``)."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/v3"

    @property
    def graphql_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/graphql/v1"

    def graphql(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        """The answer to gitscale's query (the fields it asks for, as Buildkite shapes them)."""
        assert re.search(r"organization\(slug: \$slug\)", query), query
        assert "type: [COMMAND]" in query and "agentQueryRules: $rules" in query, query
        assert "... on JobTypeCommand { uuid state }" in query, query
        assert "pageInfo { hasNextPage endCursor }" in query, query
        if variables["slug"] != self.organization:
            return {"data": {"organization": None}}
        (rule,) = variables["rules"]
        queue = rule.removeprefix("queue=")
        if "cluster: $cluster" in query:
            decoded = base64.b64decode(variables["cluster"]).decode()
            assert decoded.startswith("Cluster---"), decoded
            clusters: set[str | None] = {decoded.removeprefix("Cluster---")}
        else:
            assert "clustered: false" in query, query
            clusters = {None}
        matching = [job for job in self.jobs.get(queue, [])
                    if job.state in variables["states"] and job.cluster in clusters]
        start = int(variables["after"].removeprefix("cursor-")) if variables["after"] else 0
        page = matching[start:start + int(variables["first"])]
        end = start + len(page)
        return {"data": {"organization": {"jobs": {
            "edges": [{"node": {"uuid": job.uuid, "state": job.state}} for job in page],
            "pageInfo": {"hasNextPage": end < len(matching), "endCursor": f"cursor-{end}"},
        }}}}

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

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None,
                  sent: dict[str, Any] | None = None,
                  content_type: str = "application/json") -> None:
            with fake.lock:
                fake.log.append(Request(self.command, self.path, status,
                                        self.headers.get("Authorization"), sent or {}))
            self.send_response(status)
            self.send_header("Content-Type", content_type)
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

        def do_POST(self) -> None:  # noqa: N802
            sent = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            if urlsplit(self.path).path != "/graphql/v1":
                self._send(404, b'{"message":"Not Found"}', sent=sent)
                return
            if self.headers.get("Authorization") != f"Bearer {fake.api_token}":
                self._send(401, b'{"errors":[{"message":"Authentication required"}]}',
                           sent=sent)
                return
            if fake.graphql_answer is not None:
                status, body, kind = fake.graphql_answer
                self._send(status, body, sent=sent, content_type=kind)
                return
            answer = fake.graphql(sent["query"], sent["variables"])
            self._send(200, json.dumps(answer).encode(), sent=sent)

    return Handler
