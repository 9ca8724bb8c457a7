"""`gitscale controller` with ``GITSCALE_LOG_FORMAT=json``, a real process against
tests/kubeapi: every line on stderr is one JSON object of the controller's."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.controller.harness import NS, Harness, buildkite_spec


def test_the_controller_logs_json_objects(harness: Harness, tmp_path: Path) -> None:
    kubeconfig = harness.api.write_kubeconfig(tmp_path / "kubeconfig")
    harness.write("bk", 2, 0, spec=buildkite_spec())
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    log = tmp_path / "stderr"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gitscale", "controller", "--kubeconfig", str(kubeconfig),
             "--namespace", NS, "--health-port", "0", "--concurrency", "4"],
            stdout=subprocess.DEVNULL, stderr=sink,
            env={**env, "GITSCALE_LOG_FORMAT": "json"})
    try:
        deadline = time.monotonic() + 20
        while "created 2 runner(s)" not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert proc.returncode == 0, log.read_text()
    said = [json.loads(line) for line in log.read_text().splitlines()]
    assert said and all(line["component"] == "controller" for line in said), said
    assert {line["level"] for line in said} <= {"info", "warning", "error"}
    watching, *_ = said
    assert watching["msg"] == f"watching RunnerSets in {NS} (concurrency 4)"
    assert (watching["level"], watching["logger"]) == ("info", "gitscale.controller")
    (created,) = [line for line in said if "created 2 runner(s)" in line["msg"]]
    assert created["msg"] == f"{NS}/bk: created 2 runner(s) for patch 0"
    assert created["logger"] == "gitscale.controller"
    (stopping,) = [line for line in said if line["msg"].startswith("SIGTERM")]
    assert "logger" not in stopping  # (logged by the command, not through logging)
