"""Prometheus metrics of `run` and `serve`, scraped over HTTP and parsed with prometheus_client's
own parser: the values follow what the loop did."""
from __future__ import annotations

import http.client
import socket
import stat
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gitscale.commands import RepoOptions
from gitscale.commands.run import run_loop
from gitscale.errors import ConfigError, DemandError, GitError, PushRejected
from gitscale.metrics import error_kind
from tests.helpers import RUNNERSET, git, make_repo, run, simple_config
from tests.notify.engines import Application, FakeArgoCD
from tests.commands.test_serve import CONFIG, SECRET, Server, job

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

# A server that moves main under the first push, as another writer would (the push then fails
# to lock the ref: a lost race, retried). Objects go to the real store, not the quarantine.
RACING_HOOK = """\
#!/bin/sh
cat > /dev/null
if [ ! -e raced ]; then
  touch raced
  unset GIT_QUARANTINE_PATH GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES
  c=$(git commit-tree -p refs/heads/main -m "someone else" 'refs/heads/main^{tree}')
  git update-ref refs/heads/main "$c"
fi
exit 0
"""


def scrape(port: int, path: str = "/metrics") -> tuple[int, str, Samples]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path)
    response = conn.getresponse()
    text = response.read().decode()
    conn.close()
    samples: Samples = {}
    if response.status == 200:
        assert response.getheader("Content-Type", "").startswith("text/plain")
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return response.status, text, samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def eventually(check: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


class Loop:
    """`gitscale run` in a thread, with /metrics on a free port of 127.0.0.1."""

    def __init__(self, checkout: Path | str, interval: str = "1s") -> None:
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.port = 0
        self.result: list[Any] = []

        def ready(port: int) -> None:
            self.port = port
            self.ready.set()

        def target() -> None:
            try:
                self.result.append(run_loop(
                    RepoOptions(str(checkout), None, "gitscale.yaml"), interval=interval,
                    demand=None, max_passes=None, metrics_listen="127.0.0.1:0", stop=self.stop,
                    ready=ready))
            except BaseException as exc:  # noqa: BLE001 - surfaced by the test
                self.result.append(exc)
                self.ready.set()

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()
        assert self.ready.wait(20) and self.port, self.result

    def after_passes(self, n: int) -> Samples:
        def done() -> Samples | None:
            _, _, samples = scrape(self.port)
            passes = sum(value(samples, "gitscale_passes_total", result=r) or 0
                         for r in ("ok", "partial", "error"))
            return samples if passes >= n else None
        return eventually(done)  # type: ignore[no-any-return]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert self.result == [0], self.result


@pytest.fixture()
def secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARGOCD_WEBHOOK_SECRET", "argo-secret-1")
    monkeypatch.setenv("WRONG_SECRET", "not-the-secret")


def test_run_metrics_follow_the_passes(tmp_path: Path, secrets: None) -> None:
    with FakeArgoCD("argo-secret-1", Application("app", "https://git.example/config.git")) as argo:
        checkout = make_repo(tmp_path, {
            "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 20}"}) + f"""\
notify:
  - argocd: {{url: "{argo.base}", secret: {{env: ARGOCD_WEBHOOK_SECRET}}, repoURL: "https://git.example/config.git"}}
  - argocd: {{url: "{argo.base}", secret: {{env: WRONG_SECRET}}, repoURL: "https://git.example/config.git"}}
""",
            "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
            "demand.yaml": "linux: {queued: 3, running: 1}\n",
        })
        remote = tmp_path / "remote.git"
        hook = remote / "hooks" / "pre-receive"
        hook.write_text(RACING_HOOK)
        hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
        loop = Loop(checkout, interval="1h")  # one pass now, the next when stopped
        try:
            samples = loop.after_passes(1)
        finally:
            loop.close()
    assert git(remote, "log", "-1", "--format=%s", "main") == "gitscale: linux 0→4"
    assert value(samples, "gitscale_passes_total", result="ok") == 1
    assert value(samples, "gitscale_passes_total", result="error") == 0
    assert value(samples, "gitscale_commits_total") == 1
    assert value(samples, "gitscale_push_retries_total") == 1  # the hook moved main once
    assert value(samples, "gitscale_set_desired_replicas", set="linux") == 4
    assert value(samples, "gitscale_set_patch_id", set="linux") == 0  # first write: patch 0
    assert value(samples, "gitscale_set_queued_jobs", set="linux") == 3
    assert value(samples, "gitscale_set_running_jobs", set="linux") == 1
    assert value(samples, "gitscale_set_writes_total", set="linux", reason="first-write") == 1
    assert value(samples, "gitscale_pass_duration_seconds_count") == 1
    assert value(samples, "gitscale_notifications_total", engine="argocd", result="sent") == 1
    assert value(samples, "gitscale_notifications_total", engine="argocd", result="failed") == 1
    assert value(samples, "gitscale_errors_total", kind="git") == 0
    assert (value(samples, "gitscale_last_success_timestamp_seconds") or 0) > time.time() - 60


