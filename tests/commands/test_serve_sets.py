"""`gitscale serve --set NAME`: only the named sets are served (routing, resync, the batch and
the reservations file's ``served:``); the other github sets stay with `run`/`reconcile`. Real
deliveries to the real server on 127.0.0.1, real commits on a bare remote, the fake GitHub of
tests/demand for the resync."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from tests.commands.test_serve import SECRET, Server, job, wait_for_commit
from tests.demand.conftest import GH_TOKEN
from tests.demand.fake_github import FakeGitHub
from tests.helpers import RUNNERSET, git, make_repo, run
from tests.test_metrics import scrape, value

LINUX, GPU = ["self-hosted", "linux"], ["self-hosted", "gpu"]
LINUX_SET = """\
  - name: linux
    manifest: sets/linux.yaml
    source: {github: {org: octo-org, labels: [self-hosted, linux], token: {env: GH_TOKEN}}}
    policy: {minReplicas: 0, maxReplicas: 20, scaleDownDelay: 0s}
"""
GPU_SET = """\
  - name: gpu
    manifest: sets/gpu.yaml
    source: {github: {org: octo-org, labels: [self-hosted, gpu], token: {env: GH_TOKEN}}}
    policy: {minReplicas: 0, maxReplicas: 20, scaleDownDelay: 0s}
"""
BATCH_SET = """\
  - name: batch
    manifest: sets/batch.yaml
    source: {file: demand.yaml}
    policy: {minReplicas: 0, maxReplicas: 20}
"""
CONFIG = "runnerSets:\n" + LINUX_SET + GPU_SET + BATCH_SET


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    return make_repo(tmp_path, {
        "gitscale.yaml": CONFIG, "demand.yaml": "batch: {queued: 0, running: 0}\n",
        **{f"sets/{name}.yaml": RUNNERSET.format(name=name, replicas=0)
           for name in ("linux", "gpu", "batch")}})


def remote(repo: Path) -> Path:
    return repo.parent / "remote.git"


def shown(repo: Path, path: str) -> str:
    return git(remote(repo), "show", f"main:{path}")


def replicas(repo: Path, name: str) -> int:
    return int(yaml.safe_load(shown(repo, f"sets/{name}.yaml"))["spec"]["replicas"])


def state(repo: Path, path: str = ".gitscale/reservations.yaml"
          ) -> tuple[list[str], dict[str, set[int]]]:
    data = yaml.safe_load(shown(repo, path))
    return data["served"], {name: {r["job"] for r in entry["reservations"]}
                            for name, entry in data["sets"].items()}


def commits(repo: Path) -> int:
    return int(git(remote(repo), "rev-list", "--count", "main"))


def until(check: Callable[[], Any], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_only_the_named_set_is_served_and_the_loop_scales_the_other(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gpu_file = shown(repo, "sets/gpu.yaml")
    server = Server(repo, window="1s", sets=("linux",))
    try:
        before = commits(repo)
        for job_id, labels in ((1, LINUX), (2, LINUX), (3, GPU), (4, GPU)):
            assert server.post(job(job_id, "queued", labels))[0] == 202
        wait_for_commit(server, repo, before)
        assert server.port is not None
        samples = scrape(server.port)[2]
    finally:
        server.close()
    assert (replicas(repo, "linux"), replicas(repo, "gpu")) == (2, 0)
    assert shown(repo, "sets/gpu.yaml") == gpu_file  # not even a patch ID written
    assert state(repo) == (["linux"], {"linux": {1, 2}})
    message = git(remote(repo), "log", "-1", "--format=%B", "main")
    assert message.startswith("gitscale: linux 0→2") and "gpu" not in message.split("\n")[0]
    # gpu's jobs were accepted like any job no served set takes, and are not in the commit
    assert value(samples, "gitscale_webhook_deliveries_total", result="accepted") == 4
    assert "Gitscale-Events: queued=2" in message
    assert "served by webhooks: linux; left to `gitscale run` and `reconcile`: gpu" in \
        capsys.readouterr().err

    git(repo, "pull", "-q")
    (repo.parent / "what-if.yaml").write_text(
        "linux: {queued: 7, running: 0}\ngpu: {queued: 3, running: 0}\n"
        "batch: {queued: 1, running: 0}\n")
    code, out, _ = run(capsys, "reconcile", "--repo", str(repo), "--demand",
                       str(repo.parent / "what-if.yaml"))
    assert code == 0, out
    assert "= linux  served by webhooks (`gitscale serve`, .gitscale/reservations.yaml)" in out
    assert (replicas(repo, "linux"), replicas(repo, "gpu"), replicas(repo, "batch")) == (2, 3, 1)


@pytest.mark.usefixtures("quick_batches")
def test_a_batch_counts_its_events_in_words(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = Server(repo, window="1s", sets=("linux",))
    try:
        before = commits(repo)
        assert server.post(job(1, "queued", LINUX))[0] == 202
        wait_for_commit(server, repo, before)
    finally:
        server.close()
    assert " batch of 1 event: committed " in capsys.readouterr().err
    message = git(remote(repo), "log", "-1", "--format=%B", "main")
    assert "- reservations updated from 1 workflow_job event (queued=1)" in message


def test_serve_on_a_config_without_webhook_sets_says_deliveries_are_dropped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Every set polled (a demand file here): serve starts, as a github set may be added
    later, but says what it does with deliveries meanwhile rather than only "none"."""
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": "runnerSets:\n" + BATCH_SET,
        "demand.yaml": "batch: {queued: 0, running: 0}\n",
        "sets/batch.yaml": RUNNERSET.format(name="batch", replicas=0)})
    said = served_line(checkout, capsys)
    assert ("served by webhooks: none (gitscale.yaml has no set whose source takes webhooks, "
            "such as github: every delivery is answered 202 and dropped until it has)"
            in said), said


