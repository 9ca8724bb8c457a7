"""A fake GitHub REST API on 127.0.0.1: real HTTP, real sockets, GitHub's shapes.

Serves what the polling source reads:

    GET  /orgs/{org}/repos                                (a JSON array, paginated)
    GET  /repos/{o}/{r}/actions/runs?status=…&per_page=N  {"total_count", "workflow_runs": [...]}
    GET  /repos/{o}/{r}/actions/runs/{id}/jobs?filter=latest   {"total_count", "jobs": [...]}
    GET  /repositories/{repo id}/actions/runs/{id}/jobs?…      (the same, as ``Link`` names it)
    POST /app/installations/{id}/access_tokens            (a GitHub App's JWT → installation token)

(an App's JWT judged as GitHub does, by its own clock: an ``iat`` in the future, an ``exp`` past
or more than 10 minutes ahead are refused 401 in GitHub's words; the fault ``forbidden`` says
``X-Accepted-GitHub-Permissions``, as GitHub's 403 "Resource not accessible by integration" does)

like GitHub does it: ``Link: <…>; rel="next"`` pagination with ``page``/``per_page`` (capped at
``max_per_page``; a run's jobs pages are named ``/repositories/{repo id}/…`` there, by the
repo's numeric ``id``, as GitHub names them), ETags with 304 on ``If-None-Match`` (the ETag
covers the body only; a 304 still carries the fresh ``Link`` header, as GitHub's do),
``x-ratelimit-*`` headers (a 304 does not count against the limit), 401 without a valid
``Authorization`` header.

GitHub Enterprise Server's shape, on demand: ``prefix="/api/v3"`` serves the API under that path
(``url``, the apiUrl, ends with it; a request outside it is a 404 HTML page, as the server's web
side answers) and ``rate_limits=False`` sends no ``x-ratelimit-*`` header at all (rate limiting is
off by default on GHES: "Rate limits are disabled by default for GitHub Enterprise Server").

Jobs are built from the ``workflow_job`` objects of the reference webhook payloads, runs and
repos from their ``repository``, so bodies have GitHub's size and shape.

Faults (``server.fail(...)``): rate limit (403, remaining 0), secondary limit (429 with
retry-after), 5xx (JSON or an HTML page), slow answers, a 200 HTML page, truncated JSON, a
connection cut mid-body or dropped before any answer (``drop``, for a POST too), or any body (and headers: a ``Link``, a redirect's ``Location``) you
like, a huge body (``size`` bytes, streamed chunked or with its length declared), or an error
that echoes the ``Authorization`` header it was sent. Every request is logged (method, path with query, status, the
Authorization header as received), so tests can check what was sent.

Used by tests/demand and by benchmarks/bench_github.py.
"""
from __future__ import annotations

import copy
import hashlib
import json
import re
import threading
import time
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import parse_qsl, urlencode, urlsplit

PAYLOADS = Path(__file__).resolve().parents[2] / "fixtures" / "reference" / "payloads"


def _load(name: str) -> dict[str, Any]:
    return json.loads((PAYLOADS / name).read_text(encoding="utf-8"))


_QUEUED = _load("queued.payload.json")
JOB_TEMPLATE: dict[str, Any] = _QUEUED["workflow_job"]
REPO_TEMPLATE: dict[str, Any] = _QUEUED["repository"]
SENDER_TEMPLATE: dict[str, Any] = _QUEUED["sender"]
RESET_DEFAULT = 4_102_444_800  # 2100-01-01T00:00:00Z

HTML_PAGE = b"""<!DOCTYPE html>
<html><head><title>Unicorn! &middot; GitHub</title></head>
<body><h1>No server is currently available to service your request.</h1>
<p>Sorry about that. Please try refreshing and contact us if the problem persists.</p>
</body></html>
"""


def repo_id(full: str) -> int:
    """A repo's numeric ``id`` (stable: a checksum of its full name)."""
    return zlib.crc32(full.encode())


@dataclass
class Request:
    method: str
    path: str  # with the query string
    status: int
    authorization: str | None
    if_none_match: str | None

    @property
    def route(self) -> str:
        return urlsplit(self.path).path

    @property
    def query(self) -> dict[str, str]:
        return dict(parse_qsl(urlsplit(self.path).query))


