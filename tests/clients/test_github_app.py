"""The GitHub App token module: one exchange however many threads ask, refreshed 5 minutes
before expiry, every refusal a credentials error naming the URL and GitHub failing (a 5xx, no
answer, a rate limit) the client's own error, never a refusal — against a token endpoint on
loopback that verifies the JWT and counts exchanges."""
from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from gitscale.clients.errors import ApiError, BadAnswer, RateLimited, Unreachable
from gitscale.controller.errors import CredentialsError, PlatformOutage
from gitscale.controller.github import Credentials, GitHub, scope_of
from gitscale.config.secrets import SecretError
from gitscale.errors import GitscaleError
from gitscale.clients.github_app import NOT_REFUSED, InstallationToken

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
        self.date: float | None = None  # the time the Date header says, if not ``now``'s
        self.answer_headers: dict[str, str] = {}  # sent with every answer
        self.refused_times = 0  # JWTs refused for their iat or exp
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

            def date_time_string(self, timestamp: float | None = None) -> str:
                return super().date_time_string(fake.now() if fake.date is None else fake.date)

            def _send(self, status: int, body: bytes) -> None:
                self.send_response(status)
                for name, value in fake.answer_headers.items():
                    self.send_header(name, value)
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
                if claims.get("iss") != "4242":
                    self._send(401, b'{"message": "A JSON web token could not be decoded"}')
                    return False
                now = fake.now()  # GitHub's rules and words, on its clock (its Date header)
                refusal = ("'Issued at' claim ('iat') must be an Integer representing a time "
                           "in the past" if claims["iat"] > now else
                           "'Expiration time' claim ('exp') must be a numeric value "
                           "representing the future time at which the assertion expires"
                           if claims["exp"] <= now else
                           "'Expiration time' claim ('exp') is too far in the future"
                           if claims["exp"] > now + 600 else None)
                if refusal is not None:
                    with fake.lock:
                        fake.refused_times += 1
                    self._send(401, json.dumps({"message": refusal}).encode())
                    return False
                return True

            def do_GET(self) -> None:  # noqa: N802
                path = self.path.removeprefix("/api/v3")  # GitHub Enterprise Server's prefix
                if path != "/orgs/acme/installation":
                    return self._send(404, b'{"message": "Not Found"}')
                if not self._verified():  # (answered: a second answer would be a broken pipe)
                    return None
                with fake.lock:
                    fake.lookups += 1
                self._send(200, json.dumps({"id": fake.installation}).encode())

            def do_POST(self) -> None:  # noqa: N802
                path = self.path.removeprefix("/api/v3")
                if path != f"/app/installations/{fake.installation}/access_tokens":
                    return self._send(404, b'{"message": "Not Found"}')
                if not self._verified():
                    return None
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


