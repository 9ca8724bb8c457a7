"""``GITSCALE_LOG_FORMAT=json`` in real `run` and `serve` processes: a push the remote refuses
(a hook's message over several lines, a token in it) is one JSON object, masked; nothing else
on stderr is anything but a JSON object a line. An unknown value stops the command at once."""
from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.commands.test_serve import CONFIG, SECRET, job
from tests.helpers import RUNNERSET, make_repo, simple_config

TOKEN = "push-token-0123456789-secret"  # GITSCALE_GIT_TOKEN: masked wherever it shows
HOOK = f"""#!/bin/sh
echo 'refused: the branch is protected (token {TOKEN})' >&2
echo 'hint: ask an admin to lift the protection' >&2
exit 1
"""


def refusing(checkout: Path) -> None:
    """The checkout's remote refuses every push, saying so on two lines."""
    hook = checkout.parent / "remote.git" / "hooks" / "pre-receive"
    hook.write_text(HOOK)
    hook.chmod(0o755)


def environment(**more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITSCALE_LOG")}
    return {**env, "GITSCALE_GIT_TOKEN": TOKEN, **more}


def objects(err: str) -> list[dict[str, Any]]:
    """Every line of ``err`` as a JSON object (a line that is not one fails here)."""
    found = []
    for line in err.splitlines():
        value = json.loads(line)
        assert isinstance(value, dict), line
        assert set(value) >= {"time", "level", "component", "msg"}, line
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", value["time"]), line
        assert value["level"] in ("info", "warning", "error"), line
        found.append(value)
    return found


def refused_run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """One pass of `run` whose push the remote's hook refuses (with a token in its words)."""
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 20}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 3, running: 0}\n",
    })
    refusing(checkout)
    return subprocess.run(
        [sys.executable, "-m", "gitscale", "run", "--repo", str(checkout), "--interval", "1s",
         "--max-passes", "1"], capture_output=True, text=True, timeout=60,
        env=environment(**env))


def test_run_logs_a_refused_push_as_one_masked_object(tmp_path: Path) -> None:
    result = refused_run(tmp_path, GITSCALE_LOG_FORMAT="json")
    assert result.returncode == 1, result.stderr  # the pass's: the push was refused
    assert TOKEN not in result.stderr
    said = objects(result.stderr)
    assert {line["component"] for line in said} == {"run"}
    (failed,) = [line for line in said if line["level"] == "error"]
    assert failed["msg"].startswith("pass failed (1 in a row): "), failed
    assert "\n" in failed["msg"]  # the hook's lines and git's, in the one message
    assert "refused: the branch is protected (token ***)" in failed["msg"]
    assert "hint: ask an admin to lift the protection" in failed["msg"]
    assert said[-1] == {"time": said[-1]["time"], "level": "info", "component": "run",
                        "msg": "stopped after 1 passes"}


def test_run_logs_text_by_default(tmp_path: Path) -> None:
    """The same refusal without the variable: today's lines, a time and the message, its
    further lines as they are."""
    result = refused_run(tmp_path)
    assert result.returncode == 1, result.stderr
    failed = re.search(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ pass failed \(1 in a row\): .*",
                       result.stderr, re.M)
    assert failed is not None, result.stderr
    assert re.search(r"^(remote: )?hint: ask an admin to lift the protection$", result.stderr,
                     re.M), result.stderr
    assert re.search(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ stopped after 1 passes$",
                     result.stderr, re.M), result.stderr
    assert TOKEN not in result.stderr