@dataclass
class Fault:
    kind: str  # ratelimit secondary forbidden error slow html truncated cut drop body huge echo
    #            trickle
    match: str = ""  # a substring of the path (with query); "" matches every request
    times: int | None = None  # None: every matching request
    status: int | None = None  # kind error: default 502; kind body: default 200
    delay: float = 0.0
    retry_after: int | str | None = 60  # kind secondary: None sends no retry-after
    html: bool = False
    body: bytes = b""  # kind "body": a 200 with exactly this JSON text
    headers: dict[str, str] = field(default_factory=dict)  # kind "body": added to its headers
    size: int = 0  # kind "huge": this many bytes of a JSON array
    declared: bool = False  # kind "huge": with Content-Length (else chunked)
    trickled: str = "body"  # kind "trickle": "headers" or "body", a byte every ``delay`` s


@dataclass
class Run:
    id: int
    repo: str
    status: str  # queued | in_progress | completed
    jobs: list[dict[str, Any]] = field(default_factory=list)


class QuietServer(ThreadingHTTPServer):
    """A threading server that does not print the broken pipes of clients that gave up."""

    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class FakeGitHub:
    """``with FakeGitHub(token=...) as gh:`` … ``gh.url`` is the apiUrl."""

    def __init__(self, *, token: str | None = "ghp_fake_token", max_per_page: int = 30,
                 app: dict[str, Any] | None = None, link_on_304: bool = True,
                 host: str = "127.0.0.1", max_runs_listed: int = 1000, prefix: str = "",
                 rate_limits: bool = True) -> None:
        self.prefix = prefix.rstrip("/")  # "/api/v3": GitHub Enterprise Server's API path
        self.rate_limits = rate_limits  # False: no x-ratelimit-* headers (GHES's default)
        self.tokens: set[str] = {token} if token else set()
        self.max_per_page = max_per_page
        # a runs list filtered by status stops here, as GitHub's does at 1,000 ("up to 1,000
        # results for each search" with status and the other filters); total_count does not
        self.max_runs_listed = max_runs_listed
        self.app = app  # {"id": int, "installation": int, "public_key": PEM}
        self.link_on_304 = link_on_304
        self.lock = threading.Lock()
        self.log: list[Request] = []
        self.stray: list[Request] = []  # requests of other tests' clients (``_record``)
        self.faults: list[Fault] = []
        self.orgs: dict[str, list[str]] = {}
        self.archived: set[str] = set()
        self.runs: dict[str, list[Run]] = {}  # repo → runs, newest first
        self.issued: list[dict[str, Any]] = []  # installation tokens handed out
        self.looked_up: list[str] = []  # owners whose App installation was asked for
        self.rate_limit = 5000
        self.remaining = 5000
        self.reset = RESET_DEFAULT
        self._next_id = 1_000
        self.server = QuietServer((host, 0), _handler(self))
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)

    # -- lifecycle ----------------------------------------------------------------------------
    @property
    def origin(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def url(self) -> str:
        """The apiUrl: the origin, and ``prefix`` (GHES: ``/api/v3``)."""
        return self.origin + self.prefix

    def start(self) -> "FakeGitHub":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "FakeGitHub":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- data ---------------------------------------------------------------------------------
    def new_id(self) -> int:
        with self.lock:
            self._next_id += 1
            return self._next_id

    def add_repo(self, org: str, name: str, *, archived: bool = False) -> str:
        full = f"{org}/{name}"
        with self.lock:
            self.orgs.setdefault(org, []).append(full)
            self.runs.setdefault(full, [])
            if archived:
                self.archived.add(full)
        return full

    def add_run(self, repo: str, status: str, jobs: Iterable[tuple[str, list[str]]]) -> Run:
        """A run of ``repo`` with jobs given as (job status, labels), newest run first."""
        run = Run(self.new_id(), repo, status)
        for job_status, labels in jobs:
            run.jobs.append(self.make_job(run, job_status, labels))
        with self.lock:
            self.runs.setdefault(repo, []).insert(0, run)
        return run

    def make_job(self, run: Run, status: str, labels: list[str]) -> dict[str, Any]:
        job = copy.deepcopy(JOB_TEMPLATE)
        job_id = self.new_id() * 10
        base = f"https://api.github.com/repos/{run.repo}"
        job.update({
            "id": job_id, "run_id": run.id, "run_url": f"{base}/actions/runs/{run.id}",
            "url": f"{base}/actions/jobs/{job_id}", "status": status, "labels": list(labels),
            "html_url": f"https://github.com/{run.repo}/actions/runs/{run.id}/job/{job_id}",
            "check_run_url": f"{base}/check-runs/{job_id}", "name": f"build-{job_id}",
        })
        if status == "queued":
            job.update({"runner_id": None, "runner_name": None, "runner_group_id": None,
                        "runner_group_name": None})
        if status == "completed":
            job["conclusion"] = "success"
        return job

    def set_job_status(self, job_id: int, status: str) -> None:
        with self.lock:
            for runs in self.runs.values():
                for run in runs:
                    for job in run.jobs:
                        if job["id"] == job_id:
                            job["status"] = status
                            return
        raise KeyError(job_id)

    def fail(self, kind: str, match: str = "", times: int | None = None, **options: Any) -> Fault:
        fault = Fault(kind, match, times, **options)
        with self.lock:
            self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self.lock:
            self.faults.clear()

    def clear_log(self) -> None:
        with self.lock:
            self.log.clear()

    # -- shapes -------------------------------------------------------------------------------
    def repo_object(self, full: str) -> dict[str, Any]:
        owner, name = full.split("/")
        repo = copy.deepcopy(REPO_TEMPLATE)
        repo.update({"id": repo_id(full), "name": name, "full_name": full,
                     "archived": full in self.archived, "private": True,
                     "url": f"https://api.github.com/repos/{full}",
                     "html_url": f"https://github.com/{full}"})
        repo["owner"] = dict(repo["owner"], login=owner)
        return repo

    def run_object(self, run: Run) -> dict[str, Any]:
        base = f"https://api.github.com/repos/{run.repo}"
        repo = self.repo_object(run.repo)
        return {
            "id": run.id, "name": "CI", "node_id": f"WFR_{run.id}", "head_branch": "main",
            "head_sha": JOB_TEMPLATE["head_sha"], "path": ".github/workflows/ci.yml",
            "display_title": f"Build {run.id}", "run_number": run.id % 1000, "event": "push",
            "status": run.status, "conclusion": None, "workflow_id": 161335,
            "check_suite_id": run.id * 3, "url": f"{base}/actions/runs/{run.id}",
            "html_url": f"https://github.com/{run.repo}/actions/runs/{run.id}",
            "jobs_url": f"{base}/actions/runs/{run.id}/jobs",
            "created_at": "2021-09-13T02:21:13Z", "updated_at": "2021-09-13T02:21:13Z",
            "run_attempt": 1, "run_started_at": "2021-09-13T02:21:13Z",
            "actor": SENDER_TEMPLATE, "triggering_actor": SENDER_TEMPLATE,
            "repository": repo, "head_repository": repo,
        }

    # -- request handling (called from the handler threads) -----------------------------------
    def take_fault(self, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.match in path and (fault.times is None or fault.times > 0):
                    if fault.times is not None:
                        fault.times -= 1
                    return fault
        return None

    def authorized(self, header: str | None) -> bool:
        if not header:
            return False
        scheme, _, value = header.partition(" ")
        return scheme.lower() in ("bearer", "token") and value in self.tokens

    def route(self, path: str, query: dict[str, str]) -> Any:
        """The list at ``path`` (unpaginated; a filtered runs list cut at
        ``max_runs_listed``), its envelope key and ``total_count``, or None (404)."""
        with self.lock:
            if m := re.fullmatch(r"/orgs/([^/]+)/repos", path):
                if m.group(1) not in self.orgs:
                    return None
                return [self.repo_object(r) for r in self.orgs[m.group(1)]], None, None
            if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/actions/runs", path):
                if m.group(1) not in self.runs:
                    return None
                status = query.get("status")
                runs = [r for r in self.runs[m.group(1)] if status is None or r.status == status]
                shown = runs[:self.max_runs_listed] if status is not None else runs
                return [self.run_object(r) for r in shown], "workflow_runs", len(runs)
            if m := re.fullmatch(r"/repos/([^/]+/[^/]+)/actions/runs/(\d+)/jobs", path):
                repo: str | None = m.group(1)
            elif m := re.fullmatch(r"/repositories/(\d+)/actions/runs/(\d+)/jobs", path):
                repo = next((r for r in self.runs if repo_id(r) == int(m.group(1))), None)
            else:
                return None
            for run in self.runs.get(repo or "", []):
                if run.id == int(m.group(2)):
                    return copy.deepcopy(run.jobs), "jobs", len(run.jobs)
            return None

    def link_path(self, path: str) -> str:
        """The path a ``Link`` header names the pages of ``path`` by: GitHub's
        ``/repositories/{repo id}/…`` for a run's jobs (the repo's name does not appear)."""
        if m := re.fullmatch(r"/repos/([^/]+/[^/]+)(/actions/runs/\d+/jobs)", path):
            return f"/repositories/{repo_id(m.group(1))}{m.group(2)}"
        return path

    def count_200(self) -> tuple[int, int]:
        with self.lock:
            self.remaining = max(0, self.remaining - 1)
            return self.remaining, self.reset

    def _app_claims(self, authorization: str | None) -> tuple[int, Any]:
        """(200, the JWT's claims), or the refusal GitHub gives an App's bad JWT."""
        import jwt

        assert self.app is not None
        scheme, _, assertion = (authorization or "").partition(" ")
        if scheme.lower() != "bearer":
            return 401, {"message": "A JSON web token could not be decoded"}
        try:
            claims = jwt.decode(assertion, self.app["public_key"], algorithms=["RS256"],
                                options={"require": ["iat", "exp", "iss"],
                                         "verify_exp": False, "verify_iat": False})
        except jwt.PyJWTError:
            return 401, {"message": "A JSON web token could not be decoded"}
        if str(claims["iss"]) != str(self.app["id"]):
            return 401, {"message": "A JSON web token could not be decoded"}
        # GitHub's rules and words, on its own clock (the Date header it sends)
        now = time.time()
        if claims["iat"] > now:
            return 401, {"message": "'Issued at' claim ('iat') must be an Integer representing "
                                    "a time in the past"}
        if claims["exp"] <= now:
            return 401, {"message": "'Expiration time' claim ('exp') must be a numeric value "
                                    "representing the future time at which the assertion "
                                    "expires"}
        if claims["exp"] > now + 600:
            return 401, {"message": "'Expiration time' claim ('exp') is too far in the future"}
        return 200, claims

    def installation_of(self, owner: str, authorization: str | None) -> tuple[int, Any]:
        """``GET /orgs/ORG/installation`` (or ``/repos/O/R/installation``): the App's
        installation there, for the App's own JWT."""
        if self.app is None:
            return 404, {"message": "Not Found"}
        status, claims = self._app_claims(authorization)
        if status != 200:
            return status, claims
        with self.lock:
            self.looked_up.append(owner)
        if owner not in self.app.get("owners", ("orgs/acme",)):
            return 404, {"message": "Not Found"}
        return 200, {"id": self.app["installation"], "app_id": self.app["id"],
                     "account": {"login": owner.split("/")[1]}}

    def issue_token(self, installation: str, authorization: str | None) -> tuple[int, Any]:
        if self.app is None or str(self.app["installation"]) != installation:
            return 404, {"message": "Not Found"}
        status, claims = self._app_claims(authorization)
        if status != 200:
            return status, claims
        token = f"ghs_installation_{len(self.issued) + 1:04d}"
        expires = datetime.fromtimestamp(time.time() + 3600, timezone.utc)
        body = {"token": token, "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "permissions": {"actions": "read", "metadata": "read"},
                "repository_selection": "all"}
        with self.lock:
            self.tokens.add(token)
            self.issued.append({"claims": claims, **body})
        return 201, body


def _handler(fake: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like api.github.com
        disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms stall

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            pass

        def _record(self, status: int) -> None:
            request = Request(self.command, self.path, status, self.headers.get("Authorization"),
                              self.headers.get("If-None-Match"))
            with fake.lock:
                # A Kubernetes API path is no request of gitscale's to GitHub: a client of
                # another test (a controller still reconnecting to its closed API server) that
                # found this server on the port it had, reused (a one-off seen under xdist)
                stray = self.path.startswith(("/api/v1/", "/apis/"))
                (fake.stray if stray else fake.log).append(request)

        def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
                  *, content_type: str = "application/json; charset=utf-8",
                  length: int | None = None) -> None:
            self._record(status)
            self.send_response(status)
            self.send_header("Server", "GitHub.com")
            self.send_header("Date", self.date_time_string())
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            if status != 304:
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body) if length is None else length))
            self.end_headers()
            if status != 304:
                self.wfile.write(body)

        def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
            self._send(status, json.dumps(data).encode(), headers)

        def _limits(self, remaining: int | None = None) -> dict[str, str]:
            if not fake.rate_limits:
                return {}
            return {"x-ratelimit-limit": str(fake.rate_limit),
                    "x-ratelimit-remaining": str(fake.remaining if remaining is None
                                                 else remaining),
                    "x-ratelimit-reset": str(fake.reset), "x-ratelimit-resource": "core",
                    "x-ratelimit-used": str(fake.rate_limit - fake.remaining)}

        def _api_path(self) -> str | None:
            """The request's path under ``prefix``; None, after a 404 page, outside it."""
            path = urlsplit(self.path).path
            if not fake.prefix:
                return path
            if path.startswith(fake.prefix + "/"):
                return path[len(fake.prefix):]
            self._send(404, b"<html><body>Not Found</body></html>",
                       content_type="text/html; charset=utf-8")
            return None

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            path = self._api_path()
            if path is None:
                return
            fault = fake.take_fault(self.path)
            if fault and self._fault(fault):
                return
            m = re.fullmatch(r"/app/installations/([^/]+)/access_tokens", path)
            if not m:
                self._json(404, {"message": "Not Found"})
                return
            status, body = fake.issue_token(m.group(1), self.headers.get("Authorization"))
            self._json(status, body)

        def do_DELETE(self) -> None:  # noqa: N802
            if self._api_path() is None:
                return
            fault = fake.take_fault(self.path)
            if fault and self._fault(fault):
                return
            self._json(404, {"message": "Not Found"})

        def do_GET(self) -> None:  # noqa: N802
            split = urlsplit(self.path)
            path = self._api_path()
            if path is None:
                return
            pairs = parse_qsl(split.query, keep_blank_values=True)
            query = dict(pairs)
            fault = fake.take_fault(self.path)
            if fault and fault.kind == "slow":
                time.sleep(fault.delay)
                fault = None
            owner = re.fullmatch(r"/(orgs/[^/]+|repos/[^/]+/[^/]+)/installation", path)
            if owner:  # an App's own call, with its JWT
                self._json(*fake.installation_of(owner.group(1),
                                                 self.headers.get("Authorization")))
                return
            if not fake.authorized(self.headers.get("Authorization")):
                self._json(401, {"message": "Bad credentials",
                                 "documentation_url": "https://docs.github.com/rest"})
                return
            if fault and self._fault(fault):
                return
            found = fake.route(path, query)
            if found is None:
                self._json(404, {"message": "Not Found",
                                 "documentation_url": "https://docs.github.com/rest"})
                return
            items, key, total = found
            try:
                per_page = max(1, min(int(query.get("per_page", 30)), fake.max_per_page))
                page = max(1, int(query.get("page", 1)))
            except ValueError:
                self._json(422, {"message": "Validation Failed"})
                return
            last = max(1, -(-len(items) // per_page))
            chunk = items[(page - 1) * per_page: page * per_page]
            data: Any = chunk if key is None else {"total_count": total, key: chunk}
            body = json.dumps(data).encode()
            etag = f'W/"{hashlib.sha256(body).hexdigest()[:40]}"'
            headers = {"ETag": etag, "Cache-Control": "private, max-age=60, s-maxage=60",
                       "Vary": "Accept, Authorization, Cookie, X-GitHub-OTP",
                       "X-GitHub-Media-Type": "github.v3; format=json"}
            link = self._link(path, pairs, page, last)
            if link:
                headers["Link"] = link
            sent = [t.strip() for t in (self.headers.get("If-None-Match") or "").split(",")]
            if etag in sent:
                if not fake.link_on_304:
                    headers.pop("Link", None)
                self._send(304, b"", {**headers, **self._limits()})
                return
            fake.count_200()
            if fault and fault.kind == "truncated":
                self._send(200, body[: len(body) // 2], {**headers, **self._limits()})
                return
            if fault and fault.kind == "cut":  # promise the whole body, send half, hang up
                self.close_connection = True
                self._send(200, body[: len(body) // 2], {**self._limits()}, length=len(body))
                return
            self._send(200, body, {**headers, **self._limits()})

        def _link(self, path: str, pairs: list[tuple[str, str]], page: int, last: int) -> str:
            def url(n: int) -> str:
                kept = [(k, v) for k, v in pairs if k != "page"] + [("page", str(n))]
                return f"<{fake.url}{fake.link_path(path)}?{urlencode(kept)}>"

            parts = []
            if page > 1:
                parts += [f'{url(page - 1)}; rel="prev"', f'{url(1)}; rel="first"']
            if page < last:
                parts += [f'{url(page + 1)}; rel="next"', f'{url(last)}; rel="last"']
            return ", ".join(parts)

        def _fault(self, fault: Fault) -> bool:
            """Answer with ``fault``; False when it only changes a normal answer."""
            if fault.kind == "ratelimit":
                self._json(403, {"message": "API rate limit exceeded for installation ID 1.",
                                 "documentation_url": "https://docs.github.com/rest/"
                                 "overview/rate-limits-for-the-rest-api"},
                           self._limits(remaining=0))
            elif fault.kind == "secondary":
                headers = self._limits()
                if fault.retry_after is not None:
                    headers["retry-after"] = str(fault.retry_after)
                self._json(fault.status or 429, {
                    "message": "You have exceeded a secondary rate limit. Please wait a few "
                               "minutes before you try again."}, headers)
            elif fault.kind == "forbidden":  # GitHub names the permission it wanted
                self._json(403, {"message": "Resource not accessible by integration"},
                           {**self._limits(), "X-Accepted-GitHub-Permissions": "actions=read",
                            **fault.headers})
            elif fault.kind == "error":
                if fault.html:
                    self._send(fault.status or 502, HTML_PAGE,
                               content_type="text/html; charset=utf-8")
                else:
                    self._json(fault.status or 502, {"message": "Server Error"})
            elif fault.kind == "body":
                self._send(fault.status or 200, fault.body, {**self._limits(), **fault.headers})
            elif fault.kind == "huge":
                self._huge(fault)
            elif fault.kind == "trickle":
                self._trickle(fault)
            elif fault.kind == "echo":  # a server (or a proxy) that repeats what it was sent
                self._json(fault.status or 401, {"message": "Bad credentials: Authorization: "
                                                            f"{self.headers.get('Authorization')}"})
            elif fault.kind == "html":
                self._send(200, HTML_PAGE, content_type="text/html; charset=utf-8")
            elif fault.kind == "drop":  # hang up with no answer at all (logged with status 0)
                self._record(0)
                self.close_connection = True
            else:
                return False
            return True

        def _trickle(self, fault: Fault) -> None:
            """A 200 whose headers (or body) come a byte every ``fault.delay`` seconds: each
            byte well within any read timeout, the whole never (it stops after a minute, or
            when the client hangs up) — or, with ``fault.body``, that body, in the end."""
            self._record(200)
            self.close_connection = True
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            if fault.trickled == "body":
                head += b"Content-Length: %d\r\n\r\n" % (len(fault.body) or 100000)
            ends = time.monotonic() + 60
            try:
                self.wfile.write(head)
                self.wfile.flush()
                for n in range(len(fault.body) or 10**9):
                    if time.monotonic() > ends:
                        break
                    self.wfile.write(fault.body[n:n + 1] if fault.body else
                                     b" " if fault.trickled == "body" else b"X-Slow: 1\r\n")
                    self.wfile.flush()
                    time.sleep(fault.delay)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _huge(self, fault: Fault) -> None:
            """``[0,0,0,…`` for ``fault.size`` bytes, a MiB at a time (never whole in memory);
            stops when the client hangs up."""
            self._record(200)
            self.close_connection = True
            self.send_response(200)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            if fault.declared:
                self.send_header("Content-Length", str(fault.size))
            else:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b"[" + b"0," * (2**19 - 1)
            left = fault.size
            try:
                while left > 0:
                    part = chunk[:left]
                    left -= len(part)
                    chunk = b"0," * 2**19
                    self.wfile.write(part if fault.declared else
                                     b"%x\r\n%s\r\n" % (len(part), part))
                if not fault.declared:
                    self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler


# -- a realistic org, for the end-to-end tests and the benchmark ----------------------------
@dataclass
class OrgFixture:
    """What was put on the server: every job as (status, labels), for an independent oracle."""

    org: str
    repos: list[str]
    jobs: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)

    def expected(self, runner_labels: Iterable[str]) -> tuple[int, int]:
        """(queued, running) of the jobs a runner with ``runner_labels`` could take."""
        have = {label.lower() for label in runner_labels}
        queued = running = 0
        for status, labels in self.jobs:
            if not {label.lower() for label in labels} - {"self-hosted"} <= have:
                continue
            queued += status == "queued"
            running += status == "in_progress"
        return queued, running


LABEL_MIX: list[list[str]] = [
    ["self-hosted", "linux", "x64"],
    ["self-hosted", "linux", "x64"],
    ["self-hosted", "Linux", "X64"],      # labels are case-insensitive
    ["self-hosted", "linux", "gpu"],
    ["self-hosted", "linux", "arm64"],
    ["ubuntu-latest"],                    # GitHub-hosted: no set of ours
    ["linux"],                            # no self-hosted label: still ours by the rule
    ["self-hosted"],                      # matches every set
]


def populate_org(fake: FakeGitHub, org: str, repos: int, *, busy_repo_runs: int = 0,
                 matrix_jobs: int = 0, archived: int = 1) -> OrgFixture:
    """``repos`` repos with a few queued/in-progress runs each; repo 0 has ``busy_repo_runs``
    queued runs (several pages), repo 1 one run with ``matrix_jobs`` jobs; ``archived`` extra
    archived repos whose runs must not count."""
    fixture = OrgFixture(org, [])
    mix = 0

    def labels() -> list[str]:
        nonlocal mix
        mix += 1
        return LABEL_MIX[mix % len(LABEL_MIX)]

    def add(repo: str, status: str, jobs: list[tuple[str, list[str]]], counted: bool) -> None:
        fake.add_run(repo, status, jobs)
        if counted:
            fixture.jobs += [(s, tuple(l)) for s, l in jobs]

    for i in range(repos):
        repo = fake.add_repo(org, f"service-{i:03d}")
        fixture.repos.append(repo)
        add(repo, "completed", [("completed", labels())], True)
        for _ in range(i % 3):
            add(repo, "queued", [("queued", labels()), ("queued", labels())], True)
        if i % 2:
            add(repo, "in_progress", [("in_progress", labels()), ("queued", labels()),
                                      ("completed", labels())], True)
        if i == 0:
            for _ in range(busy_repo_runs):
                add(repo, "queued", [("queued", labels())], True)
        if i == 1 and matrix_jobs:
            add(repo, "in_progress", [("in_progress" if n % 2 else "queued", labels())
                                      for n in range(matrix_jobs)], True)
    for i in range(archived):
        repo = fake.add_repo(org, f"old-{i}", archived=True)
        add(repo, "queued", [("queued", ["self-hosted"])], False)
    return fixture
