"""No answer at all: the client's error names the cause and the URL (never its credentials),
for each cause that can be made on 127.0.0.1 — a closed port, a name under ``.invalid``, a
plain-HTTP server spoken to with https://, a server whose certificate is not trusted, a server
that never answers, and a proxy that is down or refuses the tunnel."""
from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gitscale.clients.errors import Unreachable
from gitscale.clients.http import HttpClient

TOKEN = "ghp_N0AnswerT0kenValue0123456789abcdef"


def failure(url: str, *, timeout: float = 5.0, retries: int = 0) -> Unreachable:
    client = HttpClient(name="api", headers=lambda: {"Authorization": f"Bearer {TOKEN}"},
                        timeout=timeout, retries=retries, sleep=lambda _: None)
    try:
        with pytest.raises(Unreachable) as caught:
            client.get(url)
    finally:
        client.close()
    assert TOKEN not in str(caught.value)
    assert caught.value.status == 0
    return caught.value


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Quiet(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


@pytest.fixture
def plain_server() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    server.daemon_threads = True
    server.handle_error = lambda *args: None  # type: ignore[method-assign]
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


@pytest.fixture
def untrusted_tls_server(tmp_path: Path) -> Iterator[int]:
    """HTTPS with a self-signed certificate for 127.0.0.1: no CA the client knows signed it."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .sign(key, hashes.SHA256()))
    (tmp_path / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    server.daemon_threads = True
    server.handle_error = lambda *args: None  # type: ignore[method-assign]
    server.socket = context.wrap_socket(server.socket, server_side=True,
                                        do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


@pytest.fixture
def silent_server() -> Iterator[int]:
    """Accepts connections and reads, never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.05)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(sock.getsockname()[1])
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    sock.close()


class _RefusingProxy(BaseHTTPRequestHandler):
    """A proxy that refuses every tunnel, as a corporate proxy does for a host it blocks."""

    def log_message(self, *args: object) -> None:
        pass

    def do_CONNECT(self) -> None:  # noqa: N802
        self.send_response(403, "Forbidden")
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def refusing_proxy() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RefusingProxy)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


@pytest.fixture
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def test_a_closed_port_is_connection_refused(no_proxy: None) -> None:
    port = closed_port()
    error = failure(f"http://127.0.0.1:{port}/orgs/acme/repos")
    assert str(error) == (f"api: GET http://127.0.0.1:{port}/orgs/acme/repos failed: "
                          f"connection refused by 127.0.0.1:{port}")
    assert error.cause == f"connection refused by 127.0.0.1:{port}"


def test_a_name_that_does_not_resolve_is_a_dns_failure(no_proxy: None) -> None:
    error = failure("https://api.gitscale-test.invalid/orgs/acme/repos")
    assert str(error).startswith("api: GET https://api.gitscale-test.invalid/orgs/acme/repos "
                                 "failed: DNS resolution failed for api.gitscale-test.invalid (")


def test_https_to_a_plain_http_server_is_a_tls_error(no_proxy: None, plain_server: int) -> None:
    url = f"https://127.0.0.1:{plain_server}/orgs/acme/repos"
    error = failure(url)
    assert str(error).startswith(f"api: GET {url} failed: TLS error from "
                                 f"127.0.0.1:{plain_server}: ")
    assert "is it a plain-HTTP server? then its URL starts with http://" in str(error)


def test_an_untrusted_certificate_is_a_certificate_error(no_proxy: None,
                                                         untrusted_tls_server: int) -> None:
    url = f"https://127.0.0.1:{untrusted_tls_server}/orgs/acme/repos"
    error = failure(url)
    assert str(error) == (f"api: GET {url} failed: TLS certificate error from 127.0.0.1: "
                          "self-signed certificate")


def test_a_server_that_never_answers_times_out(no_proxy: None, silent_server: int) -> None:
    url = f"http://127.0.0.1:{silent_server}/orgs/acme/repos"
    error = failure(url, timeout=0.3, retries=1)
    assert str(error) == (f"api: GET {url} failed: timed out: no answer within 0.3s from "
                          f"127.0.0.1:{silent_server} (after 2 tries)")


def test_a_proxy_that_is_down_is_named(monkeypatch: pytest.MonkeyPatch, no_proxy: None) -> None:
    port = closed_port()
    monkeypatch.setenv("HTTPS_PROXY", f"http://user:pr0xyPassw0rd@127.0.0.1:{port}")
    error = failure("https://api.gitscale-test.invalid/orgs/acme/repos")
    assert str(error) == ("api: GET https://api.gitscale-test.invalid/orgs/acme/repos failed: "
                          f"connection refused by the proxy 127.0.0.1:{port} "
                          "(for api.gitscale-test.invalid:443)")
    assert "pr0xyPassw0rd" not in str(error)


def test_a_proxy_that_refuses_the_tunnel_is_a_proxy_error(
        monkeypatch: pytest.MonkeyPatch, no_proxy: None, refusing_proxy: int) -> None:
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{refusing_proxy}")
    error = failure("https://api.gitscale-test.invalid/orgs/acme/repos")
    assert str(error).startswith("api: GET https://api.gitscale-test.invalid/orgs/acme/repos "
                                 f"failed: proxy error from the proxy 127.0.0.1:{refusing_proxy}: ")
    assert "403" in str(error)


@pytest.mark.parametrize("url", [
    pytest.param("http://user:S3cretPassw0rd@127.0.0.1:{port}/x", id="user-info"),
    pytest.param("http://127.0.0.1:{port}/x?access_token=S3cretPassw0rd", id="query"),
])
def test_the_url_in_the_message_carries_no_credentials(no_proxy: None, url: str) -> None:
    error = failure(url.format(port=closed_port()))
    assert "connection refused by 127.0.0.1:" in str(error)
    assert "S3cretPassw0rd" not in str(error)


def test_a_post_is_sent_once(no_proxy: None, silent_server: int) -> None:
    """A POST may have been acted on even without an answer: it is not sent again."""
    client = HttpClient(name="api", timeout=0.3, retries=2, sleep=lambda _: None)
    url = f"http://127.0.0.1:{silent_server}/actions/runners/generate-jitconfig"
    with pytest.raises(Unreachable) as caught:
        client.request("POST", url, json={"name": "r-1"})
    assert "(after" not in str(caught.value)
    assert client.stats.requests == 1