def test_serve_logs_a_refused_batch_as_one_masked_object(tmp_path: Path) -> None:
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": CONFIG,
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "sets/gpu.yaml": RUNNERSET.format(name="gpu", replicas=0),
    })
    refusing(checkout)
    log = tmp_path / "stderr"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gitscale", "serve", "--repo", str(checkout), "--listen",
             "127.0.0.1:0", "--window", "1s", "--resync", "0"], stdout=subprocess.DEVNULL,
            stderr=sink, env=environment(GITSCALE_LOG_FORMAT="json",
                                         GITHUB_WEBHOOK_SECRET=SECRET))
    try:
        listening = until(lambda: [line for line in objects(log.read_text())
                                   if line["msg"].startswith("listening on ")], proc, log)
        port = int(re.search(r"127\.0\.0\.1:(\d+)/", listening[0]["msg"]).group(1))  # type: ignore[union-attr]
        body = job(1, "queued", ["self-hosted", "linux"])
        digest = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("POST", "/webhook", body=body, headers={
            "Content-Type": "application/json", "X-GitHub-Event": "workflow_job",
            "X-GitHub-Delivery": str(uuid.uuid4()), "X-Hub-Signature-256": f"sha256={digest}"})
        assert conn.getresponse().status == 202
        conn.close()
        until(lambda: [line for line in objects(log.read_text()) if line["level"] == "error"],
              proc, log)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    err = log.read_text()
    assert TOKEN not in err
    said = objects(err)
    assert {line["component"] for line in said} == {"serve"}
    failed = [line for line in said if line["level"] == "error"]
    assert failed, err
    assert "\n" in failed[0]["msg"]
    assert "refused: the branch is protected (token ***)" in failed[0]["msg"]
    assert "hint: ask an admin to lift the protection" in failed[0]["msg"]
    assert said[-1]["msg"] == "stopped", err


def until(found: Any, proc: subprocess.Popen[bytes], log: Path, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        value = found()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(log.read_text())


@pytest.mark.parametrize("command", [
    ["run", "--max-passes", "1"], ["serve"], ["controller", "--kubeconfig", "missing"]])
def test_an_unknown_log_format_stops_the_command_at_its_start(tmp_path: Path,
                                                              command: list[str]) -> None:
    result = subprocess.run([sys.executable, "-m", "gitscale", *command], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60,
                            env=environment(GITSCALE_LOG_FORMAT="logfmt",
                                            GITHUB_WEBHOOK_SECRET=SECRET))
    assert result.returncode == 1
    assert result.stderr == ("error: GITSCALE_LOG_FORMAT: 'logfmt' is not a log format: use "
                             "text or json (default text)\n")


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_the_error_a_run_ends_on_is_a_log_object_too(tmp_path: Path, log_format: str) -> None:
    """`run` (a pod's whole log) ending on an error: in a JSON log its last line is an object
    of level error too, not the one plain line a collector cannot parse; text as before."""
    result = subprocess.run(
        [sys.executable, "-m", "gitscale", "run", "--repo", str(tmp_path / "nowhere"),
         "--max-passes", "1"], capture_output=True, text=True, timeout=60,
        env=environment(GITSCALE_LOG_FORMAT=log_format))
    assert result.returncode == 1, result.stderr
    said = f"error: {tmp_path / 'nowhere'}: no such directory, and not a URL"
    if log_format == "text":
        assert result.stderr == said + "\n"
        return
    (last,) = objects(result.stderr)
    assert last == {"time": last["time"], "level": "error", "component": "run", "msg": said}


def test_a_cache_that_cannot_be_written_is_a_warning_object_in_a_json_log(
        tmp_path: Path) -> None:
    """The cache's warnings (``gitscale.files``: not written, not loaded) are said once a
    process, on stderr: in a JSON log an object of level warning like every other line (it was
    the one plain line), in text as before."""
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 20}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 3, running: 0}\n",
    })
    (tmp_path / "a-file").write_text("")
    nowhere = tmp_path / "a-file" / "cache"  # under a file: no one, root included, writes it
    said = f"warning: cannot write gitscale's cache in {nowhere}: Not a directory; "
    for log_format in ("json", "text"):
        result = subprocess.run(
            [sys.executable, "-m", "gitscale", "run", "--repo", str(checkout), "--interval",
             "1s", "--max-passes", "1"], capture_output=True, text=True, timeout=60,
            env=environment(GITSCALE_LOG_FORMAT=log_format, GITSCALE_CACHE_DIR=str(nowhere)))
        assert result.returncode == 0, result.stderr
        if log_format == "text":
            assert result.stderr.count(said) == 1, result.stderr
            continue
        warned = [line for line in objects(result.stderr) if line["msg"].startswith(said)]
        assert len(warned) == 1 and warned[0]["level"] == "warning", result.stderr
        assert warned[0]["component"] == "run"
