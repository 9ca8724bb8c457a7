"""The kubeconfig: its credentials masked wherever an API server echoes them, and a file that
is not one (or a health port in use) refused at start-up with exit 1, no traceback."""
from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gitscale.controller import kube, kube_config
from gitscale.controller.errors import KubeError
from gitscale.redact import MASK, redact
from tests.helpers import wait_for

TOKEN = "KUBETOK_mm1secret"
PASSWORD = "KUBEPW_mm1secret"


class EchoingAPIServer(ThreadingHTTPServer):
    """Answers every request 401 with a Status that quotes its Authorization header, as a
    careless proxy or authenticating front does."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Echo)
        self.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.seen: list[str] = []


class _Echo(BaseHTTPRequestHandler):
    server: EchoingAPIServer

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        header = self.headers.get("Authorization", "")
        self.server.seen.append(header)
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "reason": "Unauthorized", "code": 401,
                           "message": f"Bad credentials: {header}"}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def echo() -> Iterator[EchoingAPIServer]:
    server = EchoingAPIServer()
    # (shutdown waits for the loop's next poll: 0.5 s by default, at every teardown)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def kubeconfig(path: Path, server: str, user: dict[str, Any]) -> Path:
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "k",
              "clusters": [{"name": "k", "cluster": {"server": server}}],
              "users": [{"name": "k", "user": user}],
              "contexts": [{"name": "k", "context": {"cluster": "k", "user": "k"}}]}
    path.write_text(json.dumps(config))
    return path


EXEC_PLUGIN = """\
import json, pathlib, sys
count = pathlib.Path(sys.argv[1])
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1",
                  "kind": "ExecCredential",
                  "status": {"token": f"EXECTOK_{n}_mm1secret",
                             "expirationTimestamp": "2000-01-01T00:00:00Z"}}))
"""


def exec_user(tmp_path: Path) -> dict[str, Any]:
    """An exec plugin whose token has always expired: a new one for every request."""
    script = tmp_path / "plugin.py"
    script.write_text(EXEC_PLUGIN)
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1",
                     "command": sys.executable, "args": [str(script), str(tmp_path / "n")],
                     "interactiveMode": "Never"}}


@pytest.mark.parametrize("user", [
    pytest.param(lambda tmp: {"token": TOKEN}, id="token"),
    pytest.param(lambda tmp: {"tokenFile": str(_file(tmp / "token", TOKEN))}, id="token-file"),
    pytest.param(lambda tmp: {"username": "admin", "password": PASSWORD}, id="basic-auth"),
    pytest.param(exec_user, id="exec-plugin-refreshed"),
])
def test_a_credential_the_api_server_echoes_is_masked_in_the_error(
        echo: EchoingAPIServer, tmp_path: Path, user: Any) -> None:
    api = kube.Kube(kube_config.load(str(kubeconfig(tmp_path / "K", echo.url, user(tmp_path)))),
                    timeout=5)
    try:
        for _ in range(2):  # the exec plugin's token is another one on each request
            with pytest.raises(KubeError) as caught:
                api.list_pods("ci")
            message = str(caught.value)
            assert message.startswith("list runner pods: 401 Unauthorized: Bad credentials: "), \
                message
            assert echo.seen[-1] and echo.seen[-1].split(" ", 1)[1] not in message, message
            assert MASK in message and "mm1secret" not in message, message
    finally:
        api.close()
    assert len(set(echo.seen)) == (2 if user is exec_user else 1)  # (the plugin did refresh)


def _file(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _controller(*args: str, stderr: Any = subprocess.PIPE) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    return subprocess.Popen([sys.executable, "-m", "gitscale", "controller", *args],
                            stdout=subprocess.PIPE, stderr=stderr, env=env, text=True)


def test_the_controller_log_masks_the_token_on_every_retry(
        echo: EchoingAPIServer, tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "K", echo.url, {"token": TOKEN})
    log = tmp_path / "stderr"
    with log.open("w") as sink:
        proc = _controller("--kubeconfig", str(config), "--health-port", "0", stderr=sink)
        try:
            # (a streak of failures is logged once: the retries after it are asked all the same)
            wait_for(lambda: (log.read_text().count("(retrying in ") >= 2 and len(echo.seen) >= 6)
                     or proc.poll() is not None, timeout=60)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=30)
    err = log.read_text()
    assert f"401 Unauthorized: Bad credentials: Bearer {MASK} (the API server rejected the " \
        "controller's credentials" in err, err
    assert "(retrying in " in err, err
    assert TOKEN not in err and "Traceback" not in err, err
    assert f"Bearer {TOKEN}" in echo.seen  # (it was sent, and echoed)


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param(b"{{{{\n", "K:2: not a kubeconfig: not valid YAML", id="not-yaml"),
    pytest.param(b"- a\n- b\n", "K: not a kubeconfig of the expected shape", id="a-list"),
    pytest.param(b"7\n", "K: not a kubeconfig of the expected shape", id="a-number"),
    pytest.param(b"\xff\xfe", "K: not a kubeconfig of the expected shape", id="not-utf8"),
])
def test_a_file_that_is_not_a_kubeconfig_is_refused(tmp_path: Path, text: bytes,
                                                     expected: str) -> None:
    (tmp_path / "K").write_bytes(text)
    proc = subprocess.run([sys.executable, "-m", "gitscale", "controller", "--kubeconfig", "K",
                           "--health-port", "0"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, env={k: v for k, v in os.environ.items()
                                           if k != "KUBERNETES_SERVICE_HOST"})
    assert proc.returncode == 1, proc.stderr
    assert expected in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["K"]  # nothing written


def test_a_health_port_in_use_is_refused_as_serve_refuses_its_listen_address(
        echo: EchoingAPIServer, tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "K", echo.url, {"token": TOKEN})
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # noqa: S104 - where the health server binds
        taken.listen()
        port = taken.getsockname()[1]
        proc = _controller("--kubeconfig", str(config), "--health-port", str(port))
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert f"--health-port: cannot listen on 0.0.0.0:{port}: " in err, err
    assert "in use" in err and "Traceback" not in err, err
    assert echo.seen == []  # it stopped before it listed anything


def test_the_client_key_is_held_for_masking(tmp_path: Path) -> None:
    key = ("-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7mm1secret\n"
           "-----END PRIVATE KEY-----\n")
    cert = "-----BEGIN CERTIFICATE-----\nMIIBnotasecret\n-----END CERTIFICATE-----\n"
    config = kubeconfig(tmp_path / "K", "https://127.0.0.1:1", {
        "client-key-data": base64.b64encode(key.encode()).decode(),
        "client-certificate-data": base64.b64encode(cert.encode()).decode()})
    kube_config.load(str(config)).close()
    line = key.splitlines()[1]
    assert redact(f"TLS: bad key {line}") == f"TLS: bad key {MASK}"
    assert redact(f"the key:\n{key}").count(line) == 0
