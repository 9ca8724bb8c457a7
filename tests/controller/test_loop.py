"""The controller as it runs: watch-driven workers, bad sets, lost watches, probes, the CLI."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from http.server import ThreadingHTTPServer
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
    # The workers' passes post their Events: on the set, one for the five.
    events = eventually(lambda: (found := {e["reason"]: e for e in running.events("bk")}).keys()
                        >= {"RunnersCreated", "RunnersDeleted"} and found)
    assert events["RunnersCreated"]["message"].startswith("created 5 runners for patch 0 (")
    assert events["RunnersDeleted"]["message"].startswith("deleted 3 runners: 3 surplus")


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


def probe(server: ThreadingHTTPServer, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}{path}",
                                    timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_an_api_server_that_does_not_answer_is_not_a_liveness_failure() -> None:
    """A control-plane outage: every call fails. Restarting the controller would not help (and
    CrashLoopBackOff would delay it after the outage): /healthz stays green, /readyz says."""
    for harness in start(workers=True, resync=0.2, relist_backoff=0.01):
        server = serve_health(harness.controller, 0, host="127.0.0.1")
        try:
            harness.write("bk", 1, 0, spec=buildkite_spec())
            eventually(lambda: len(harness.pods("bk")) == 1)
            assert probe(server, "/readyz") == (200, "ok\n")
            harness.api.inject_error(code=503, reason="ServiceUnavailable", times=10**6)
            harness.api.drop_watches()
            harness.write("bk", 2, 0)  # passes run, and fail
            eventually(lambda: all(i.failures >= 6 for i in harness.controller.informers))
            assert probe(server, "/healthz") == (200, "ok\n")
            code, body = probe(server, "/readyz")
            assert code == 503 and body.splitlines() == [  # what each informer was answered
                "runnersets: the last list or watch failed: list RunnerSets: 503 "
                "ServiceUnavailable: injected failure",
                "pods: the last list or watch failed: list runner pods: 503 ServiceUnavailable: "
                "injected failure"]
            harness.api.clear_errors()
            eventually(lambda: probe(server, "/readyz")[0] == 200)
            eventually(lambda: len(harness.pods("bk")) == 2)
        finally:
            server.shutdown()


@pytest.fixture
def impatient() -> Iterator[Harness]:
    yield from start(workers=True, resync=1.0, stall_after=0.5)


def test_a_pass_stuck_on_a_call_fails_liveness_until_it_moves(impatient: Harness) -> None:
    server = serve_health(impatient.controller, 0, host="127.0.0.1")
    release = impatient.api.hang("create", "pods")  # answered only when released
    try:
        impatient.write("bk", 1, 0, spec=buildkite_spec())
        code, body = eventually(lambda: (answer := probe(server, "/healthz"))[0] == 503
                                and answer)
        assert code == 503 and body.startswith("pass over default/bk: no progress for ")
        release.set()
        eventually(lambda: len(impatient.pods("bk")) == 1)
        assert eventually(lambda: probe(server, "/healthz") == (200, "ok\n"))
    finally:
        release.set()
        server.shutdown()


def test_a_pass_does_not_wait_for_its_events(harness: Harness) -> None:
    release = harness.api.hang("create", "events")  # the API server holds every Event
    try:
        harness.write("rs", 2, 0)
        harness.catch_up()
        report = harness.controller.reconcile(f"{NS}/rs")  # returns while its Event is held
        assert len(report.created) == 2 and len(harness.pods("rs")) == 2
        assert harness.events("rs") == [] and not harness.controller.events.flush(0.1)
    finally:
        release.set()
    assert harness.controller.events.flush(5)
    assert [e["reason"] for e in harness.events("rs")] == ["RunnersCreated"]


def test_a_call_never_answered_times_out_and_the_pass_says_so() -> None:
    for harness in start(kube_timeout=0.3):
        harness.write("bk", 2, 0, spec=buildkite_spec())
        release = harness.api.hang("create", "pods")
        try:
            report = harness.sync("bk")
        finally:
            release.set()
        # Said once for both runners, with the cause and the backoff
        (error,) = report.errors
        assert re.fullmatch(r"create pod default/bk-[0-9a-f]{4}-[0-9a-f]{6}: the API server "
                            r"answered too slowly \(no answer within 0\.3s\) \(and 1 more runner "
                            r"alike\); creations failed 1 pass\(es\) in a row, tried again "
                            r"from \S+", error), error
        assert report.created == []
        assert harness.status("bk")["conditions"][0]["reason"] == "CreateFailed"
        assert harness.controller.healthy()


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


def test_cli_controller_says_sigterm_once_however_often_it_comes(harness: Harness,
                                                                 tmp_path: Path) -> None:
    """A supervisor that signals the process and then its group (GNU timeout, a wrapper
    script) delivers SIGTERM twice, the second while the passes in flight finish: the stop is
    one event, said once."""
    kubeconfig = harness.api.write_kubeconfig(tmp_path / "kubeconfig")
    release = harness.api.hang("create", "pods")  # a pass in flight while it stops
    harness.write("bk", 1, 0, spec=buildkite_spec())
    env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    log = tmp_path / "stderr"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gitscale", "controller", "--kubeconfig", str(kubeconfig),
             "--namespace", NS, "--health-port", "0", "--shutdown-timeout", "10"],
            stdout=subprocess.DEVNULL, stderr=sink, env=env, text=True)
    try:
        eventually(lambda: harness.api.calls[("create", "pods")] or proc.poll() is not None)
        assert proc.poll() is None, log.read_text()
        proc.send_signal(signal.SIGTERM)
        eventually(lambda: "then stopping" in log.read_text())
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)  # (the signals thread reads them at once: nothing to wait on)
        assert proc.poll() is None  # still finishing its pass
    finally:
        release.set()
        proc.wait(30)
    err = log.read_text()
    assert proc.returncode == 0, err
    assert err.count("then stopping") == 1, err
    assert "SIGTERM: finishing the passes in flight (up to 10s), then stopping" in err