def test_threads_waiting_for_a_refused_exchange_get_its_error_not_one_each(
        endpoint: TokenEndpoint) -> None:
    """A revoked key: sixteen threads asking together cost one refused exchange, each of them
    told its error; a caller after that (the next pass) tries again, and a good answer then
    serves them all."""
    endpoint.answer = (401, b'{"message": "A JSON web token could not be decoded"}')
    source = token(endpoint)
    barrier = threading.Barrier(16)
    said: list[str] = []

    def ask() -> None:
        barrier.wait()
        with pytest.raises(CredentialsError) as caught:
            source.get()
        said.append(str(caught.value))

    workers = [threading.Thread(target=ask) for _ in range(16)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert endpoint.exchanges == 1 and len(said) == 16 and len(set(said)) == 1
    assert "answered 401 (A JSON web token could not be decoded)" in said[0]
    with pytest.raises(CredentialsError):
        source.get()
    assert endpoint.exchanges == 2  # asked after the failure: tried again
    endpoint.answer = None
    assert ask_together(source) == {"ghs_3"} and endpoint.exchanges == 3


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
def test_a_refusal_is_the_callers_credentials_error(endpoint: TokenEndpoint,
                                                    error: type[GitscaleError]) -> None:
    endpoint.answer = (401, b'{"message": "Bad credentials"}')
    with pytest.raises(error) as caught:
        token(endpoint, error=error).get()
    message = str(caught.value)
    assert f"POST {endpoint.url}/app/installations/77/access_tokens answered 401 (Bad " \
        "credentials)" in message
    assert "BEGIN" not in message


@pytest.mark.parametrize("error", [CredentialsError, SecretError])
@pytest.mark.parametrize(
    ("answer", "kind", "says"),
    [
        pytest.param((200, b"<html><body>Sign in to the guest Wi-Fi</body></html>"),
                     "text/html; charset=utf-8", "answered 200 (text/html; charset=utf-8) with an "
                     "HTML page", id="captive-portal"),
        pytest.param((201, b"<html>maintenance</html>"), None,
                     "answered 201 (no Content-Type) with an HTML page", id="not-json"),
        pytest.param((200, b"{truncated"), "application/json",
                     "answered 200 (application/json) with a body that is not JSON",
                     id="invalid-json"),
        pytest.param((201, b'{"expires_at": "2030-01-01T00:00:00Z"}'), "application/json",
                     "answered 201 (application/json) with JSON without token", id="no-token"),
        pytest.param((201, b'{"token": "ghs_x"}'), "application/json",
                     "answered 201 (application/json) with JSON without expires_at",
                     id="no-expiry"),
        pytest.param((200, b'{"status": "ok"}'), "application/json",
                     "with JSON without token or expires_at", id="a-proxys-json"),
        pytest.param((201, b'["ghs_x"]'), "application/json",
                     "with JSON that is not an object (a list)", id="a-list"),
        pytest.param((201, b'{"token": 42, "expires_at": "2030-01-01T00:00:00Z"}'), None,
                     "with JSON whose token is a int", id="not-a-string"),
        pytest.param((204, b""), None, "answered 204 (no Content-Type) with an empty body",
                     id="empty"),
    ],
)
def test_an_answer_that_is_not_githubs_is_github_failing_not_refused_credentials(
        endpoint: TokenEndpoint, error: type[GitscaleError], answer: tuple[int, bytes],
        kind: str | None, says: str) -> None:
    """A 2xx whose body is a proxy's or captive portal's page, or JSON without what GitHub
    always sends: not the credentials' fault (nobody is to rotate a good key) but GitHub not
    answering properly — ``BadAnswer``, an ``ApiError`` as a 5xx is, never ``error`` — its
    message naming the URL, the status and the content type, never the body or the JWT."""
    endpoint.answer = answer
    endpoint.answer_headers = {} if kind is None else {"Content-Type": kind}
    source = token(endpoint, error=error)
    with pytest.raises(BadAnswer) as caught:
        source.get()
    message = str(caught.value)
    assert message.startswith(f"github app 4242: POST {endpoint.url}/app/installations/77/"
                              "access_tokens answered "), message
    assert says in message, message
    assert message.endswith(f": could not get an installation token ({NOT_REFUSED})"), message
    assert not isinstance(caught.value, error) and caught.value.status == answer[0]
    assert "Wi-Fi" not in message and "ghs_x" not in message and "eyJ" not in message
    endpoint.answer, endpoint.answer_headers = None, {}
    assert source.get() == "ghs_2"  # (answered properly: a token)


def test_the_installation_looked_up_with_an_answer_that_is_not_githubs_is_github_failing(
        endpoint: TokenEndpoint) -> None:
    handler = endpoint.server.RequestHandlerClass
    answer_get = handler.do_GET
    handler.do_GET = lambda self: self._send(200, b"<html>proxy login</html>")  # type: ignore
    app = token(endpoint, installation=None, owner="orgs/acme")
    try:
        with pytest.raises(BadAnswer) as caught:
            app.get()
    finally:
        handler.do_GET = answer_get  # type: ignore
    assert str(caught.value) == (
        f"github app 4242: GET {endpoint.url}/orgs/acme/installation answered 200 (no "
        "Content-Type) with an HTML page, not GitHub's answer (a proxy or captive portal before "
        f"it?): could not look up its installation on orgs/acme ({NOT_REFUSED})")
    assert app.get() == "ghs_1"


def test_threads_waiting_for_an_exchange_answered_with_a_page_get_github_failing(
        endpoint: TokenEndpoint) -> None:
    """The threads that waited for the exchange get its error made again, of its class: a
    controller's pass takes it for GitHub unavailable, not for an odd answer."""
    endpoint.answer = (200, b"<html>captive</html>")
    source = token(endpoint)
    barrier = threading.Barrier(8)
    said: list[BaseException] = []

    def ask() -> None:
        barrier.wait()
        try:
            source.get()
        except BaseException as exc:  # noqa: BLE001 - collected, checked below
            said.append(exc)

    workers = [threading.Thread(target=ask) for _ in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert endpoint.exchanges == 1 and {type(e) for e in said} == {BadAnswer}


def test_a_bad_key_is_a_credentials_error_and_no_answer_is_not(endpoint: TokenEndpoint) -> None:
    """No answer is GitHub unavailable (``Unreachable``, the platform's outage for the
    controller), never the caller's credentials error: nobody is sent to rotate a good key."""
    with pytest.raises(CredentialsError, match="the app key: cannot sign a JWT"):
        token(endpoint, key="not a key").get()
    assert endpoint.exchanges == 0
    url = endpoint.url
    endpoint.close()
    port = url.rsplit(":", 1)[1]
    with pytest.raises(Unreachable) as caught:
        token(endpoint).get()
    assert str(caught.value) == (
        f"github app 4242: POST {url}/app/installations/77/access_tokens failed: connection "
        f"refused by 127.0.0.1:{port}: could not get an installation token ({NOT_REFUSED})")
    assert caught.value.cause == f"connection refused by 127.0.0.1:{port}"
    assert not isinstance(caught.value, (CredentialsError, SecretError))


@pytest.mark.parametrize("error", [CredentialsError, SecretError])
@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_a_5xx_at_the_exchange_is_github_failing_not_the_callers_credentials_error(
        endpoint: TokenEndpoint, error: type[GitscaleError], status: int) -> None:
    """Sixteen threads asking while GitHub answers 503: one exchange, each told GitHub's
    failure (an ``ApiError`` with its status, never ``error``); once it answers, a token."""
    endpoint.answer = (status, b'{"message": "Server Error"}')
    source = token(endpoint, error=error)
    barrier = threading.Barrier(16)
    said: list[ApiError] = []

    def ask() -> None:
        barrier.wait()
        with pytest.raises(ApiError) as caught:
            source.get()
        said.append(caught.value)

    workers = [threading.Thread(target=ask) for _ in range(16)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert endpoint.exchanges == 1 and len(said) == 16
    assert {(type(e), e.status, e.method, str(e)) for e in said} == {(
        ApiError, status, "POST", f"github app 4242: POST {endpoint.url}/app/installations/77/"
        f"access_tokens answered {status}: could not get an installation token "
        f"({NOT_REFUSED})")}
    assert not [e for e in said if isinstance(e, error)]
    endpoint.answer = None
    assert source.get() == "ghs_2" and endpoint.exchanges == 2


def test_the_installation_looked_up_during_an_outage_is_github_failing(
        endpoint: TokenEndpoint) -> None:
    """The look-up (no installation id given) answered 502: not "it is not installed"; the
    next call looks it up again and gets its token."""
    handler = endpoint.server.RequestHandlerClass
    answer_get = handler.do_GET
    handler.do_GET = lambda self: self._send(502, b"<html>bad gateway</html>")  # type: ignore
    app = token(endpoint, installation=None, owner="orgs/acme")
    with pytest.raises(ApiError) as caught:
        app.get()
    assert str(caught.value) == (
        f"github app 4242: GET {endpoint.url}/orgs/acme/installation answered 502: could not "
        f"look up its installation on orgs/acme ({NOT_REFUSED})")
    assert "not installed" not in str(caught.value) and caught.value.status == 502
    handler.do_GET = answer_get  # type: ignore
    assert app.get() == "ghs_1" and (endpoint.lookups, endpoint.exchanges) == (1, 1)


def test_an_installation_looked_up_is_kept_while_github_fails(endpoint: TokenEndpoint) -> None:
    """A 503 says nothing of the installation: its id is kept (only a refusal, which a
    reinstall explains, has it looked up again)."""
    clock = Clock(endpoint)
    app = token(endpoint, installation=None, owner="orgs/acme", clock=clock)
    assert app.get() == "ghs_1"
    clock.now += 3600
    endpoint.answer = (503, b"")
    with pytest.raises(ApiError, match="answered 503"):
        app.get()
    endpoint.answer = None
    assert app.get() == "ghs_3" and endpoint.lookups == 1


def test_an_echoed_jwt_in_a_5xx_is_masked(endpoint: TokenEndpoint) -> None:
    """A proxy's 5xx page quoting the request's Authorization header."""
    handler = endpoint.server.RequestHandlerClass
    answer_post = handler.do_POST

    def echo(self: Any) -> None:
        self._send(502, f"bad gateway: {self.headers.get('Authorization')}".encode())

    handler.do_POST = echo  # type: ignore
    try:
        with pytest.raises(ApiError) as caught:
            token(endpoint).get()
    finally:
        handler.do_POST = answer_post  # type: ignore
    assert "eyJ" not in str(caught.value) and "answered 502" in str(caught.value)


def test_an_expiry_it_cannot_read_means_an_hour(endpoint: TokenEndpoint) -> None:
    endpoint.answer = (201, b'{"token": "ghs_plain", "expires_at": "soon"}')
    clock = Clock(endpoint)
    source = token(endpoint, clock=clock)
    assert source.get() == "ghs_plain"
    clock.now += 3600 - 301
    source.get()
    assert endpoint.exchanges == 1


def test_the_controllers_client_gets_github_unavailable_for_an_answer_that_is_not_githubs(
        endpoint: TokenEndpoint) -> None:
    """The controller once let a malformed answer escape as a crashed pass (a KeyError), then
    took it for refused credentials: it is GitHub not answering properly (PlatformUnavailable
    in Ready), and GitHub is given time as after a 5xx."""
    endpoint.answer = (201, b'{"expires_at": "2030-01-01T00:00:00Z"}')
    client = GitHub(scope_of(f"{endpoint.url}/acme"),
                    Credentials(app_id="4242", private_key=PEM))
    try:
        with pytest.raises(PlatformOutage, match="with JSON without token") as caught:
            client.register("r-1", ["linux"], None)
        assert not isinstance(caught.value, CredentialsError)
        assert client.outage.failures == 1
    finally:
        client.close()
    assert (endpoint.lookups, endpoint.exchanges) == (1, 1)


# -- the credential's failures, as GitHub answers them ------------------------------------------
def _pem(key: Any, fmt: Any, password: bytes | None = None) -> str:
    encryption = (serialization.NoEncryption() if password is None
                  else serialization.BestAvailableEncryption(password))
    return key.private_bytes(serialization.Encoding.PEM, fmt, encryption).decode()


PKCS1 = _pem(KEY, serialization.PrivateFormat.TraditionalOpenSSL)  # what GitHub's page downloads


@pytest.mark.parametrize("key", [
    pytest.param(PKCS1, id="pkcs1"),
    pytest.param(PEM, id="pkcs8"),
    pytest.param(PKCS1.replace("\n", "\r\n"), id="windows-line-ends"),
    pytest.param(f"  \n{PKCS1}\n\n  ", id="surrounding-whitespace"),
])
def test_the_private_key_in_any_of_its_usual_spellings_signs(endpoint: TokenEndpoint,
                                                              key: str) -> None:
    assert token(endpoint, key=key).get() == "ghs_1"


@pytest.mark.parametrize(("key", "says"), [
    pytest.param(PUBLIC.decode(), "a public key, not the private key", id="public-key"),
    pytest.param(KEY.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.PKCS1).decode(),
                 "a public key, not the private key", id="rsa-public-key"),
    pytest.param(KEY.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                               serialization.PublicFormat.OpenSSH).decode(),
                 "a public key, not the private key", id="ssh-public-key"),
    pytest.param(_pem(KEY, serialization.PrivateFormat.PKCS8, b"hunter2"),
                 "an encrypted private key", id="encrypted"),
    pytest.param(PKCS1.replace("\n", "\\n"), "its line breaks are the two characters \\n",
                 id="escaped-line-breaks"),
    pytest.param(_pem(ec.generate_private_key(ec.SECP256R1()),
                      serialization.PrivateFormat.PKCS8), "not an RSA private key", id="ec-key"),
])
def test_a_key_that_is_not_the_apps_private_key_says_what_it_is(
        endpoint: TokenEndpoint, key: str, says: str) -> None:
    """A public key pasted by mistake once escaped as an AttributeError (a crash, "please
    report"); every one of these is the caller's error naming the key, never its content,
    and nothing is sent."""
    with pytest.raises(CredentialsError) as caught:
        token(endpoint, key=key).get()
    message = str(caught.value)
    assert message.startswith("the app key: cannot sign a JWT: ") and says in message, message
    assert "BEGIN" not in message.split("(")[0] and key.strip()[40:80] not in message
    assert endpoint.exchanges == 0


def test_the_key_of_another_app_says_which_app_and_which_key(endpoint: TokenEndpoint) -> None:
    other = _pem(rsa.generate_private_key(public_exponent=65537, key_size=2048),
                 serialization.PrivateFormat.TraditionalOpenSSL)
    with pytest.raises(CredentialsError) as caught:
        token(endpoint, key=other).get()
    message = str(caught.value)
    assert "answered 401 (A JSON web token could not be decoded)" in message
    assert "the app key is not a private key of GitHub App 4242" in message
    assert "BEGIN" not in message


@pytest.mark.parametrize("off", [pytest.param(+300, id="ahead-5-min"),
                                 pytest.param(-720, id="behind-12-min")])
def test_a_host_clock_off_by_minutes_is_corrected_by_githubs_date_once(
        endpoint: TokenEndpoint, off: float) -> None:
    """GitHub refuses a JWT issued in its future or expiring more than 10 minutes ahead; the
    60 s backdating covers a clock at most 60 s fast (9 minutes slow). Beyond that the
    refusal's Date header gives GitHub's time: signed again on it, once."""
    source = token(endpoint, clock=lambda: time.time() + off)
    assert source.get() == "ghs_1"
    assert (endpoint.refused_times, endpoint.exchanges) == (1, 1)
    source.refused()  # (minted just now: kept)
    source._token = None  # a later exchange is on GitHub's clock from the start
    assert source.get() == "ghs_2" and endpoint.refused_times == 1


def test_a_jwt_refused_for_its_times_again_is_one_more_request_and_a_clear_error(
        endpoint: TokenEndpoint) -> None:
    endpoint.date = time.time() + 3600  # a Date header that is not the clock GitHub checks by
    with pytest.raises(CredentialsError) as caught:
        token(endpoint, clock=lambda: time.time() + 300).get()
    message = str(caught.value)
    assert "answered 401 ('Issued at' claim ('iat') must be an Integer" in message
    assert re.search(r"this host's clock is 3[23]\d\d s behind GitHub's Date", message), message
    assert endpoint.refused_times == 2  # the first JWT and the corrected one: no loop


def test_a_wrong_installation_id_names_where_it_was_written(endpoint: TokenEndpoint) -> None:
    source = InstallationToken(endpoint.url, "4242", lambda: PEM, installation="78",
                               error=CredentialsError, key_name="the app key",
                               installation_name="source.github.app.installationId")
    with pytest.raises(CredentialsError) as caught:
        source.get()
    assert str(caught.value).endswith(
        "installations/78/access_tokens answered 404 (Not Found): could not get an "
        "installation token (installation 78 is not an installation of GitHub App 4242: check "
        "source.github.app.installationId)")


def test_a_suspended_installation_says_so_and_how_to_lift_it(endpoint: TokenEndpoint) -> None:
    endpoint.answer = (403, b'{"message": "This installation has been suspended"}')
    with pytest.raises(CredentialsError, match=r"answered 403 \(This installation has been "
                                               r"suspended\).*Unsuspend"):
        token(endpoint).get()


def test_a_rate_limited_exchange_is_a_rate_limit_and_sends_nothing_before_it_lifts(
        endpoint: TokenEndpoint) -> None:
    """It was the caller's credentials error: the controller dropped the client as refused
    and the next pass's new client asked again, limit or not."""
    endpoint.answer = (403, b'{"message": "API rate limit exceeded for installation ID 77."}')
    endpoint.answer_headers = {"x-ratelimit-remaining": "0", "x-ratelimit-limit": "5000",
                               "x-ratelimit-reset": str(int(time.time()) + 600)}
    source = token(endpoint)
    for _ in range(3):
        with pytest.raises(RateLimited, match="github app 4242: .*rate limited until"):
            source.get()
    assert endpoint.exchanges == 1
    client = GitHub(scope_of(f"{endpoint.url}/acme"),
                    Credentials(app_id="4242", installation_id="77", private_key=PEM))
    try:
        with pytest.raises(PlatformOutage, match="rate limited until"):
            client.register("r-1", ["linux"], None)
    finally:
        client.close()


OUTAGES = [
    pytest.param("503", id="5xx"),
    pytest.param("timeout", id="no-answer"),
    pytest.param("rate-limit", id="rate-limited"),
]


def outage(endpoint: TokenEndpoint, kind: str) -> None:
    """GitHub failing the token exchange the ``kind`` way (``timed`` below answers in 0.3 s)."""
    if kind == "503":
        endpoint.answer = (503, b'{"message": "Service Unavailable"}')
    elif kind == "timeout":
        endpoint.delay = 1.0
    else:
        endpoint.answer = (403, b'{"message": "API rate limit exceeded for installation ID 77."}')
        endpoint.answer_headers = {"x-ratelimit-remaining": "0", "x-ratelimit-limit": "5000",
                                   "x-ratelimit-reset": str(int(time.time()) + 3600)}


def timed(endpoint: TokenEndpoint, clock: Clock) -> InstallationToken:
    return InstallationToken(endpoint.url, "4242", lambda: PEM, installation="77",
                             error=CredentialsError, key_name="the app key", timeout=0.3,
                             clock=clock)


@pytest.mark.parametrize("kind", OUTAGES)
def test_a_refresh_github_fails_keeps_the_valid_token_until_its_last_minute(
        endpoint: TokenEndpoint, caplog: pytest.LogCaptureFixture, kind: str) -> None:
    """The refresh starts 5 minutes before expiry; GitHub failing it (a 5xx, no answer, a rate
    limit) stopped every call though the token held served 5 more minutes. Now that token is
    used, said once; the exchange is tried again every 30 s, not by each call; in its last
    minute GitHub's failure is raised (with a warning), as with no token."""
    caplog.set_level(logging.INFO, "gitscale")
    clock = Clock(endpoint)
    clock.now = float(int(clock.now))  # (``expires_at`` is in whole seconds)
    source = timed(endpoint, clock)
    assert source.get() == "ghs_1" and endpoint.exchanges == 1
    endpoint.delay = 0.05
    outage(endpoint, kind)
    clock.now += 3600 - 299  # the refresh is due; the token is valid 299 s more
    assert ask_together(source) == {"ghs_1"}  # sixteen callers, one failed exchange
    time.sleep(1.0 if kind == "timeout" else 0)  # (timed out: counted when it is answered)
    assert endpoint.exchanges == 2
    said = [r for r in caplog.records if "token held" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO
    assert re.fullmatch(
        rf"github app 4242: (rate limited until .* \()?POST {endpoint.url}/app/installations/77/"
        r"access_tokens .*: could not get an installation token( \(GitHub unavailable; .*\))?: "
        r"the installation token held, valid 299 s more, is used meanwhile \(the exchange "
        r"tried again every 30 s\)", said[0].getMessage()), said[0].getMessage()
    assert "ghs_1" not in caplog.text
    clock.now += 29  # within 30 s: not asked again
    assert source.get() == "ghs_1" and endpoint.exchanges == 2
    for _ in range(6):  # every 30 s, while more than a minute is left (down to 90 s)
        clock.now += 30
        assert source.get() == "ghs_1"
    time.sleep(1.0 if kind == "timeout" else 0)
    assert endpoint.exchanges == (2 if kind == "rate-limit" else 8)  # (limited: none sent)
    assert len([r for r in caplog.records if "token held" in r.getMessage()]) == 1
    clock.now += 30  # 60 s left: GitHub's failure, no longer the token
    with pytest.raises(RateLimited if kind == "rate-limit" else ApiError) as caught:
        source.get()
    assert not isinstance(caught.value, CredentialsError)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "token held expires in 60 s: not used" in warned[0].getMessage()
    if kind == "rate-limit":
        return  # (the client sends nothing before the limit lifts: an hour, real time)
    time.sleep(1.0 if kind == "timeout" else 0)
    endpoint.answer, endpoint.delay = None, 0.05
    assert source.get() == "ghs_10"  # GitHub answers: a new token at once


@pytest.mark.parametrize("status", [401, 403])
def test_a_refresh_refused_raises_though_the_token_held_is_valid(
        endpoint: TokenEndpoint, status: int) -> None:
    """A refusal (the key revoked, the App suspended) is not an outage: its error is raised,
    the token held not served."""
    clock = Clock(endpoint)
    source = token(endpoint, clock=clock)
    assert source.get() == "ghs_1"
    endpoint.answer = (status, b'{"message": "Bad credentials"}')
    clock.now += 3600 - 299
    for _ in range(2):
        with pytest.raises(CredentialsError, match=f"answered {status} .Bad credentials."):
            source.get()
    assert endpoint.exchanges == 3
