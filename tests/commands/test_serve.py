"""`gitscale serve` end to end: real HTTP deliveries, real commits on a bare remote."""
from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import re
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from gitscale.commands import RepoOptions
from gitscale.commands.serve import run_serve
from tests.helpers import REFERENCE, RUNNERSET, git, make_repo

SECRET = "s3cret-webhook-key"
PAYLOADS = REFERENCE / "payloads"
CONFIG = """\
runnerSets:
  - name: linux
    manifest: sets/linux.yaml
    source: {github: {org: octo-org, labels: [self-hosted, linux], token: {env: GH_TOKEN}}}
    policy: {minReplicas: 0, maxReplicas: 150, scaleDownDelay: 0s}
  - name: gpu
    manifest: sets/gpu.yaml
    source: {github: {org: octo-org, labels: [self-hosted, gpu], token: {env: GH_TOKEN}}}
    policy: {minReplicas: 0, maxReplicas: 2}
"""


class Server:
    def __init__(self, checkout: Path, window: str = "2s", resync: str = "0",
                 config: str = "gitscale.yaml",
                 state_file: str = ".gitscale/reservations.yaml", reservation: str = "10m",
                 **extra: Any) -> None:
        self.stop = threading.Event()
        self.port: int | None = None
        self.ready = threading.Event()
        self.result: list[Any] = []

        def ready(port: int) -> None:
            self.port = port
            self.ready.set()

        def target() -> None:
            try:
                self.result.append(run_serve(
                    RepoOptions(str(checkout), None, config), listen="127.0.0.1:0",
                    path="/webhook", window=window, reservation=reservation,
                    secret_env="TEST_WEBHOOK_SECRET", secret_file=None,
                    state_file=state_file, resync=resync, stop=self.stop,
                    ready=ready, **extra))
            except BaseException as exc:  # noqa: BLE001 - surfaced by the test
                self.result.append(exc)
                self.ready.set()

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()
        assert self.ready.wait(20), "server did not start"
        assert self.port, self.result

    def post(self, body: bytes, *, signature: str | None = "good", event: str = "workflow_job",
             delivery: str | None = None, conn: http.client.HTTPConnection | None = None,
             content_type: str = "application/json") -> tuple[int, dict[str, Any]]:
        headers = {"Content-Type": content_type, "X-GitHub-Event": event,
                   "X-GitHub-Delivery": delivery or str(uuid.uuid4())}
        if signature == "good":
            digest = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
            headers["X-Hub-Signature-256"] = f"sha256={digest}"
        elif signature is not None:
            headers["X-Hub-Signature-256"] = signature
        own = conn is None
        conn = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.request("POST", "/webhook", body=body, headers=headers)
        response = conn.getresponse()
        data = json.loads(response.read() or b"{}")
        if own:
            conn.close()
        return response.status, data

    def health(self) -> dict[str, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        conn.request("GET", "/healthz")
        return json.loads(conn.getresponse().read())  # type: ignore[no-any-return]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()
        assert self.result == [0], self.result


def job(job_id: int, action: str, labels: list[str], repo: str = "octo-org/octo-repo") -> bytes:
    base = json.loads((PAYLOADS / "queued.payload.json").read_text())
    base["action"] = action
    base["workflow_job"]["id"] = job_id
    base["workflow_job"]["status"] = action
    base["workflow_job"]["labels"] = labels
    base["repository"]["full_name"] = repo
    base["repository"]["owner"]["login"] = repo.split("/")[0]
    return json.dumps(base).encode()


@pytest.fixture()
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    yield make_repo(tmp_path, {
        "gitscale.yaml": CONFIG,
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "sets/gpu.yaml": RUNNERSET.format(name="gpu", replicas=0),
    })


def remote_state(checkout: Path) -> tuple[int, dict[str, Any]]:
    remote = checkout.parent / "remote.git"
    commits = int(git(remote, "rev-list", "--count", "main"))
    spec = yaml.safe_load(git(remote, "show", "main:sets/linux.yaml"))["spec"]
    return commits, spec


def wait_for_commit(server: Server, checkout: Path, commits: int, timeout: float = 30) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if remote_state(checkout)[0] > commits and server.health()["pending_events"] == 0:
            return
        time.sleep(0.2)
    raise AssertionError(f"no commit; health {server.health()}")


def test_hundred_events_in_one_window_make_one_commit(repo: Path) -> None:
    server = Server(repo, window="4s")
    try:
        before, _ = remote_state(repo)
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        for job_id in range(1, 101):
            status, _ = server.post(job(job_id, "queued", ["self-hosted", "linux"]), conn=conn)
            assert status == 202
        conn.close()
        wait_for_commit(server, repo, before)
        commits, spec = remote_state(repo)
        assert commits == before + 1
        assert spec["replicas"] == 100
        remote = repo.parent / "remote.git"
        message = git(remote, "log", "-1", "--format=%B", "main")
        assert message.startswith("gitscale: linux 0→100")
        assert "Gitscale-Events: queued=100" in message
        book = yaml.safe_load(git(remote, "show", "main:.gitscale/reservations.yaml"))
        assert len(book["sets"]["linux"]["reservations"]) == 100
    finally:
        server.close()


def test_signatures_replays_and_order(repo: Path) -> None:
    server = Server(repo, window="1s")
    try:
        before, _ = remote_state(repo)
        body = job(7, "queued", ["self-hosted", "linux"])
        assert server.post(body, signature=None)[0] == 401
        assert server.post(body, signature="sha256=" + "0" * 64)[0] == 401
        assert server.post(body, signature="sha1=abc")[0] == 401
        assert server.post(b"{not json", signature="good")[0] == 400
        assert server.post(body, event="ping")[0] == 200
        assert server.health()["pending_events"] == 0  # nothing accepted so far
        odd = json.loads(job(12, "queued", ["ubuntu-latest"]))  # matches no set
        odd["organization"] = "octo-org"  # not an object: was a traceback and no answer
        assert server.post(json.dumps(odd).encode())[0] == 202
        # a completed whose queued was missed never drives reservations below zero
        assert server.post(job(99, "completed", ["self-hosted", "linux"]))[0] == 202
        # out of order: in_progress before its queued
        assert server.post(job(5, "in_progress", ["self-hosted", "linux"]))[0] == 202
        assert server.post(job(5, "queued", ["self-hosted", "linux"]))[0] == 202
        # the same delivery twice counts once, even with another job in it
        assert server.post(job(6, "queued", ["self-hosted", "linux"]), delivery="d-1")[0] == 202
        status, reply = server.post(job(8, "queued", ["self-hosted", "linux"]), delivery="d-1")
        assert status == 200 and "duplicate" in reply["ignored"]
        # GitHub-hosted jobs and other orgs match no set
        server.post(job(10, "queued", ["ubuntu-latest"]))
        server.post(job(11, "queued", ["self-hosted", "linux"], repo="other-org/x"))
        # the late queued of the completed job is ignored
        server.post(job(99, "queued", ["self-hosted", "linux"]))
        wait_for_commit(server, repo, before)
        _, spec = remote_state(repo)
        assert spec["replicas"] == 2  # jobs 5 (running) and 6 (queued)
        book = yaml.safe_load(git(repo.parent / "remote.git", "show",
                                  "main:.gitscale/reservations.yaml"))
        jobs = {r["job"]: r["running"] for r in book["sets"]["linux"]["reservations"]}
        assert jobs == {5: True, 6: False}
    finally:
        server.close()


def test_a_webhook_of_githubs_form_content_type_is_read(repo: Path) -> None:
    """GitHub's `form` content type (the default of a webhook made in its settings or API):
    the JSON payload is the body's `payload` field, signed as the raw form. It was a 400 `the
    body is not JSON` for every delivery, which said nothing of the webhook's setting."""
    from urllib.parse import quote_plus

    server = Server(repo, window="1s")
    try:
        before, _ = remote_state(repo)
        form = "application/x-www-form-urlencoded"
        payload = job(7, "queued", ["self-hosted", "linux"])
        body = b"payload=" + quote_plus(payload.decode()).encode()
        assert server.post(body, content_type=form) == (202, {"accepted": True})
        # signed over the raw form: the payload's own signature is not GitHub's
        assert server.post(body, content_type=form, signature="sha256=" + hmac.new(
            SECRET.encode(), payload, hashlib.sha256).hexdigest())[0] == 401
        status, reply = server.post(b"other=1", content_type=form)
        assert status == 400 and "without a `payload` field" in reply["error"]
        status, reply = server.post(b"payload=%7B&&x", content_type=form)
        assert status == 400 and "not a form" in reply["error"], reply
        assert server.post(b"payload=" + quote_plus(job(8, "queued", ["self-hosted", "linux"])
                           .decode()).encode(), content_type=f"{form}; charset=utf-8")[0] == 202
        # JSON sent with the form type (curl -d's default, the README's walkthrough): JSON
        assert server.post(job(9, "queued", ["self-hosted", "linux"]),
                           content_type=form) == (202, {"accepted": True})
        wait_for_commit(server, repo, before)
        _, spec = remote_state(repo)
        assert spec["replicas"] == 3
    finally:
        server.close()


def test_reservations_survive_a_restart(repo: Path) -> None:
    server = Server(repo, window="1s")
    try:
        before, _ = remote_state(repo)
        for job_id in (1, 2, 3):
            server.post(job(job_id, "queued", ["self-hosted", "linux"]))
        wait_for_commit(server, repo, before)
    finally:
        server.close()
    git(repo, "pull", "-q")
    server = Server(repo, window="1s")
    try:
        before, spec = remote_state(repo)
        assert spec["replicas"] == 3
        server.post(job(2, "completed", ["self-hosted", "linux"]))
        wait_for_commit(server, repo, before)
        _, spec = remote_state(repo)
        assert spec["replicas"] == 2
    finally:
        server.close()


def test_starved_reservations_are_capped_by_max(repo: Path) -> None:
    server = Server(repo, window="1s")
    try:
        before, _ = remote_state(repo)
        for job_id in range(20, 25):
            server.post(job(job_id, "queued", ["self-hosted", "gpu"]))
        wait_for_commit(server, repo, before)
        gpu = yaml.safe_load(git(repo.parent / "remote.git", "show", "main:sets/gpu.yaml"))
        assert gpu["spec"]["replicas"] == 2  # max 2; the other 3 reservations wait
        book = yaml.safe_load(git(repo.parent / "remote.git", "show",
                                  "main:.gitscale/reservations.yaml"))
        assert len(book["sets"]["gpu"]["reservations"]) == 5
    finally:
        server.close()


HINT = ("(the secret GitHub signs workflow_job deliveries with: --secret-env names its "
        "variable, --secret-file its file)")


@pytest.mark.parametrize(("args", "said"), [
    pytest.param([], "webhook secret: environment variable GITHUB_WEBHOOK_SECRET is not set",
                 id="default-env"),
    pytest.param(["--secret-env", "MY_HOOK_SECRET"],
                 "webhook secret: environment variable MY_HOOK_SECRET is not set", id="env"),
    pytest.param(["--secret-file", "/nonexistent/hook-secret"],
                 "webhook secret: cannot read /nonexistent/hook-secret: No such file or directory",
                 id="file"),
])
def test_missing_secret_refuses_to_start(repo: Path, monkeypatch: pytest.MonkeyPatch, capsys,  # type: ignore[no-untyped-def]
                                         args: list[str], said: str) -> None:
    """The message names the secret once ("webhook secret: webhook secret: …" was shown)."""
    from tests.helpers import run

    monkeypatch.delenv("GITHUB_WEBHOOK_SECRET", raising=False)
    monkeypatch.delenv("MY_HOOK_SECRET", raising=False)
    code, out, err = run(capsys, "serve", "--repo", str(repo), "--listen", "127.0.0.1:0", *args)
    assert (code, out, err) == (1, "", f"error: {said} {HINT}\n")


@pytest.mark.parametrize(("name", "said"), [
    pytest.param("ghp_abcdefabcdef", "a token, not the name of the environment variable that "
                 "holds it (the value is not shown)", id="github-token"),
    pytest.param("bkua_0123456789abcdef", "a token, not the name of the environment variable "
                 "that holds it (the value is not shown)", id="buildkite-token"),
    pytest.param("9f86d081884c7d65-webhook", "not the name of an environment variable: letters, "
                 "digits and _ (the value is not shown)", id="not-a-name"),
])
def test_a_secret_pasted_into_secret_env_is_refused_unshown(  # type: ignore[no-untyped-def]
        repo: Path, capsys, name: str, said: str) -> None:
    """It was "environment variable ghp_… is not set": the pasted token in the error."""
    from tests.helpers import run

    for more in ([], ["--secret-file", "/nonexistent/hook-secret"]):
        code, out, err = run(capsys, "serve", "--repo", str(repo), "--listen", "127.0.0.1:0",
                             "--secret-env", name, *more)
        assert (code, out, err) == (1, "", f"error: --secret-env: {said}\n")


def test_secret_env_and_secret_file_together_are_refused(  # type: ignore[no-untyped-def]
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Both given: which secret is meant cannot be guessed (the file silently won). The default
    variable merely set beside --secret-file is not a choice made twice: the file is read."""
    from tests.helpers import run

    secret = tmp_path / "hook-secret"
    secret.write_text("from-the-file\n")
    monkeypatch.setenv("MY_HOOK_SECRET", "from-the-variable")
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "from-the-default")
    for name in ("MY_HOOK_SECRET", "GITHUB_WEBHOOK_SECRET"):  # the default, written out
        code, out, err = run(capsys, "serve", "--repo", str(repo), "--listen", "127.0.0.1:0",
                             "--secret-env", name, "--secret-file", str(secret))
        assert (code, out, err) == (
            1, "", "error: --secret-file: give --secret-env or --secret-file, not both\n")
    # past the secret (read from the file): the next check (--listen's) is what stops it
    code, out, err = run(capsys, "serve", "--repo", str(repo), "--listen", "nowhere",
                         "--secret-file", str(secret))
    assert code == 1 and err.startswith("error: --listen: "), err
    assert "secret" not in err


def test_rejected_deliveries_are_logged_once_per_reason_without_body_or_secret(
        repo: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A secret mismatch shows in the log (it showed only in the metrics); a flood of them is
    one line and a count, not a line each."""
    body = job(7, "queued", ["self-hosted", "body-marker"])
    server = Server(repo, window="1s")
    try:
        assert server.post(body, signature="sha256=" + "ab" * 32, delivery="bad-0")[0] == 401
        for i in range(1, 41):
            assert server.post(body, signature="sha256=" + "cd" * 32,
                               delivery=f"bad-{i}")[0] == 401
        assert server.post(body, signature=None, delivery="unsigned-1")[0] == 401
        assert server.post(b'{"action": "body-marker"}', delivery="garbled-1")[0] == 400
        # (a signed job no set takes is logged with its labels: not this rejected body's)
        assert server.post(job(8, "queued", ["self-hosted", "linux"]), delivery="fine-1")[0] == 202
    finally:
        server.close()
    err = capfd.readouterr().err
    lines = [line.split(" ", 1)[1] for line in err.splitlines() if "rejected" in line]
    assert lines[:3] == [
        "rejected webhook delivery bad-0: 401 bad signature",
        "rejected webhook delivery unsigned-1: 401 missing X-Hub-Signature-256",
        "rejected webhook delivery garbled-1: 400 not a workflow_job payload "
        "(workflow_job is missing)",
    ], lines
    # the other 40 are told when the server stops (or, while it runs, once a minute has passed)
    assert len(lines) == 4 and re.fullmatch(
        r"rejected 40 more webhook deliveries: 401 bad signature \(since \d+ s ago\)",
        lines[3]), lines
    assert "fine-1" not in err
    for leak in (SECRET, "body-marker", "abab", "cdcd", "sha256="):
        assert leak not in err


def test_a_signed_payload_nested_too_deep_is_a_400_and_one_log_line(
        repo: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """It was a RecursionError: a 500 and a traceback in the log."""
    server = Server(repo, window="1s")
    try:
        status, answer = server.post(b"[" * 100_000 + b"]" * 100_000, delivery="deep-1")
        assert status == 400, answer
        assert server.post(job(1, "queued", ["self-hosted", "linux"]))[0] == 202  # still up
    finally:
        server.close()
    err = capfd.readouterr().err
    assert [line.split(" ", 1)[1] for line in err.splitlines() if "deep-1" in line] == [
        "rejected webhook delivery deep-1: 400 not a workflow_job payload (JSON nested too deep)"]
    assert "Traceback" not in err and "internal error" not in err


def test_a_failed_push_keeps_the_events_for_the_next_window(repo: Path) -> None:
    """The remote refuses (a hook): health says degraded, nothing is lost; once it accepts
    again, the kept events land."""
    import os
    import time

    hook = repo.parent / "remote.git" / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'maintenance window' >&2\nexit 1\n")
    os.chmod(hook, 0o755)
    server = Server(repo, window="1s")
    try:
        before, _ = remote_state(repo)
        for job_id in (1, 2):
            server.post(job(job_id, "queued", ["self-hosted", "linux"]))
        deadline = time.monotonic() + 20
        while server.health()["status"] != "degraded" and time.monotonic() < deadline:
            time.sleep(0.1)
        health = server.health()
        assert health["status"] == "degraded"
        assert "maintenance window" in health["last_error"]
        assert health["pending_events"] == 2  # kept for the next try
        assert remote_state(repo)[0] == before
        hook.unlink()
        server.post(job(3, "queued", ["self-hosted", "linux"]))
        wait_for_commit(server, repo, before, timeout=40)
        commits, spec = remote_state(repo)
        assert spec["replicas"] == 3 and commits == before + 1
        assert server.health()["status"] == "ok"
    finally:
        server.close()


def test_bad_content_length_and_slow_clients(repo: Path, monkeypatch: pytest.MonkeyPatch,
                                              capfd: pytest.CaptureFixture[str]) -> None:
    """A Content-Length that is not a number was a traceback and a dropped connection; a client
    that stops sending held its thread forever; one that hangs up early was a traceback."""
    import socket
    import struct
    import time

    import gitscale.commands.serve

    monkeypatch.setattr(gitscale.commands.serve, "REQUEST_DEADLINE", 1.0)
    server = Server(repo, window="1s")
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
            assert sock.makefile("rb").read().startswith(b"HTTP/1.1 400")
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            started = time.monotonic()
            assert sock.recv(100) == b""  # closed by the server, not left hanging
            assert time.monotonic() - started < 5
        for _ in range(50):  # clients that hang up (RST) before reading the answer
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        assert server.health()["status"] == "ok"
    finally:
        server.close()
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.usefixtures("quick_batches")  # (one delivery accepted)
def test_a_reservations_file_edited_into_nonsense_is_reported_not_a_crash(repo: Path) -> None:
    """A time without an offset was a TypeError that killed the server (and its events)."""
    (repo / ".gitscale").mkdir()
    (repo / ".gitscale/reservations.yaml").write_text(
        "sets:\n  linux:\n    reservations:\n"
        "    - {job: 1, running: false, created: 2026-01-01 00:00:00,"
        " expires: 2099-01-01 00:00:00}\n")
    git(repo, "add", ".gitscale")
    git(repo, "commit", "-qm", "by hand")
    git(repo, "push", "-q")
    server = Server(repo, window="1s")
    try:
        assert server.post(job(5, "queued", ["self-hosted", "linux"]))[0] == 202
        import time

        deadline = time.monotonic() + 20
        while server.health()["status"] != "degraded" and time.monotonic() < deadline:
            time.sleep(0.1)
        health = server.health()
        assert health["pending_events"] == 1  # kept until the file is fixed
        assert ".gitscale/reservations.yaml" in health["last_error"]
        assert "no UTC offset" in health["last_error"]
    finally:
        server.close()


@pytest.mark.usefixtures("quick_batches")  # (one delivery accepted)
def test_a_symlinked_reservations_file_is_never_written_through(repo: Path) -> None:
    """The write followed the link out of the repo, and the commit (holding only the link)
    said the reservations were updated."""
    outside = repo.parent / "outside.yaml"
    outside.write_text("# not gitscale's\n")
    (repo / ".gitscale").mkdir()
    (repo / ".gitscale/reservations.yaml").symlink_to(outside)
    git(repo, "add", ".gitscale")
    git(repo, "commit", "-qm", "link")
    git(repo, "push", "-q")
    before, _ = remote_state(repo)
    server = Server(repo, window="1s")
    try:
        server.post(job(5, "queued", ["self-hosted", "linux"]))
        import time

        deadline = time.monotonic() + 20
        while server.health()["status"] != "degraded" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "symlink" in server.health()["last_error"]
    finally:
        server.close()
    assert outside.read_text() == "# not gitscale's\n"
    assert remote_state(repo)[0] == before


@pytest.mark.usefixtures("quick_batches")  # (one delivery accepted)
def test_reservations_of_a_removed_set_are_dropped(repo: Path) -> None:
    """Nothing would ever expire them: they stayed in the file for good."""
    (repo / ".gitscale").mkdir()
    (repo / ".gitscale/reservations.yaml").write_text(
        "sets:\n  retired:\n    reservations:\n"
        "    - {job: 1, running: false, created: '2026-01-01T00:00:00Z',"
        " expires: '2026-01-01T00:10:00Z'}\n    completed: []\n")
    git(repo, "add", ".gitscale")
    git(repo, "commit", "-qm", "a set that is gone")
    git(repo, "push", "-q")
    server = Server(repo, window="1s")
    try:
        before, _ = remote_state(repo)
        server.post(job(5, "queued", ["self-hosted", "linux"]))
        wait_for_commit(server, repo, before)
    finally:
        server.close()
    book = yaml.safe_load(git(repo.parent / "remote.git", "show",
                              "main:.gitscale/reservations.yaml"))
    assert set(book["sets"]) == {"linux"}


@pytest.mark.parametrize("listen", ["256.0.0.1:8080", "127.0.0.1:99999", "127.0.0.1:\u00b2",
                                    "in-use"])
def test_a_bad_listen_address_is_an_error(repo: Path, capsys, listen: str) -> None:  # type: ignore[no-untyped-def]
    import socket

    from tests.helpers import run

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        if listen == "in-use":
            listen = f"127.0.0.1:{taken.getsockname()[1]}"
        code, _, err = run(capsys, "serve", "--repo", str(repo), "--listen", listen,
                             "--secret-env", "TEST_WEBHOOK_SECRET")
    assert code == 1 and err.startswith("error: --listen:"), err


def test_a_job_waiting_for_an_environment_approval_reserves_no_runner(repo: Path) -> None:
    """GitHub delivers a protected environment's job as `queued` with status `waiting`, then
    `waiting`, then `queued` again once a person approves it: only then does it need a runner
    (as in polling, which counts no waiting job)."""
    def example(name: str) -> bytes:
        payload = json.loads((PAYLOADS / f"{name}.payload.json").read_text())
        payload["workflow_job"]["labels"] = ["self-hosted", "linux"]
        payload["repository"]["full_name"] = "octo-org/octo-repo"
        return json.dumps(payload).encode()

    waiting_job = json.loads(example("waiting"))["workflow_job"]["id"]
    server = Server(repo, window="1s")
    try:
        before, _ = remote_state(repo)
        assert server.post(example("queued.with-deployment"))[0] == 202
        assert server.post(example("waiting"))[0] == 202
        server.post(job(1, "queued", ["self-hosted", "linux"]))
        wait_for_commit(server, repo, before)
        book = yaml.safe_load(git(repo.parent / "remote.git", "show",
                                  "main:.gitscale/reservations.yaml"))
        assert [r["job"] for r in book["sets"]["linux"]["reservations"]] == [1]
        before, _ = remote_state(repo)
        approved = json.loads(example("queued.with-deployment"))
        approved["workflow_job"]["status"] = "queued"
        server.post(json.dumps(approved).encode())
        wait_for_commit(server, repo, before)
        book = yaml.safe_load(git(repo.parent / "remote.git", "show",
                                  "main:.gitscale/reservations.yaml"))
        assert {r["job"] for r in book["sets"]["linux"]["reservations"]} == {1, waiting_job}
    finally:
        server.close()


@pytest.mark.parametrize(("args", "said"), [
    pytest.param(["--window", "0s"], "--window: '0s' must be at least 1s", id="window-0"),
    pytest.param(["--reservation", "0s"], "--reservation: '0s' must be at least 1m",
                 id="reservation-0"),
    pytest.param(["--reservation", "30s"], "--reservation: '30s' must be at least 1m",
                 id="reservation-30s"),
    pytest.param(["--resync", "1s"], "--resync: '1s' must be at least 10s", id="resync-1s"),
    pytest.param(["--window", "soon"], "--window: 'soon' is not a duration", id="not-a-duration"),
    pytest.param(["--hold", "-5m"], "--hold: '-5m' is not a duration", id="hold-negative"),
    pytest.param(["--hold", "a while"], "--hold: 'a while' is not a duration", id="hold-words"),
])
def test_durations_below_their_minimum_are_refused(repo: Path, args: list[str],
                                                   said: str) -> None:
    """`--window 0s` was accepted and spun at 100 % CPU (a batch loop that never waits): in a
    process of its own, so that a serve that starts fails the test instead of hanging it."""
    import os
    import subprocess
    import sys

    before = git(repo, "rev-parse", "HEAD")
    result = subprocess.run(
        [sys.executable, "-m", "gitscale", "serve", "--repo", str(repo), "--listen",
         "127.0.0.1:0", "--secret-env", "TEST_WEBHOOK_SECRET", *args],
        capture_output=True, text=True, timeout=20, env=os.environ.copy())
    assert result.returncode == 1 and result.stdout == "", result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(f"error: {said}"), result.stderr
    assert git(repo, "rev-parse", "HEAD") == before
    assert not (repo / ".gitscale").exists()


@pytest.mark.parametrize(("reservation", "resync", "warned"), [
    pytest.param("1m", "2m", True, id="shorter"),
    # equal is not enough (README: "must be longer"): the renewal runs from the batch that
    # applies a poll's listing, the next such batch comes a poll's time and up to a window
    # after the next due time, and a batch in between expires the reservation
    pytest.param("2m", "2m", True, id="equal"),
    pytest.param("3m", "2m", False, id="longer"),
    pytest.param("1m", "0", False, id="no-resync"),
])
def test_a_reservation_shorter_than_the_resync_is_warned_of_at_start(  # type: ignore[no-untyped-def]
        repo: Path, capfd: pytest.CaptureFixture[str], reservation: str, resync: str,
        warned: bool) -> None:
    """The resync renews a still-listed job's reservation: one that expires before the next
    resync makes a long-queued job's set scale down and up again, so serve says so once."""
    server = Server(repo, reservation=reservation, resync=resync)
    server.close()
    err = capfd.readouterr().err
    said = f"warning: --reservation {reservation} is not longer than --resync {resync}"
    assert (said in err) is warned, err
    assert err.count("longer than --resync") == int(warned)


@pytest.mark.parametrize("off", ["0", "0s", "0m", "0h", " 0 "])
def test_every_zero_duration_turns_resync_off(off: str) -> None:
    """`--resync 0m` turned resync off before the minimums; it still does, as `0` and `0s`."""
    from gitscale.commands.serve import _durations

    assert _durations("10s", "10m", off) == (10.0, timedelta(minutes=10), 0.0)


@pytest.mark.parametrize(("window", "failures", "least"), [
    pytest.param(1.0, 1, 2.0, id="window-1s"),
    pytest.param(0.0, 1, 2.0, id="window-0"),  # what `--window 0s` made: 0 s, a busy loop
    pytest.param(0.001, 3, 8.0, id="window-1ms"),
    pytest.param(10.0, 2, 40.0, id="window-10s"),
])
def test_a_failed_batch_backs_off_whatever_the_window(window: float, failures: int,
                                                      least: float) -> None:
    from gitscale.webhooks.batch_loop import MAX_BACKOFF, batch_delay

    assert batch_delay(window, failures) == least
    assert batch_delay(window, 5000) == MAX_BACKOFF  # no float overflow after days of failures
    assert batch_delay(window, 0) == window


@pytest.mark.usefixtures("quick_batches")  # (one delivery accepted)
def test_a_job_id_beyond_int64_is_refused_and_never_written(repo: Path) -> None:
    server = Server(repo, window="1s")
    try:
        status, answer = server.post(job(10 ** 400, "queued", ["self-hosted", "linux"]))
        assert status == 400 and "workflow_job.id is not a job id" in answer["error"]
        before, _ = remote_state(repo)
        assert server.post(job(7, "queued", ["self-hosted", "linux"]))[0] == 202
        wait_for_commit(server, repo, before)
    finally:
        server.close()
    remote = repo.parent / "remote.git"
    book = yaml.safe_load(git(remote, "show", "main:.gitscale/reservations.yaml"))
    assert [r["job"] for r in book["sets"]["linux"]["reservations"]] == [7]
    subjects = git(remote, "log", "--format=%s", "main").splitlines()
    assert all(s.strip() != "gitscale:" for s in subjects), subjects


@pytest.mark.usefixtures("quick_batches")  # (one delivery accepted)
def test_a_job_without_a_list_of_labels_is_refused_and_reserves_nothing(
        repo: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """`"labels": null`, or no labels at all, was taken as a job without labels, which every
    set matches: both got 202 and the next batch committed `linux 0→2`."""
    def unlabelled(job_id: int, labels: object) -> bytes:
        payload = json.loads(job(job_id, "queued", []))
        if labels is None:
            payload["workflow_job"]["labels"] = None
        else:
            del payload["workflow_job"]["labels"]
        return json.dumps(payload).encode()

    server = Server(repo, window="1s")
    try:
        status, answer = server.post(unlabelled(21, None), delivery="null-labels")
        assert (status, answer) == (400, {"error": "not a workflow_job payload "
                                          "(workflow_job.labels is not a list of strings)"})
        status, answer = server.post(unlabelled(22, "absent"), delivery="no-labels")
        assert (status, answer) == (400, {"error": "not a workflow_job payload "
                                          "(workflow_job.labels is missing)"})
        before, _ = remote_state(repo)
        assert server.post(job(7, "queued", ["self-hosted", "linux"]))[0] == 202
        wait_for_commit(server, repo, before)
    finally:
        server.close()
    _, spec = remote_state(repo)
    assert spec["replicas"] == 1
    book = yaml.safe_load(git(repo.parent / "remote.git", "show",
                              "main:.gitscale/reservations.yaml"))
    assert [r["job"] for r in book["sets"]["linux"]["reservations"]] == [7]
    assert "gpu" not in book["sets"]
    lines = [line.split(" ", 1)[1] for line in capfd.readouterr().err.splitlines()
             if "rejected" in line]
    assert lines[0] == ("rejected webhook delivery null-labels: 400 not a workflow_job payload "
                        "(workflow_job.labels is not a list of strings)")
    # the second, of the same kind within the minute, is counted (RejectionLog)
    assert re.fullmatch(r"rejected 1 more webhook deliveries: 400 not a workflow_job payload "
                        r"\(since \d+ s ago\)", lines[1]) and len(lines) == 2, lines


@pytest.mark.parametrize("path", ["nopath", "", "webhook/", "/hook?x=1", "/a b", "/hook#x"])
def test_a_path_that_is_not_a_url_path_is_refused(repo: Path, capsys, path: str) -> None:  # type: ignore[no-untyped-def]
    """`--path nopath` was taken, logged `listening on 127.0.0.1:8080nopath` and matched no
    request: every delivery a 404."""
    from tests.helpers import run

    code, out, err = run(capsys, "serve", "--repo", str(repo), "--listen", "127.0.0.1:0",
                         "--path", path, "--secret-env", "TEST_WEBHOOK_SECRET")
    assert (code, out) == (1, "")
    assert err == (f"error: --path: {path!r} is not a URL path: it starts with / and holds no "
                   "blank, ? or # (e.g. /webhook)\n")
    assert git(repo.parent / "remote.git", "rev-list", "--count", "main") == "1"


def test_a_reservations_file_with_a_job_id_beyond_int64_is_an_error(repo: Path) -> None:
    from gitscale.webhooks.reservations_file import ReservationsError, read_state

    (repo / ".gitscale").mkdir()
    (repo / ".gitscale/reservations.yaml").write_text(
        "sets:\n  linux:\n    reservations:\n"
        f"    - {{job: {10 ** 400}, running: false, created: '2026-01-01T00:00:00Z',"
        " expires: '2099-01-01T00:00:00Z'}\n")
    with pytest.raises(ReservationsError, match=r"reservations.yaml:4: .*is not a GitHub job id"):
        read_state(repo, ".gitscale/reservations.yaml")


def test_a_batch_that_only_expires_reservations_says_so(repo: Path) -> None:
    """No event and no scaling change, only the file: its commit was `gitscale:` and nothing
    else. (Expiry at a start is the common case; a file in another order was another.)"""
    Server(repo, window="1s").close()  # claims the sets, writes the manifests
    git(repo, "pull", "-q")
    state = repo / ".gitscale/reservations.yaml"
    state.write_text(state.read_text().replace("sets: {}", "") + (
        "sets:\n  linux:\n    reservations:\n"
        "    - {job: 5, running: false, created: '2026-01-01T00:00:00Z',"
        " expires: '2026-01-01T00:10:00Z'}\n    completed: []\n"))
    git(repo, "commit", "-qam", "an old reservation")
    git(repo, "push", "-q")
    Server(repo, window="1s").close()
    remote = repo.parent / "remote.git"
    assert git(remote, "log", "-1", "--format=%s", "main") == \
        "gitscale: reservations: 1 reservation expired (job 5)"
    assert yaml.safe_load(git(remote, "show", "main:sets/linux.yaml"))["spec"]["replicas"] == 0


@pytest.mark.usefixtures("quick_batches")  # (one delivery accepted)
def test_serve_saves_what_it_learnt_at_each_checkpoint_not_only_at_its_stop(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a checkpoint after every batch, the state cache is on disk while serve runs: a
    kill -9 would cost what came after it (CHECKPOINT_SECONDS, 10 minutes by default)."""
    import os

    import gitscale.commands as commands

    monkeypatch.setattr(commands, "CHECKPOINT_SECONDS", 0.0)
    state = Path(os.environ["GITSCALE_CACHE_DIR"]) / "manifest-state.marshal"
    server = Server(repo, window="1s")
    try:
        before, _ = remote_state(repo)
        assert server.post(job(1, "queued", ["self-hosted", "linux"]))[0] == 202
        wait_for_commit(server, repo, before)
        deadline = time.monotonic() + 10
        while not state.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert state.exists() and not server.stop.is_set()  # saved while serving
    finally:
        server.close()


def test_the_webhook_path_answers_other_methods_405_with_allow(repo: Path) -> None:
    """A browser or a probe on the webhook's URL learns that it takes POSTs (405, ``Allow:
    POST``), not that nothing is there; other paths are still 404."""
    server = Server(repo)
    try:
        for method, where, status in [("GET", "/webhook", 405), ("PUT", "/webhook", 405),
                                      ("GET", "/nowhere", 404), ("POST", "/nowhere", 404)]:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
            conn.request(method, where, body=b"{}" if method != "GET" else None)
            response = conn.getresponse()
            response.read()
            conn.close()
            assert response.status == status, (method, where)
            assert (response.getheader("Allow") == "POST") == (status == 405)
    finally:
        server.close()
