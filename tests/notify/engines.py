"""Fake GitOps webhook endpoints on 127.0.0.1 that check what the real engines check.

``FakeFlux`` follows notification-controller's receiver server (internal/server/
receiver_handlers.go): the Receiver is found by its webhook path, ``/hook/`` + hex SHA-256 of
token + name + namespace (api/v1 ``GetWebhookPath``), 404 otherwise; a ``generic-hmac``
Receiver then validates ``X-Signature`` as go-github's ``ValidateSignature`` does
(``<sha1|sha256|sha512>=<hex HMAC of the raw body keyed by the token>``), 400 when it fails,
and answers 200 after requesting a reconcile of its resources.

``FakeArgoCD`` follows Argo CD's ``/api/webhook`` (util/webhook/webhook.go) with
go-playground/webhooks v6 for GitHub: an ``X-GitHub-Event`` header or 400 "Unknown webhook
event"; POST only; the event must be ``push`` or ``ping``; with ``webhook.github.secret`` set,
``X-Hub-Signature-256`` must be ``sha256=<hex HMAC-SHA256 of the raw body>``; the body is decoded
into typed structs (a JSON value of the wrong type fails the request). Then, as
``HandleEvent``: the revision is the ref after ``refs/heads/``; ``touchedHead`` is
``repository.default_branch == revision``; each Application whose targetRevision matches
(HEAD/empty → touchedHead) and whose repoURL matches ``GetWebURLRegex(repository.html_url)`` is
refreshed, unless it has ``manifest-generate-paths`` and no changed file lies under them.
With ``tls=True`` it serves https with a self-signed certificate, as argocd-server does when it
was given none (and as no CA vouches for).
"""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import re
import ssl
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.demand.fake_github import QuietServer


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int
    error: str = ""


def self_signed(directory: Path) -> ssl.SSLContext:
    """A server context with a fresh self-signed certificate for 127.0.0.1 (and the names
    argocd-server's own certificate has), signed by nothing a client trusts."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Argo CD")])
    now = datetime.now(timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost"),
                x509.DNSName("argocd-server.argocd.svc.cluster.local")]), critical=False)
            .sign(key, hashes.SHA256()))
    (directory / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(directory / "cert.pem", directory / "key.pem")
    return context


class _Fake:
    def __init__(self, tls: bool = False) -> None:
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.fail_with: int | None = None  # answer every request with this status
        self.hold = threading.Event()  # while clear and ``stall`` is set, requests hang
        self.stall = False
        self.trickle = False  # an answer's headers, then its body a byte every 0.3 s
        self.server = QuietServer(("127.0.0.1", 0), _handler(self))
        self.tls = tls
        if tls:
            with tempfile.TemporaryDirectory() as directory:
                context = self_signed(Path(directory))
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True,
                                                     do_handshake_on_connect=False)
            quiet = self.server.handle_error

            def handle_error(request: Any, address: Any) -> None:
                if not isinstance(sys.exc_info()[1], ssl.SSLError):  # a client refusing us
                    quiet(request, address)

            self.server.handle_error = handle_error  # type: ignore[method-assign]
        self.thread = threading.Thread(target=self.server.serve_forever,
                                       kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Any:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.hold.set()
        self.server.shutdown()
        self.server.server_close()

    def answer(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, str]:
        raise NotImplementedError


def _handler(fake: _Fake) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = {k.lower(): v for k, v in self.headers.items()}
            if fake.stall:
                fake.hold.wait(10)
                return
            if fake.trickle:
                self.send_response(200)
                self.send_header("Content-Length", "40")
                self.end_headers()
                for _ in range(40):
                    if fake.hold.wait(0.3):
                        return
                    try:
                        self.wfile.write(b".")
                        self.wfile.flush()
                    except OSError:  # the client gave up
                        return
                return
            if fake.fail_with is not None:
                status, error = fake.fail_with, "failing on purpose"
            else:
                status, error = fake.answer(self.path, headers, body)
            with fake.lock:
                fake.seen.append(Seen(self.path, headers, body, status, error))
            data = error.encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    return Handler


# -- Flux ---------------------------------------------------------------------------------------
@dataclass
class Receiver:
    name: str
    namespace: str
    token: str
    resources: list[str] = field(default_factory=lambda: ["GitRepository/gitscale"])

    @property
    def webhook_path(self) -> str:
        digest = hashlib.sha256(f"{self.token}{self.name}{self.namespace}".encode()).hexdigest()
        return f"/hook/{digest}"


class FakeFlux(_Fake):
    def __init__(self, *receivers: Receiver) -> None:
        super().__init__()
        self.receivers = list(receivers)
        self.reconciled: list[str] = []

    def answer(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, str]:
        receiver = next((r for r in self.receivers if r.webhook_path == path), None)
        if receiver is None:
            return 404, ""
        problem = _validate_signature(headers.get("x-signature", ""), body, receiver.token)
        if problem:
            return 400, f"unable to validate HMAC signature: {problem}"
        with self.lock:
            self.reconciled.extend(receiver.resources)
        return 200, ""


def _validate_signature(signature: str, body: bytes, key: str) -> str:
    """go-github's ValidateSignature: ``<hash>=<hex>`` with sha1, sha256 or sha512."""
    algo, sep, hexmac = signature.partition("=")
    if not sep:
        return "missing signature"
    if algo not in ("sha1", "sha256", "sha512"):
        return f"unknown hash type prefix: {algo}"
    try:
        given = bytes.fromhex(hexmac)
    except ValueError:
        return "error decoding signature"
    if not hmac.compare_digest(given, hmac.new(key.encode(), body, algo).digest()):
        return "payload signature check failed"
    return ""