BUILDKITE_SET = """\
  - name: bk-linux
    manifest: sets/bk-linux.yaml
    source: {buildkite: {queue: linux, token: {env: TEST_BK_AGENT_TOKEN}}}
    policy: {minReplicas: 0, maxReplicas: 20}
"""


def test_serve_says_buildkite_sets_are_polled_not_served(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A Buildkite team's config: serve takes no Buildkite webhook, so its log names the
    Buildkite set as polled and who scales it, rather than only "none" (which reads as if
    serve scaled it), and `--set` on it says the same."""
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": "runnerSets:\n" + BUILDKITE_SET + LINUX_SET,
        "sets/bk-linux.yaml": RUNNERSET.format(name="bk-linux", replicas=0),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0)})
    said = served_line(checkout, capsys)
    assert ("served by webhooks: linux; polled, not served: bk-linux (buildkite) (their sources "
            "take no webhooks: `gitscale run` or `reconcile` scales them, beside serve)"
            in said), said
    code, out, err = run(capsys, "serve", "--repo", str(checkout), "--listen", "127.0.0.1:0",
                         "--secret-env", "TEST_WEBHOOK_SECRET", "--set", "bk-linux")
    assert (code, out) == (1, "")
    assert err.endswith("error: --set: 'bk-linux': its source (buildkite) takes no webhooks: it "
                        "is polled, by `gitscale run` or `reconcile` (beside serve); github sets "
                        "do (the sets of gitscale.yaml with a github source: linux)\n"), err


@pytest.mark.usefixtures("quick_batches")
def test_a_job_goes_to_the_first_served_set(repo: Path) -> None:
    """A job labelled only `self-hosted` matches every set: without --set it goes to linux,
    the first in gitscale.yaml; served only gpu, it is gpu's."""
    server = Server(repo, window="1s", sets=("gpu",))
    try:
        before = commits(repo)
        server.post(job(9, "queued", ["self-hosted"]))
        wait_for_commit(server, repo, before)
    finally:
        server.close()
    assert state(repo) == (["gpu"], {"gpu": {9}})
    assert (replicas(repo, "linux"), replicas(repo, "gpu")) == (0, 1)


@pytest.mark.parametrize("names, said", [
    pytest.param(["gpux"], "'gpux': not a runner set of gitscale.yaml (the sets of "
                 "gitscale.yaml with a github source: linux, gpu)", id="unknown"),
    pytest.param(["linux", "batch"], "'batch': its source (file) takes no webhooks: it is "
                 "polled, by `gitscale run` or `reconcile` (beside serve); github sets do (the "
                 "sets of gitscale.yaml with a github source: linux, gpu)", id="no-webhooks"),
    pytest.param(["Linux", ""], "'Linux': not a runner set of gitscale.yaml; '': not a runner "
                 "set of gitscale.yaml (the sets of gitscale.yaml with a github source: linux, "
                 "gpu)", id="two-bad"),
])
def test_a_set_serve_cannot_serve_is_refused_and_nothing_is_written(
        repo: Path, capsys: pytest.CaptureFixture[str], names: list[str], said: str) -> None:
    before = git(remote(repo), "rev-parse", "main")
    argv = [arg for name in names for arg in ("--set", name)]
    for where in (str(repo), str(remote(repo))):  # a checkout, and a clone of a URL
        code, out, err = run(capsys, "serve", "--repo", where, "--listen", "127.0.0.1:0",
                             "--secret-env", "TEST_WEBHOOK_SECRET", *argv)
        assert (code, out) == (1, "")
        assert err.endswith(f"error: --set: {said}\n"), err
        assert "Traceback" not in err
        # refused before serve says it listens: a reader of the log must not think it started
        assert "listening on" not in err and "metrics at" not in err, err
    assert git(remote(repo), "rev-parse", "main") == before
    assert not (repo / ".gitscale").exists() and git(repo, "status", "--porcelain") == ""


@pytest.mark.usefixtures("quick_batches")
def test_a_served_set_gone_from_gitscale_yaml_is_said_once_and_the_rest_served(
        repo: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """serve reloads gitscale.yaml per batch (here on a clone of the remote, as over a URL)."""

    def push_config(text: str) -> None:
        git(repo, "pull", "-q")
        (repo / "gitscale.yaml").write_text(text)
        git(repo, "commit", "-qam", "gitscale.yaml changed")
        git(repo, "push", "-q")

    def post(job_id: int, labels: list[str]) -> None:
        before = commits(repo)
        server.post(job(job_id, "queued", labels))
        wait_for_commit(server, repo, before)

    server = Server(remote(repo), window="1s", sets=("linux", "gpu"))
    try:
        post(1, LINUX)
        post(2, GPU)
        assert state(repo) == (["gpu", "linux"], {"linux": {1}, "gpu": {2}})
        push_config("runnerSets:\n" + LINUX_SET + BATCH_SET)
        post(3, LINUX)
        post(4, LINUX)
        assert state(repo) == (["linux"], {"linux": {1, 3, 4}})  # gpu's reservation dropped
        push_config(CONFIG)
        post(5, GPU)
        assert state(repo) == (["gpu", "linux"], {"linux": {1, 3, 4}, "gpu": {5}})
    finally:
        server.close()
    err = capfd.readouterr().err
    assert err.count("--set gpu: not a runner set of gitscale.yaml: not served; serving "
                     "linux") == 1, err
    assert err.count("--set gpu: served again") == 1
    assert "Traceback" not in err


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    monkeypatch.setenv("GH_TOKEN", GH_TOKEN)
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    with FakeGitHub(token=GH_TOKEN) as fake:
        fake.add_repo("octo-org", "octo-repo")
        fake.add_repo("gpu-org", "gpu-repo")
        yield fake


@pytest.mark.usefixtures("quick_batches")
def test_the_resync_reads_only_the_served_sets_scopes(github: FakeGitHub,
                                                      tmp_path: Path) -> None:
    api = f"apiUrl: '{github.url}', token: {{env: GH_TOKEN}}"
    config = f"""\
runnerSets:
  - name: linux
    manifest: sets/linux.yaml
    source: {{github: {{org: octo-org, labels: [self-hosted, linux], {api}}}}}
    policy: {{minReplicas: 0, maxReplicas: 20}}
  - name: gpu
    manifest: sets/gpu.yaml
    source: {{github: {{repos: [gpu-org/gpu-repo], labels: [self-hosted, gpu], {api}}}}}
    policy: {{minReplicas: 0, maxReplicas: 20}}
"""
    linux = github.add_run("octo-org/octo-repo", "queued", [("queued", LINUX)]).jobs[0]["id"]
    github.add_run("gpu-org/gpu-repo", "queued", [("queued", GPU)])
    repo = make_repo(tmp_path, {"gitscale.yaml": config,
                                "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
                                "sets/gpu.yaml": RUNNERSET.format(name="gpu", replicas=0)})
    server = Server(repo, window="1s", resync="1h", sets=("linux",))
    try:
        until(lambda: state(repo)[1] == {"linux": {linux}}, "no resync")
    finally:
        server.close()
    paths = [request.path for request in github.log]
    assert any("octo-org" in path for path in paths), paths
    assert not any("gpu-org" in path for path in paths), paths
    assert (replicas(repo, "linux"), replicas(repo, "gpu")) == (1, 0)


@pytest.mark.usefixtures("quick_batches")
def test_two_serves_with_their_own_files_share_a_repo(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    linux = Server(remote(repo), window="1s", sets=("linux",),
                   state_file=".gitscale/linux.yaml")
    gpu = Server(remote(repo), window="1s", sets=("gpu",), state_file=".gitscale/gpu.yaml")
    try:
        before = commits(repo)
        linux.post(job(1, "queued", LINUX))
        gpu.post(job(2, "queued", GPU))
        gpu.post(job(3, "queued", GPU))
        until(lambda: commits(repo) > before and replicas(repo, "linux") == 1
              and replicas(repo, "gpu") == 2, "not both landed")
    finally:
        linux.close()
        gpu.close()
    assert state(repo, ".gitscale/linux.yaml") == (["linux"], {"linux": {1}})
    assert state(repo, ".gitscale/gpu.yaml") == (["gpu"], {"gpu": {2, 3}})
    git(repo, "pull", "-q")
    (repo.parent / "what-if.yaml").write_text(
        "linux: {queued: 7, running: 0}\ngpu: {queued: 7, running: 0}\n"
        "batch: {queued: 1, running: 0}\n")
    code, out, _ = run(capsys, "reconcile", "--repo", str(repo), "--demand",
                       str(repo.parent / "what-if.yaml"))
    assert code == 0, out
    assert "= linux  served by webhooks (`gitscale serve`, .gitscale/linux.yaml)" in out
    assert "= gpu    served by webhooks (`gitscale serve`, .gitscale/gpu.yaml)" in out
    assert (replicas(repo, "linux"), replicas(repo, "gpu"), replicas(repo, "batch")) == (1, 2, 1)

    # A third serve for a set another file lists under `served:` would undo its reservations.
    head = git(remote(repo), "rev-parse", "main")
    for argv, taken in ((["--set", "linux"], "linux already served by .gitscale/linux.yaml"),
                        ([], "gpu, linux already served by .gitscale/gpu.yaml, "
                             ".gitscale/linux.yaml")):
        code, _, err = run(capsys, "serve", "--repo", str(repo), "--listen", "127.0.0.1:0",
                           "--secret-env", "TEST_WEBHOOK_SECRET", *argv)
        assert code == 1 and f"error: --state-file: {taken} (another `gitscale serve`" in err, err
    assert git(remote(repo), "rev-parse", "main") == head


@pytest.mark.usefixtures("quick_batches")
def test_two_serves_on_one_file_the_overwritten_one_stops_writing(
        repo: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Each batch rewrites the whole file with its own sets: two serves with other sets on
    one file would drop each other's reservations on every batch. The second to start drops
    the first one's once (it cannot tell another serve from its own restart); the first then
    finds its sets gone from `served:` and writes nothing more."""
    linux = Server(remote(repo), window="1s", sets=("linux",))
    gpu = None
    try:
        before = commits(repo)
        linux.post(job(1, "queued", LINUX))
        wait_for_commit(linux, repo, before)
        gpu = Server(remote(repo), window="1s", sets=("gpu",))  # the same file
        assert state(repo) == (["gpu"], {})
        head = git(remote(repo), "rev-parse", "main")
        linux.post(job(2, "queued", LINUX))
        until(lambda: linux.health()["status"] == "degraded", "the first serve wrote on")
        error = linux.health()["last_error"]
        assert error.startswith(".gitscale/reservations.yaml: another writer changed its "
                                "`served:` to gpu, without linux that this serve scales"), error
        assert "must each have their own --state-file" in error
        assert git(remote(repo), "rev-parse", "main") == head
    finally:
        if gpu is not None:
            gpu.close()
        linux.close()
    assert state(repo) == (["gpu"], {})
    err = capfd.readouterr().err
    assert "no longer served here: linux (reservations dropped; a `gitscale serve` that " \
        "serves them needs its own --state-file)" in err


def test_serve_without_a_webhook_set_has_no_resync_to_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Only a Buildkite set (polled): with the default resync serve said `resync with GitHub
    every 5m`, then `resync: reservations match GitHub (0 sets)` after each poll of nothing.
    It now says there is no resync to run, and logs no resync at all."""
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": "runnerSets:\n" + BUILDKITE_SET,
        "sets/bk-linux.yaml": RUNNERSET.format(name="bk-linux", replicas=0)})
    # (the first resync is due at start: its listing lands within 2 windows)
    log = served_line(checkout, capsys, resync="5m", settle=3.0)
    assert "; one commit per 1s window; no resync to run (no served set takes webhooks; every " \
           "5m once one does); a change to the reservations alone is held up to 5m for a " \
           "scaling commit (--hold)\n" in log, log
    assert "GitHub" not in log.replace("workflow_job", ""), log
    assert "resync" not in log.replace("no resync to run", ""), log


def served_line(checkout: Path, capsys: pytest.CaptureFixture[str], *, resync: str = "0",
                settle: float = 0.0) -> str:
    """What serve logged, up to the line that says which sets it serves (a delivery sent
    ``settle`` seconds after the start)."""
    server = Server(checkout, window="1s", resync=resync)
    said: list[str] = []
    try:
        time.sleep(settle)
        assert server.post(job(1, "queued", LINUX))[0] == 202
        until(lambda: said.append(capsys.readouterr().err) or "served by webhooks" in "".join(said),
              "serve never said what it serves")
    finally:
        server.close()
    return "".join(said)
