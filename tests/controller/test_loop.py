"""The controller as it runs: watch-driven workers, bad sets, lost watches, probes, the CLI."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from gitscale.controller.loop import serve_health
from tests.helpers import wait_for
from tests.controller.harness import NS, Harness, buildkite_spec, start


@pytest.fixture
def running() -> Iterator[Harness]:
    yield from start(workers=True, resync=1.0)


def eventually(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    return wait_for(check, timeout)


def test_watch_driven_scale_up_and_down(running: Harness) -> None:
    running.write("bk", 5, 0, spec=buildkite_spec())
    eventually(lambda: len(running.pods("bk")) == 5)
    names = running.names("bk")
    for name in names:
        running.api.set_pod_phase(NS, name, "Running")
    running.write("bk", 2, 0)
    eventually(lambda: len(running.pods("bk")) == 2)
    status = eventually(lambda: (running.api.get_object("runnersets", "bk", NS) or {}).get(
        "status", {}).get("idle") == 2 and running.api.get_object("runnersets", "bk", NS))
    assert status["status"]["replicas"] == 2
    creates = [r for r in running.controller.reports if r.created]
    assert len(creates) == 1 and len(creates[0].created) == 5  # one pass created all five


def test_bad_runnersets_get_a_condition_and_others_are_served(running: Harness) -> None:
    bad = {
        "no-template": lambda s: s.pop("template"),
        "negative": lambda s: s.update(replicas=-1),
        "unknown-platform": lambda s: s.update(platform="jenkins"),
    }
    for name, spoil in bad.items():
        running.write(name, 1, 0, spec=buildkite_spec())
        running.api.mutate_object("runnersets", name, lambda o, f=spoil: f(o["spec"]), NS)  # type: ignore[misc]
    running.write("good", 2, 0, spec=buildkite_spec())
    eventually(lambda: len(running.pods("good")) == 2)

    def condition(name: str) -> dict[str, Any] | None:
        obj = running.api.get_object("runnersets", name, NS) or {}
        conds = (obj.get("status") or {}).get("conditions") or []
        return next((c for c in conds if c["type"] == "Ready" and c["status"] == "False"), None)

    messages = {name: eventually(lambda n=name: condition(n))["message"] for name in bad}  # type: ignore[misc]
    assert messages["no-template"] == "spec.template is missing: a pod template for one runner"
    assert messages["negative"] == "spec.replicas: -1 is out of range (0..10000)"
    assert "spec.platform 'jenkins' is not one of github, buildkite" in messages[
        "unknown-platform"]
    assert all(condition(n)["reason"] == "InvalidSpec" for n in bad)  # type: ignore[index]
    # Fixing a set clears its condition and it is served.
    running.api.mutate_object("runnersets", "negative", lambda o: o["spec"].update(replicas=1),
                              NS)
    eventually(lambda: len(running.pods("negative")) == 1 and condition("negative") is None)


def test_lost_and_expired_watches_are_recovered(running: Harness) -> None:
    running.write("bk", 1, 0, spec=buildkite_spec())
    eventually(lambda: len(running.pods("bk")) == 1)
    running.api.compact()
    running.api.drop_watches()  # resuming from the old version now answers 410
    running.write("bk", 3, 0)
    eventually(lambda: len(running.pods("bk")) == 3)


def test_health_endpoints(harness: Harness) -> None:
    server = serve_health(harness.controller, 0, host="127.0.0.1")
    try:
        port = server.server_address[1]
        for path in ("/healthz", "/readyz"):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
                assert answer.status == 200
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/nope", timeout=5)
    finally:
        server.shutdown()


def test_cli_controller_runs_until_sigterm(harness: Harness, tmp_path: Path) -> None:
    kubeconfig = harness.api.write_kubeconfig(tmp_path / "kubeconfig")
    harness.write("bk", 2, 0, spec=buildkite_spec())
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gitscale", "controller", "--kubeconfig", str(kubeconfig),
         "--namespace", NS, "--health-port", "0", "--concurrency", "4"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        eventually(lambda: len(harness.pods("bk")) == 2 or proc.poll() is not None)
        assert proc.poll() is None, proc.communicate()[1]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "created 2 runner(s) for patch 0" in err