# -- Argo CD ------------------------------------------------------------------------------------
@dataclass
class Application:
    name: str
    repo_url: str
    target_revision: str = "HEAD"
    generate_paths: list[str] | None = None  # argocd.argoproj.io/manifest-generate-paths


class FakeArgoCD(_Fake):
    def __init__(self, secret: str | None, *apps: Application, tls: bool = False) -> None:
        super().__init__(tls)
        self.secret = secret
        self.apps = list(apps)
        self.refreshed: list[str] = []
        self.events: list[dict[str, Any]] = []

    def answer(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, str]:
        if path != "/api/webhook":
            return 404, ""
        event = headers.get("x-github-event", "")
        if not event:
            return 400, "Unknown webhook event"
        if event not in ("push", "ping"):
            return 400, "Webhook processing failed: event not defined to be parsed"
        if not body:
            return 400, "Webhook processing failed: error parsing payload"
        if self.secret:
            signature = headers.get("x-hub-signature-256", "")
            if not signature:
                return 400, "Webhook processing failed: missing X-Hub-Signature-256 Header"
            signature = signature.removeprefix("sha256=")
            if len(signature) < 6:
                return 400, "Webhook processing failed: Invalid Github signature"
            expected = hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
            if not hmac.compare_digest(signature.encode(), expected.encode()):
                return 400, "Webhook processing failed: HMAC verification failed"
        try:
            payload = json.loads(body)
            _typecheck(payload, PUSH_PAYLOAD, "")
        except (ValueError, TypeError) as exc:
            return 400, f"Webhook processing failed: {exc}"
        with self.lock:
            self.events.append(payload)
        if event == "push":
            self._handle_push(payload)
        return 200, ""

    def _handle_push(self, payload: dict[str, Any]) -> None:
        repository = payload.get("repository") or {}
        web_url = repository.get("html_url") or ""
        revision = parse_revision(payload.get("ref") or "")
        touched_head = repository.get("default_branch") == revision
        changed = [f for c in payload.get("commits") or []
                   for key in ("added", "modified", "removed") for f in c.get(key) or []]
        pattern = web_url_regex(web_url)
        for app in self.apps:
            if not (revision_has_changed(app.target_revision, revision, touched_head)
                    and pattern.match(app.repo_url)):
                continue
            if app.generate_paths is not None and not any(
                    f.startswith(p.strip("/") + "/") for p in app.generate_paths for f in changed):
                continue
            with self.lock:
                self.refreshed.append(app.name)


def parse_revision(ref: str) -> str:
    return ref.split("/", 2)[-1]


def revision_has_changed(target: str, revision: str, touched_head: bool) -> bool:
    short = parse_revision(target)
    if short in ("HEAD", ""):
        return touched_head
    if target.startswith(("refs/heads/", "refs/tags/")):
        return revision == short
    return target == revision


USERNAME = r"[\w\.][\w\.-]{0,30}[\w\.\$-]?"


def web_url_regex(web_url: str) -> re.Pattern[str]:
    """Argo CD's GetWebURLRegex: any http(s)/ssh/scp spelling of the same host and path."""
    parts = urlsplit(web_url)
    host = re.escape(parts.hostname or "")
    path = re.escape(quote(parts.path)[1:])
    return re.compile(rf"(?i)^((https?|ssh)://)?({USERNAME}@)?((alt)?ssh\.)?{host}(:\d+)?[:/]"
                      rf"{path}(\.git)?$")


# go-playground/webhooks v6 github.PushPayload, as the JSON types Go's decoder accepts
# (null is accepted anywhere; "time" is a time.Time: an RFC 3339 string).
USER = {"login": str, "id": int, "node_id": str, "type": str, "site_admin": bool,
        "html_url": str, "url": str}
PERSON = {"name": str, "email": str, "username": str}
COMMIT = {"sha": str, "id": str, "node_id": str, "tree_id": str, "distinct": bool,
          "message": str, "timestamp": str, "url": str, "author": PERSON, "committer": PERSON,
          "added": [str], "removed": [str], "modified": [str]}
REPOSITORY = {"id": int, "node_id": str, "name": str, "full_name": str, "owner": USER,
              "private": bool, "archived": bool, "disabled": bool, "html_url": str,
              "description": str, "fork": bool, "url": str, "created_at": "time",
              "updated_at": "time", "pushed_at": "time", "git_url": str, "ssh_url": str,
              "clone_url": str, "svn_url": str, "size": int, "default_branch": str}
PUSH_PAYLOAD = {"ref": str, "before": str, "after": str, "created": bool, "deleted": bool,
                "forced": bool, "base_ref": str, "compare": str, "commits": [COMMIT],
                "head_commit": COMMIT, "repository": REPOSITORY,
                "pusher": {"name": str, "email": str}, "sender": USER,
                "installation": {"id": int, "node_id": str}}


def _typecheck(value: Any, spec: Any, where: str) -> None:
    if value is None:
        return
    if spec == "time":
        if not isinstance(value, str):
            raise TypeError(f"json: cannot unmarshal into {where} of type time.Time")
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    elif isinstance(spec, dict):
        if not isinstance(value, dict):
            raise TypeError(f"json: cannot unmarshal {type(value).__name__} into {where}")
        for key, sub in spec.items():
            if key in value:
                _typecheck(value[key], sub, f"{where}.{key}")
    elif isinstance(spec, list):
        if not isinstance(value, list):
            raise TypeError(f"json: cannot unmarshal {type(value).__name__} into {where} (array)")
        for i, item in enumerate(value):
            _typecheck(item, spec[0], f"{where}[{i}]")
    elif spec is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"json: cannot unmarshal {type(value).__name__} into {where} (int64)")
    elif not isinstance(value, spec):
        raise TypeError(f"json: cannot unmarshal {type(value).__name__} into {where} "
                        f"({spec.__name__})")
