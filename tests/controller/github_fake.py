"""A GitHub-shaped REST server on 127.0.0.1 for the controller's runner API calls.

Serves, under ``/api/v3`` (the GitHub Enterprise Server layout, so a RunnerSet's ``configURL``
of ``http://127.0.0.1:PORT/acme`` reaches it): generate-jitconfig (org, repo and enterprise
scopes; 409 when the name exists), the runner list (``name``), GET and DELETE of one runner
(404 when gone, 422 "still running a job" when busy), runner groups, and GitHub App
installation tokens and the App's installation on an org or repo (``GET /orgs/ORG/installation``,
id ``installation``; the JWT is verified with the app's public key). Lists page as GitHub's
do: ``per_page`` (default 30, at most 100) and ``page``, with a ``Link`` header (``rel="next"``,
``"last"``, ``"first"``, ``"prev"``) that keeps the other query parameters, and an ``ETag``: a
page asked for with its current ETag in ``If-None-Match`` is answered 304 with no body (GitHub
does not count those against the rate limit). Every answer carries ``x-ratelimit-*`` headers,
unless made with ``rate_limits=False`` (GitHub Enterprise Server's default: rate limiting off, no
such header). A path outside ``/api/v3`` is answered 404 with an HTML page, as the server's web
side would: a URL built without the prefix, or with it twice, is not served.

Test seams: ``runners`` (by id), ``set_state(name, online=, busy=)``, ``refuse_delete(name)``
(answer 422 though the list says idle: a job was picked up between the two calls),
``fail_delete(name, code)`` (answer DELETE with a 5xx, the runner kept), ``calls``
(method and path of each request), ``queries`` (the query string of each), ``tokens``
(accepted bearer tokens), ``groups`` (name → id), ``limit(times, retry_after=, reset=)`` (the
next ``times`` requests answer 403/429 as a primary or secondary rate limit), ``remaining``
(the ``x-ratelimit-remaining`` every answer says), ``not_modified`` (304s answered),
``outage(code, method=, path=)`` (every matching request answers ``code``, after counting it in
``calls``, until ``outage(None)``: GitHub down, or a secondary limit with no more to say; code
``DROP``: the connection is closed with no answer at all).
"""
from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterable
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt

SCOPE = r"(?P<scope>orgs/[^/]+|repos/[^/]+/[^/]+|enterprises/[^/]+)"
DROP = 0  # ``outage(DROP)``: no answer, the connection closed (a load balancer dropping it)


@dataclass
class FakeRunner:
    id: int
    name: str
    scope: str
    labels: list[str]
    group_id: int
    online: bool = False
    busy: bool = False

    def json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "os": "Linux", "ephemeral": True,
                "status": "online" if self.online else "offline", "busy": self.busy,
                "labels": [{"name": n, "type": "custom"} for n in self.labels],
                "runner_group_id": self.group_id}


class FakeGitHub(ThreadingHTTPServer):
    daemon_threads = True
    # The controller opens up to --concurrency connections at once: with socketserver's
    # backlog of 5, those past it wait for a SYN retransmit (1 s, 3 s, 7 s…) whenever the
    # accept thread lags (a loaded machine), as the local API server's comment says
    request_queue_size = 256

    def __init__(self, token: str = "ghp-test-token", app: tuple[str, str] | None = None, *,
                 rate_limits: bool = True) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.rate_limits = rate_limits  # False: no x-ratelimit-* header (GHES's default)
        self.lock = threading.Lock()
        self.runners: dict[int, FakeRunner] = {}
        self.ids = itertools.count(1000)
        self.calls: list[tuple[str, str]] = []
        self.queries: list[str] = []
        self.limits: list[tuple[int | None, int | None]] = []  # (retry-after, reset) per request
        self.remaining = 5000
        self.not_modified = 0
        self.tokens = {token}
        self.app = app  # (app id, PEM public key)
        self.installation = 77  # the App's installation on every org and repo
        self.groups = {"Default": 1, "gpu": 7}
        self.refused: set[str] = set()
        self.failing: dict[str, int] = {}  # runner name → the status its DELETE answers
        # (code, method or None, path regex or None, body, headers): answered to every match
        # (code, method or None, path regex or None, body — JSON, or raw bytes —, headers)
        self.down: tuple[int, str | None, str | None, Any, dict[str, str]] | None = None
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> FakeGitHub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients closing kept-alive connections at shutdown is not worth a traceback

    def by_name(self, name: str) -> FakeRunner | None:
        with self.lock:
            return next((r for r in self.runners.values() if r.name == name), None)

    def add_runners(self, names: Iterable[str], labels: list[str], *,
                    scope: str = "orgs/acme", group_id: int = 1) -> None:
        """Registrations made without a request each, as many generate-jitconfig calls would
        make them (offline, idle): for the tests of reading a long list."""
        with self.lock:
            for name in names:
                runner = FakeRunner(next(self.ids), name, scope, list(labels), group_id)
                self.runners[runner.id] = runner

    def set_state(self, name: str, *, online: bool = True, busy: bool = False) -> None:
        runner = self.by_name(name)
        assert runner is not None, f"no runner {name}"
        with self.lock:
            runner.online, runner.busy = online, busy

    def refuse_delete(self, name: str) -> None:
        with self.lock:
            self.refused.add(name)

    def fail_delete(self, name: str, code: int | None = 502) -> None:
        """DELETE of runner ``name`` answers ``code`` (a 5xx: GitHub failed) and keeps it;
        None: answered as usual again."""
        with self.lock:
            if code is None:
                self.failing.pop(name, None)
            else:
                self.failing[name] = code

    def limit(self, times: int = 1, *, retry_after: int | None = None,
              reset: int | None = None) -> None:
        """The next ``times`` requests are refused by a rate limit: a secondary one with
        ``retry_after`` (429), a primary one (403, none remaining) until ``reset``."""
        with self.lock:
            self.limits += [(retry_after, reset)] * times

    def outage(self, code: int | None, *, method: str | None = None, path: str | None = None,
               message: str = "Server Error", headers: dict[str, str] | None = None,
               raw: bytes | None = None) -> None:
        """Every request of ``method`` (None: any) whose path matches ``path`` (a regex; None:
        any) answers ``code`` with ``message`` (or the bytes ``raw``, as they are: garbage, an
        HTML page, a huge body; ``Content-Type`` from ``headers``); None ends the outage."""
        with self.lock:
            self.down = None if code is None else (
                code, method, path, {"message": message} if raw is None else raw,
                dict(headers or {}))

    def count(self, method: str, pattern: str = "") -> int:
        with self.lock:
            return sum(m == method and re.search(pattern, p) is not None for m, p in self.calls)


