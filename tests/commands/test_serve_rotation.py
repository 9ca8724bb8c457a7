"""`serve --secret-file` through a rotation: the file rewritten while serve runs, deliveries
signed with the old and the new secret over real HTTP; and the grace of the old one."""
from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import os
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from gitscale.commands import RepoOptions
from gitscale.commands.serve import run_serve
from gitscale.webhooks.delivery import Rejected
from gitscale.webhooks.secret import GRACE, WebhookSecret
from tests.commands.test_serve import CONFIG, job
from tests.helpers import RUNNERSET, make_repo

OLD = "old-webhook-secret-0123456789"
NEW = "new-webhook-secret-9876543210"
LINUX = ["self-hosted", "linux"]


def signed(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def post(port: int, body: bytes, signature: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", "/webhook", body=body, headers={
        "Content-Type": "application/json", "X-GitHub-Event": "workflow_job",
        "X-GitHub-Delivery": str(uuid.uuid4()), "X-Hub-Signature-256": signature})
    response = conn.getresponse()
    json.loads(response.read() or b"{}")
    conn.close()
    return response.status


def test_serve_takes_the_new_secret_and_the_old_for_a_while(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GH_TOKEN", "ghp_unused0123456789")
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": CONFIG,
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "sets/gpu.yaml": RUNNERSET.format(name="gpu", replicas=0)})
    secret_file = tmp_path / "webhook-secret"
    secret_file.write_text(OLD + "\n")
    stop, ready = threading.Event(), threading.Event()
    ports: list[int] = []
    result: list[Any] = []

    def serve() -> None:
        try:
            result.append(run_serve(
                RepoOptions(str(checkout), None, "gitscale.yaml"), listen="127.0.0.1:0",
                path="/webhook", window="1s", reservation="10m", secret_env="UNUSED",
                secret_file=str(secret_file), state_file=".gitscale/reservations.yaml",
                resync="0", stop=stop, ready=lambda port: (ports.append(port), ready.set())))
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            result.append(exc)
            ready.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        assert ready.wait(20) and ports, result
        port = ports[0]
        body = job(101, "queued", LINUX)
        assert post(port, body, signed(OLD, body)) == 202
        body = job(102, "queued", LINUX)
        assert post(port, body, signed(NEW, body)) == 401  # not yet in the file
        # rotated: GitHub signs with the new secret, the file holds it (a new file put there)
        (tmp_path / "next").write_text(NEW + "\n")
        os.replace(tmp_path / "next", secret_file)
        for number, secret in ((103, NEW), (104, OLD), (105, NEW)):
            body = job(number, "queued", LINUX)
            assert post(port, body, signed(secret, body)) == 202, secret
        body = job(106, "queued", LINUX)
        assert post(port, body, signed("neither-of-them-0123", body)) == 401
    finally:
        stop.set()
        thread.join(30)
    assert result == [0], result
    err = capsys.readouterr().err
    assert err.count(f"webhook secret: {secret_file} changed") == 1
    assert "previous one are accepted for 10 more minutes" in err
    assert OLD not in err and NEW not in err