def test_run_metrics_count_errors_and_follow_changes(tmp_path: Path) -> None:
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 20}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 2, running: 0}\n",
    })

    def push(path: str, text: str) -> None:
        (checkout / path).write_text(text)
        git(checkout, "commit", "-qam", f"edit {path}")
        git(checkout, "push", "-q")

    def scraped(check: Callable[[Samples], bool]) -> Samples:
        return eventually(lambda: check(s := scrape(loop.port)[2]) and s)  # type: ignore[no-any-return]

    loop = Loop(checkout)
    try:
        first = loop.after_passes(1)
        push("demand.yaml", "linux: {queued: -1, running: 0}\n")  # this set's demand: unread
        unread = scraped(lambda s: value(s, "gitscale_errors_total", kind="demand") == 1)
        unread_again = scraped(lambda s: value(s, "gitscale_errors_total", kind="demand") == 2)
        push("gitscale.yaml", "runnerSets: [{name: linux}]\n")  # the whole pass fails
        failed = scraped(lambda s: value(s, "gitscale_passes_total", result="error") == 1)
        push("gitscale.yaml", simple_config({"linux": "{minReplicas: 0, maxReplicas: 20}"}))
        push("demand.yaml", "linux: {queued: 5, running: 2}\n")
        later = scraped(lambda s: value(s, "gitscale_set_desired_replicas", set="linux") == 7)
    finally:
        loop.close()
    assert value(first, "gitscale_set_desired_replicas", set="linux") == 2
    assert value(first, "gitscale_set_queued_jobs", set="linux") == 2
    # demand unknown: the set's replicas are still reported, its queue is not (no stale value)
    assert value(unread, "gitscale_set_desired_replicas", set="linux") == 2
    assert value(unread, "gitscale_set_queued_jobs", set="linux") is None
    # a pass that left a set unread is not a success (`reconcile` exits 1 on it): counted
    # apart, and neither the loop's nor the set's last-success time moves
    for name, labels in (("gitscale_passes_total", {"result": "ok"}),
                         ("gitscale_last_success_timestamp_seconds", {}),
                         ("gitscale_set_last_read_timestamp_seconds", {"set": "linux"})):
        assert value(unread, name, **labels) == value(unread_again, name, **labels), name
    assert value(unread_again, "gitscale_passes_total", result="partial") == 2
    read = value(first, "gitscale_set_last_read_timestamp_seconds", set="linux")
    assert read is not None and read > time.time() - 120
    # both still say the last pass that read it
    assert value(unread, "gitscale_set_last_read_timestamp_seconds", set="linux") == value(
        unread, "gitscale_last_success_timestamp_seconds")
    assert value(failed, "gitscale_errors_total", kind="config") == 1
    assert value(failed, "gitscale_set_desired_replicas", set="linux") == 2  # kept as it was
    assert value(later, "gitscale_commits_total") == 2
    assert value(later, "gitscale_set_patch_id", set="linux") == 1
    assert value(later, "gitscale_set_queued_jobs", set="linux") == 5
    assert value(later, "gitscale_set_running_jobs", set="linux") == 2
    assert value(later, "gitscale_set_writes_total", set="linux", reason="scale-up") == 1
    assert value(later, "gitscale_errors_total", kind="config") == 1
    assert (value(later, "gitscale_set_last_read_timestamp_seconds", set="linux") or 0) > read