class _Handler(BaseHTTPRequestHandler):
    server: FakeGitHub

    def log_message(self, *args: object) -> None:
        pass

    def _reply(self, code: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
        data = body if isinstance(body, bytes) else b"" if body is None else json.dumps(
            body).encode()
        headers = headers or {}
        self.send_response(code)
        self.send_header("Content-Type", headers.pop("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(data)))
        if self.server.rate_limits:
            headers.setdefault("x-ratelimit-remaining", str(self.server.remaining))
            headers = {"x-ratelimit-limit": "5000", "x-ratelimit-reset": "4102444800",
                       "x-ratelimit-resource": "core", **headers}
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _page(self, path: str, query: dict[str, list[str]], key: str,
              items: list[dict[str, Any]]) -> None:
        """One page of ``items`` under ``key``, with GitHub's Link header."""
        try:
            per_page = max(1, min(int(query.get("per_page", ["30"])[0]), 100))
            page = max(1, int(query.get("page", ["1"])[0]))
        except ValueError:
            return self._reply(422, {"message": "Validation Failed"})
        last = max(1, -(-len(items) // per_page))
        kept = [(k, v) for k, values in query.items() if k != "page" for v in values]

        def url(n: int) -> str:
            return f"<{self.server.url}/api/v3{path}?{urlencode(kept + [('page', str(n))])}>"

        links = []
        if page < last:
            links += [f'{url(page + 1)}; rel="next"', f'{url(last)}; rel="last"']
        if page > 1:
            links += [f'{url(1)}; rel="first"', f'{url(page - 1)}; rel="prev"']
        chunk = items[(page - 1) * per_page: page * per_page]
        body = {"total_count": len(items), key: chunk}
        headers = {"Link": ", ".join(links)} if links else {}
        digest = hashlib.sha256(json.dumps([body, headers], sort_keys=True).encode()).hexdigest()
        headers["ETag"] = f'W/"{digest[:40]}"'
        if self.headers.get("If-None-Match") == headers["ETag"]:
            with self.server.lock:
                self.server.not_modified += 1
            return self._reply(304, None, headers)
        self._reply(200, body, headers)

    def _body(self) -> dict[str, Any]:
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"{}")

    def _route(self, method: str) -> None:
        url = urlsplit(self.path)
        path, query = url.path.removeprefix("/api/v3"), parse_qs(url.query)
        srv = self.server
        if not url.path.startswith("/api/v3/") or path.startswith("/api/v3/"):
            with srv.lock:
                srv.calls.append((method, url.path))  # (as sent: a test sees what was wrong)
            return self._reply(404, b"<html><body>Not Found</body></html>",
                               {"Content-Type": "text/html"})
        with srv.lock:
            srv.calls.append((method, path))
            srv.queries.append(url.query)
            limited = srv.limits.pop(0) if srv.limits else None
            down = srv.down
        if down is not None and down[1] in (None, method) and (
                down[2] is None or re.search(down[2], path)):
            if down[0] == DROP:
                self.close_connection = True  # (nothing written: the client sees no answer)
                return None
            return self._reply(down[0], down[3], dict(down[4]))
        if limited is not None:
            retry_after, reset = limited
            if retry_after is not None:
                return self._reply(429, {"message": "You have exceeded a secondary rate limit. "
                                                    "Please wait a few minutes before you try "
                                                    "again."},
                                   {"retry-after": str(retry_after)})
            return self._reply(403, {"message": "API rate limit exceeded for installation ID 1."},
                               {"x-ratelimit-remaining": "0",
                                "x-ratelimit-reset": str(reset or 4102444800)})
        auth = self.headers.get("Authorization", "").removeprefix("Bearer ")
        if method == "POST" and (m := re.fullmatch(r"/app/installations/(\d+)/access_tokens",
                                                   path)):
            return self._installation_token(auth, m.group(1))
        if method == "GET" and re.fullmatch(r"/(orgs/[^/]+|repos/[^/]+/[^/]+)/installation", path):
            if self._app_claims(auth) is None:
                return None
            return self._reply(200, {"id": srv.installation, "app_id": int(srv.app[0])})  # type: ignore[index]
        if auth not in srv.tokens:
            return self._reply(401, {"message": "Bad credentials"})
        if method == "POST" and (m := re.fullmatch(f"/{SCOPE}/actions/runners/generate-jitconfig",
                                                   path)):
            return self._jit(m.group("scope"), self._body())
        if method == "GET" and (m := re.fullmatch(f"/{SCOPE}/actions/runners", path)):
            return self._list(m.group("scope"), query)
        if m := re.fullmatch(f"/{SCOPE}/actions/runners/(?P<id>\\d+)", path):
            return self._one(method, m.group("scope"), int(m.group("id")))
        if method == "GET" and re.fullmatch(r"/(orgs|enterprises)/[^/]+/actions/runner-groups",
                                            path):
            with srv.lock:
                groups = [{"id": i, "name": n, "visibility": "all", "default": i == 1}
                          for n, i in srv.groups.items()]
            return self._page(path, query, "runner_groups", groups)
        return self._reply(404, {"message": "Not Found"})

    def _jit(self, scope: str, body: dict[str, Any]) -> None:
        srv = self.server
        with srv.lock:
            if any(r.name == body["name"] and r.scope == scope for r in srv.runners.values()):
                return self._reply(409, {"message": "Already exists - A runner with the name "
                                                    f"{body['name']} already exists."})
            if body.get("runner_group_id") not in srv.groups.values() or not body.get("labels"):
                return self._reply(422, {"message": "Validation Failed"})
            runner = FakeRunner(next(srv.ids), body["name"], scope, list(body["labels"]),
                                body["runner_group_id"])
            srv.runners[runner.id] = runner
        self._reply(201, {"runner": runner.json(),
                          "encoded_jit_config": f"jit-{runner.name}-{runner.id}"})

    def _list(self, scope: str, query: dict[str, list[str]]) -> None:
        with self.server.lock:
            found = [r for r in self.server.runners.values() if r.scope == scope]
        if "name" in query:
            found = [r for r in found if r.name == query["name"][0]]
        self._page(f"/{scope}/actions/runners", query, "runners", [r.json() for r in found])

    def _one(self, method: str, scope: str, runner_id: int) -> None:
        srv = self.server
        with srv.lock:
            runner = srv.runners.get(runner_id)
            if runner is None or runner.scope != scope:
                return self._reply(404, {"message": "Not Found"})
            if method == "GET":
                return self._reply(200, runner.json())
            if method != "DELETE":
                return self._reply(405, {"message": "Method Not Allowed"})
            if runner.name in srv.failing:
                return self._reply(srv.failing[runner.name], {"message": "Server Error"})
            if runner.busy or runner.name in srv.refused:
                return self._reply(422, {"message": f'Bad request - Runner "{runner.name}" is '
                                                    "still running a job\""})
            del srv.runners[runner_id]
        self._reply(204)

    def _app_claims(self, assertion: str) -> dict[str, Any] | None:
        """The App's JWT, verified; None after answering 404 or 401."""
        srv = self.server
        if srv.app is None:
            self._reply(404, {"message": "Not Found"})
            return None
        try:
            claims: dict[str, Any] = jwt.decode(assertion, srv.app[1], algorithms=["RS256"])
        except jwt.PyJWTError:
            self._reply(401, {"message": "A JSON web token could not be decoded"})
            return None
        if str(claims.get("iss")) != srv.app[0]:
            self._reply(401, {"message": "Integration not found"})
            return None
        return claims

    def _installation_token(self, assertion: str, installation: str) -> None:
        srv = self.server
        if self._app_claims(assertion) is None:
            return
        token = f"ghs-installation-{installation}"
        with srv.lock:
            srv.tokens.add(token)
        expires = datetime.now(timezone.utc) + timedelta(hours=1)
        self._reply(201, {"token": token, "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%SZ")})

    def do_GET(self) -> None:  # noqa: N802
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

    def do_DELETE(self) -> None:  # noqa: N802
        self._route("DELETE")