def test_the_old_secret_is_refused_once_the_grace_is_over(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text(OLD)
    now = [0.0]
    said: list[str] = []
    secret = WebhookSecret({"file": str(path)}, report=said.append, clock=lambda: now[0])
    secret.check()
    body = b'{"action": "queued"}'
    secret.verify(body, signed(OLD, body))
    path.write_text(NEW + "\n")  # (another size: seen by the stat)
    now[0] = 5.0
    secret.verify(body, signed(NEW, body))
    now[0] = 5.0 + GRACE - 1
    secret.verify(body, signed(OLD, body))  # GitHub not yet told: still taken
    now[0] = 5.0 + GRACE
    with pytest.raises(Rejected, match="bad signature"):
        secret.verify(body, signed(OLD, body))
    secret.verify(body, signed(NEW, body))
    assert len(said) == 1 and OLD not in said[0] and NEW not in said[0]


def test_a_rotation_the_stat_misses_is_found_by_a_bad_signature(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text(OLD)
    before = path.stat()
    now = [0.0]
    secret = WebhookSecret({"file": str(path)}, clock=lambda: now[0])
    secret.check()
    path.write_text(NEW)  # the same size; its time put back: the stat cannot tell
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    body = b"{}"
    now[0] = 10.0
    secret.verify(body, signed(NEW, body))  # refused by OLD, the file read again: NEW
    secret.verify(body, signed(OLD, body))  # and the old one within its grace


def test_a_file_gone_for_a_moment_keeps_the_secret_read_before(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text(OLD)
    said: list[str] = []
    secret = WebhookSecret({"file": str(path)}, report=said.append)
    secret.check()
    path.unlink()
    body = b"{}"
    secret.verify(body, signed(OLD, body))
    secret.verify(body, signed(OLD, body))
    assert len(said) == 1 and str(path) in said[0] and "read before" in said[0]
    assert OLD not in said[0]


def test_a_refused_delivery_is_freed_with_its_body_not_left_to_the_garbage_collector(
        tmp_path: Path) -> None:
    """A delivery refused for its signature (through serve's handler, with the old secret
    in its grace: two secrets tried) holds no reference to its body once answered. A
    reference cycle (the exception kept in a local of the frame its traceback holds) left
    each body to the garbage collector: a flood of 24 MB deliveries with bad signatures took
    serve past 1 GB, twice its Deployment's memory limit."""
    from gitscale.http_server import Request
    from gitscale.timeutil import utcnow
    from gitscale.webhooks.batcher import Batcher
    from gitscale.webhooks.delivery import Deliveries
    from gitscale.webhooks.endpoints import make_handler

    path = tmp_path / "secret"
    path.write_text(OLD)
    now = [0.0]
    secret = WebhookSecret({"file": str(path)}, clock=lambda: now[0])
    secret.check()
    path.write_text(NEW + "\n")
    now[0] = 5.0
    batcher = Batcher()
    handler = make_handler(secret, batcher, Deliveries(), "/webhook", utcnow)
    body = job(7, "queued", LINUX) + b" " * 100_000
    held = sys.getrefcount(body)
    for signature in ("sha256=" + "0" * 64, signed("another", body), None):
        headers = {"x-github-event": "workflow_job", "x-github-delivery": str(uuid.uuid4())}
        if signature is not None:
            headers["x-hub-signature-256"] = signature
        answer = handler(Request("POST", "/webhook", headers, body))
        assert answer.status == 401
        assert sys.getrefcount(body) == held  # nothing keeps it: freed with the request
    assert batcher.pending == []


def test_the_default_variable_read_through_its_file_variable_rotates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--secret-env GITHUB_WEBHOOK_SECRET`` (the default) with only
    ``GITHUB_WEBHOOK_SECRET_FILE`` set: the file's secret, read again as it changes, the old
    one kept its grace — as ``--secret-file``."""
    monkeypatch.delenv("GITHUB_WEBHOOK_SECRET", raising=False)
    path = tmp_path / "secret"
    path.write_text(OLD)
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET_FILE", str(path))
    said: list[str] = []
    secret = WebhookSecret({"env": "GITHUB_WEBHOOK_SECRET"}, report=said.append,
                           clock=lambda: 1.0)
    secret.check()
    body = b'{"action": "queued"}'
    secret.verify(body, signed(OLD, body))
    path.write_text(NEW + "\n")
    secret.verify(body, signed(NEW, body))
    secret.verify(body, signed(OLD, body))  # within its grace
    assert len(said) == 1 and said[0].startswith(f"webhook secret: {path} changed")


def test_serve_refuses_to_start_with_both_the_variable_and_its_file_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from tests.helpers import run

    checkout = make_repo(tmp_path, {"gitscale.yaml": CONFIG,
                                    "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
                                    "sets/gpu.yaml": RUNNERSET.format(name="gpu", replicas=0)})
    (tmp_path / "secret").write_text(OLD)
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", NEW)
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET_FILE", str(tmp_path / "secret"))
    code, out, err = run(capsys, "serve", "--repo", str(checkout), "--listen", "127.0.0.1:0")
    assert code == 1 and out == ""
    assert err.startswith("error: webhook secret: GITHUB_WEBHOOK_SECRET_FILE: "
                          "GITHUB_WEBHOOK_SECRET is set too: set one of the two"), err
    assert OLD not in err and NEW not in err