def test_a_set_removed_from_the_config_loses_its_series_counters_included(
        tmp_path: Path) -> None:
    """No label grows with the months: a set renamed or removed takes every series it had
    with it, its writes counter too (the others are labelled by fixed words)."""
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 20}",
                                        "gpu": "{minReplicas: 0, maxReplicas: 20}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "sets/gpu.yaml": RUNNERSET.format(name="gpu", replicas=0),
        "demand.yaml": "linux: {queued: 2, running: 0}\ngpu: {queued: 1, running: 0}\n",
    })
    loop = Loop(checkout)
    try:
        first = loop.after_passes(1)
        (checkout / "gitscale.yaml").write_text(
            simple_config({"linux-x64": "{minReplicas: 0, maxReplicas: 20}"})
            .replace("sets/linux-x64.yaml", "sets/linux.yaml"))
        (checkout / "demand.yaml").write_text("linux-x64: {queued: 3, running: 0}\n")
        git(checkout, "commit", "-qam", "rename linux, drop gpu")
        git(checkout, "push", "-q")
        later = eventually(lambda: (s := scrape(loop.port)[2]) and value(
            s, "gitscale_set_desired_replicas", set="linux-x64") == 3 and s)
    finally:
        loop.close()
    assert value(first, "gitscale_set_writes_total", set="gpu", reason="first-write") == 1
    sets = {dict(labels).get("set") for name, labels in later if name.startswith("gitscale_set_")}
    assert sets == {"linux-x64"}, sets


def test_run_metrics_listen_refuses_a_bad_address(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 20}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 2, running: 0}\n",
    })
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = run(capsys, "run", "--repo", str(checkout), "--max-passes", "1",
                           "--metrics-listen", f"127.0.0.1:{port}")
    assert code == 1 and f"error: --metrics-listen: cannot listen on 127.0.0.1:{port}" in err
    code, _, err = run(capsys, "run", "--repo", str(checkout), "--max-passes", "1",
                       "--metrics-listen", "nowhere")
    assert code == 1 and "error: --metrics-listen: 'nowhere' is not HOST:PORT" in err
    assert "Traceback" not in err
    assert git(tmp_path / "remote.git", "rev-list", "--count", "main") == "1"  # nothing written


@pytest.fixture()
def serve_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    yield make_repo(tmp_path, {
        "gitscale.yaml": CONFIG,
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "sets/gpu.yaml": RUNNERSET.format(name="gpu", replicas=0),
    })


def test_serve_metrics_count_deliveries_and_batches(serve_repo: Path) -> None:
    server = Server(serve_repo, window="1s")
    try:
        assert server.port is not None
        linux = ["self-hosted", "linux"]
        assert server.post(job(1, "queued", linux), delivery="d1")[0] == 202
        assert server.post(job(2, "queued", linux))[0] == 202
        assert server.post(job(1, "queued", linux), delivery="d1")[0] == 200  # redelivered
        assert server.post(job(3, "queued", linux), signature="sha256=00")[0] == 401
        assert server.post(b"{}")[0] == 400
        assert server.post(b"{}", event="ping")[0] == 200
        assert server.post(b"{}", event="push")[0] == 202
        samples = eventually(lambda: (s := scrape(server.port)[2]) and value(  # type: ignore[arg-type]
            s, "gitscale_set_desired_replicas", set="linux") == 2 and s)
    finally:
        server.close()
    deliveries = {result: value(samples, "gitscale_webhook_deliveries_total", result=result)
                  for result in ("accepted", "duplicate", "unauthorized", "bad_request", "ping",
                                 "ignored", "error")}
    assert deliveries == {"accepted": 2, "duplicate": 1, "unauthorized": 1, "bad_request": 1,
                          "ping": 1, "ignored": 1, "error": 0}
    # the sets claimed at start, then the jobs (in one window, or two when the posts straddle)
    pushed = int(git(serve_repo.parent / "remote.git", "rev-list", "--count", "main")) - 1
    assert value(samples, "gitscale_commits_total") == pushed >= 2
    assert value(samples, "gitscale_set_queued_jobs", set="linux") == 2
    assert value(samples, "gitscale_set_desired_replicas", set="gpu") == 0
    assert value(samples, "gitscale_set_queued_jobs", set="gpu") == 0
    assert (value(samples, "gitscale_passes_total", result="ok") or 0) >= 2  # start + window


def test_serve_metrics_on_a_port_of_their_own(serve_repo: Path) -> None:
    with socket.socket() as probe:  # a free port (the server binds it right after)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = Server(serve_repo, metrics_listen=f"127.0.0.1:{port}")
    try:
        assert server.port is not None
        assert scrape(server.port)[0] == 404  # no longer on the webhook port
        status, _, samples = scrape(port)
        assert status == 200
        assert value(samples, "gitscale_webhook_deliveries_total", result="accepted") == 0
        assert value(samples, "gitscale_set_desired_replicas", set="linux") == 0
    finally:
        server.close()
    with pytest.raises(OSError):  # the listener went with the server
        http.client.HTTPConnection("127.0.0.1", port, timeout=2).connect()


