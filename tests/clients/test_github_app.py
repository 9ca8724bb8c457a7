"""The GitHub App token module: one exchange however many threads ask, refreshed 5 minutes
before expiry, and every failure a credentials error naming the URL — against a token endpoint
on loopback that verifies the JWT and counts exchanges."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from gitscale.controller.errors import CredentialsError
from gitscale.controller.github import Credentials, GitHub, scope_of
from gitscale.config.secrets import SecretError
from gitscale.errors import GitscaleError
from gitscale.clients.github_app import InstallationToken

KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
PEM = KEY.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                        serialization.NoEncryption()).decode()
PUBLIC = KEY.public_key().public_bytes(serialization.Encoding.PEM,
                                       serialization.PublicFormat.SubjectPublicKeyInfo)


class TokenEndpoint:
    """POST /app/installations/77/access_tokens and GET /orgs/acme/installation, slow enough
    (``delay``) that threads asking together overlap."""

    def __init__(self) -> None:
        self.exchanges = 0
        self.lookups = 0
        self.installation = 77  # the App's installation on acme (another after a reinstall)
        self.delay = 0.05
        self.answer: tuple[int, bytes] | None = None  # instead of a token
        self.expires_in = 3600.0
        self.now = time.time  # the clock the JWT is checked against (the test's own)
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                pass

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _verified(self) -> bool:
                assertion = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                try:
                    claims = jwt.decode(assertion, PUBLIC, algorithms=["RS256"],
                                        options={"verify_exp": False, "verify_iat": False})
                except jwt.PyJWTError:
                    claims = {}
                if not (claims.get("iss") == "4242" and claims["exp"] - claims["iat"] <= 660
                        and claims["iat"] <= fake.now() < claims["exp"]):
                    self._send(401, b'{"message": "A JSON web token could not be decoded"}')
                    return False
                return True

            def do_GET(self) -> None:  # noqa: N802
                path = self.path.removeprefix("/api/v3")  # GitHub Enterprise Server's prefix
                if path != "/orgs/acme/installation" or not self._verified():
                    return self._send(404, b'{"message": "Not Found"}')
                with fake.lock:
                    fake.lookups += 1
                self._send(200, json.dumps({"id": fake.installation}).encode())

            def do_POST(self) -> None:  # noqa: N802
                path = self.path.removeprefix("/api/v3")
                if path != f"/app/installations/{fake.installation}/access_tokens" \
                        or not self._verified():
                    return self._send(404, b'{"message": "Not Found"}')
                time.sleep(fake.delay)
                with fake.lock:
                    fake.exchanges += 1
                    n = fake.exchanges
                if fake.answer is not None:
                    return self._send(*fake.answer)
                expires = datetime.fromtimestamp(fake.now() + fake.expires_in, timezone.utc)
                self._send(201, json.dumps({"token": f"ghs_{n}", "expires_at": expires.strftime(
                    "%Y-%m-%dT%H:%M:%SZ")}).encode())

        return Handler

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint() -> Iterator[TokenEndpoint]:
    fake = TokenEndpoint()
    yield fake
    fake.close()


class Clock:
    def __init__(self, endpoint: TokenEndpoint) -> None:
        self.now = time.time()
        endpoint.now = self

    def __call__(self) -> float:
        return self.now


def token(endpoint: TokenEndpoint, *, error: type[GitscaleError] = CredentialsError,
          key: str = PEM, clock: Clock | None = None, installation: str | None = "77",
          owner: str | None = None) -> InstallationToken:
    return InstallationToken(endpoint.url, "4242", lambda: key, installation=installation,
                             owner=owner, error=error, key_name="the app key",
                             clock=clock or time.time)


def ask_together(source: InstallationToken, threads: int = 16) -> set[str]:
    barrier = threading.Barrier(threads)
    got: list[str] = []

    def ask() -> None:
        barrier.wait()
        got.append(source.get())

    workers = [threading.Thread(target=ask) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(got) == threads
    return set(got)


def test_sixteen_threads_make_one_exchange_and_again_at_expiry(endpoint: TokenEndpoint) -> None:
    clock = Clock(endpoint)
    source = token(endpoint, clock=clock)
    assert ask_together(source) == {"ghs_1"}
    assert endpoint.exchanges == 1
    clock.now += 3600 - 301  # still more than 5 minutes left: reused
    assert ask_together(source) == {"ghs_1"} and endpoint.exchanges == 1
    clock.now += 2  # 5 minutes before expiry: one new exchange for all sixteen
    assert ask_together(source) == {"ghs_2"}
    assert endpoint.exchanges == 2


def test_the_installation_is_looked_up_once(endpoint: TokenEndpoint) -> None:
    clock = Clock(endpoint)
    source = token(endpoint, installation=None, owner="orgs/acme", clock=clock)
    assert source.get() == "ghs_1"
    clock.now += 3600
    assert source.get() == "ghs_2"
    assert (endpoint.lookups, endpoint.exchanges) == (1, 2)


def test_an_installation_looked_up_is_looked_up_again_when_it_is_gone(
        endpoint: TokenEndpoint) -> None:
    """The App installed again (a new installation id): a long-running serve or run asked the
    old id until restarted. The exchange refused, the id it looked up is forgotten, and the
    next exchange looks it up again; an id given in the config is never replaced."""
    clock = Clock(endpoint)
    app = token(endpoint, installation=None, owner="orgs/acme", clock=clock)
    assert app.get() == "ghs_1" and endpoint.lookups == 1
    endpoint.installation = 78
    clock.now += 3600  # the token expired: a new exchange, with the id looked up before
    with pytest.raises(CredentialsError, match="installations/77/access_tokens answered 404"):
        app.get()
    assert app.get() == "ghs_2" and endpoint.lookups == 2
    given = token(endpoint, installation="77", owner="orgs/acme", clock=clock)
    for _ in range(2):
        with pytest.raises(CredentialsError, match="installations/77/"):
            given.get()
    assert endpoint.lookups == 2


@pytest.mark.parametrize("error", [CredentialsError, SecretError])
@pytest.mark.parametrize(
    ("answer", "says"),
    [
        pytest.param((201, b"<html>maintenance</html>"), "answered 201 with no token",
                     id="not-json"),
        pytest.param((201, b'{"expires_at": "2030-01-01T00:00:00Z"}'),
                     "answered 201 with no token", id="no-token"),
        pytest.param((201, b'["ghs_x"]'), "answered 201 with no token", id="a-list"),
        pytest.param((201, b'{"token": 42}'), "answered 201 with no token", id="not-a-string"),
        pytest.param((401, b'{"message": "Bad credentials"}'), "answered 401 (Bad credentials)",
                     id="refused"),
    ],
)
def test_a_bad_answer_is_the_callers_credentials_error(
        endpoint: TokenEndpoint, error: type[GitscaleError], answer: tuple[int, bytes],
        says: str) -> None:
    endpoint.answer = answer
    with pytest.raises(error) as caught:
        token(endpoint, error=error).get()
    message = str(caught.value)
    assert f"POST {endpoint.url}/app/installations/77/access_tokens {says}" in message
    assert "BEGIN" not in message


def test_no_answer_and_a_bad_key_are_credentials_errors(endpoint: TokenEndpoint) -> None:
    with pytest.raises(CredentialsError, match="the app key: cannot sign a JWT"):
        token(endpoint, key="not a key").get()
    assert endpoint.exchanges == 0
    url = endpoint.url
    endpoint.close()
    port = url.rsplit(":", 1)[1]
    with pytest.raises(CredentialsError, match=f"POST {url}/app/.* failed: connection refused "
                                               f"by 127.0.0.1:{port}$"):
        token(endpoint).get()


def test_an_expiry_it_cannot_read_means_an_hour(endpoint: TokenEndpoint) -> None:
    endpoint.answer = (201, b'{"token": "ghs_plain", "expires_at": "soon"}')
    clock = Clock(endpoint)
    source = token(endpoint, clock=clock)
    assert source.get() == "ghs_plain"
    clock.now += 3600 - 301
    source.get()
    assert endpoint.exchanges == 1


def test_the_controllers_client_gets_a_credentials_error_for_a_bad_answer(
        endpoint: TokenEndpoint) -> None:
    """The controller once let a malformed answer escape as a crashed pass (a KeyError)."""
    endpoint.answer = (201, b'{"expires_at": "2030-01-01T00:00:00Z"}')
    client = GitHub(scope_of(f"{endpoint.url}/acme"),
                    Credentials(app_id="4242", private_key=PEM))
    try:
        with pytest.raises(CredentialsError, match="with no token in its body"):
            client.register("r-1", ["linux"], None)
    finally:
        client.close()
    assert (endpoint.lookups, endpoint.exchanges) == (1, 1)