@pytest.mark.parametrize(("exc", "kind"), [
    pytest.param(ConfigError("gitscale.yaml", "bad", 3), "config", id="config"),
    pytest.param(DemandError("demand.yaml", "bad"), "demand", id="demand"),
    pytest.param(PushRejected("hook said no"), "push_rejected", id="push-rejected"),
    pytest.param(GitError("fetch failed"), "git", id="git"),
    pytest.param(OSError("disk full"), "unexpected", id="unexpected"),
])
def test_error_kinds(exc: BaseException, kind: str) -> None:
    assert error_kind(exc) == kind


README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_documents_every_metric_and_its_alerts_parse() -> None:
    import re

    import yaml

    from gitscale.controller.metrics import ControllerMetrics
    from gitscale.metrics import LoopMetrics

    text = README.read_text()
    documented = {name.removesuffix("_total")
                  for name in re.findall(r"^\| `(gitscale_\w+)` \|", text, re.MULTILINE)}
    defined = {family.name for metrics in (LoopMetrics(webhooks=True), ControllerMetrics())
               for family in metrics.registry.collect()}
    assert documented == defined
    block = text.split("kind: PodMonitor", 1)[1].split("```", 1)[0]
    rule = list(yaml.safe_load_all("kind: PodMonitor" + block))[1]
    exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    used = {n.removesuffix("_total") for e in exprs for n in re.findall(r"gitscale_\w+", e)}
    assert used and used <= defined
    assert any("gitscale_controller_runners_missing" in e for e in exprs)



def test_the_loop_alert_counts_a_pass_with_a_set_unread_as_landed() -> None:
    """One set's broken source makes every pass ``partial`` and holds last_success still while
    the other sets scale: an alert on that gauge would fire for as long as the set is broken.
    The loop's alert watches passes that landed (``ok`` and ``partial``); the set's own alert
    watches its last read."""
    import yaml

    text = README.read_text()
    block = text.split("kind: PodMonitor", 1)[1].split("```", 1)[0]
    rule = list(yaml.safe_load_all("kind: PodMonitor" + block))[1]
    alerts = {r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert "gitscale_last_success_timestamp_seconds" not in "".join(alerts.values())
    loop = alerts["GitscaleLoopStuck"]
    assert "gitscale_passes_total" in loop and 'result=~"ok|partial"' in loop
    assert "gitscale_set_last_read_timestamp_seconds" in alerts["GitscaleSetDemandUnread"]

def test_the_scaffolded_deployments_serve_metrics_off_the_service(tmp_path: Path,
                                                                 capsys) -> None:  # type: ignore[no-untyped-def]
    import yaml

    assert run(capsys, "init", str(tmp_path / "c"), "--gitops", "flux",
               "--run-in", "cluster")[0] == 0
    scaler = tmp_path / "c" / "deploy" / "scaler"
    for name in ("deployment-run.yaml", "deployment-serve.yaml"):
        pod = yaml.safe_load((scaler / name).read_text())["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        args = container["args"]
        assert args[args.index("--metrics-listen") + 1] == "0.0.0.0:9090"
        assert {"name": "metrics", "containerPort": 9090} in container["ports"]
    service = yaml.safe_load((scaler / "service-serve.yaml").read_text())
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]


def exposed_names() -> set[str]:
    """Every series name the loop's and the controller's registries can expose: a counter only
    as ``_total``, a histogram as itself and its ``_bucket``/``_count``/``_sum``."""
    from gitscale.controller.metrics import ControllerMetrics
    from gitscale.metrics import LoopMetrics

    names: set[str] = set()
    for metrics in (LoopMetrics(webhooks=True), ControllerMetrics()):
        for family in metrics.registry.collect():
            if family.type == "counter":
                names.add(family.name + "_total")
            elif family.type == "histogram":
                names |= {family.name + s for s in ("", "_bucket", "_count", "_sum")}
            else:
                names.add(family.name)
    return names


def test_every_metric_named_in_docs_and_templates_exists() -> None:
    import re

    root = README.parent
    texts = [README, root / "CONTRIBUTING.md", *sorted((root / "docs").rglob("*.md")),
             *sorted((root / "gitscale" / "commands").glob("*.py"))]  # init's templates
    named = {(str(path.relative_to(root)), name) for path in texts
             for name in re.findall(r"\bgitscale_[a-z0-9_]+", path.read_text())}
    assert any(name == "gitscale_passes_total" for _, name in named)
    exposed = exposed_names()
    assert {(p, n) for p, n in named if n not in exposed} == set()


def test_the_name_check_catches_a_metric_that_does_not_exist() -> None:
    assert "gitscale_passes" not in exposed_names()  # the family: exposed as _total only
    assert "gitscale_passes_total" in exposed_names()
