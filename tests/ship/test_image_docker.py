"""The image itself, run by Docker: opt-in, only with ``-m image`` and $GITSCALE_TEST_IMAGE set.

``GITSCALE_TEST_IMAGE=REF`` tests an image already built (``docker build -t REF .``);
``GITSCALE_TEST_IMAGE=build`` builds one from this checkout first (the legacy builder, so no
BuildKit frontend is pulled; ``GITSCALE_TEST_PYTHON_IMAGE`` replaces the base, e.g. a mirror's).
Each container runs as the manifests run it: the image's user, a read-only root filesystem,
writable /tmp and state cache only; the servers it talks to are this process's, on loopback
(``--network host``). README, "Releasing and the image", says how to run it.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from gitscale import __version__
from gitscale.commands.demo import build_demo_repo
from tests.commands.test_serve import CONFIG as SERVE_CONFIG
from tests.commands.test_serve import SECRET, job
from tests.controller.github_fake import FakeGitHub
from tests.helpers import RUNNERSET, git, make_repo, wait_for
from tests.integration.conftest import http_git_server
from tests.integration.git_http import GitHTTPServer
from tests.kubeapi.server import KubeAPIServer, start_api_server
from tests.ship.shipfiles import ROOT

__all__ = ["http_git_server"]  # the fixture, shared with tests/integration
pytestmark = [
    pytest.mark.image,
    pytest.mark.skipif(not os.environ.get("GITSCALE_TEST_IMAGE"),
                       reason="needs GITSCALE_TEST_IMAGE (an image, or 'build') and Docker"),
]

UID = "65532"  # the Dockerfile's USER and the manifests' runAsUser
# How init's manifests run every gitscale container (deploy/scaler, deploy/controller).
LOCKED_DOWN = ("--read-only", "--network", "host", "--cap-drop", "ALL",
               "--security-opt", "no-new-privileges")


def docker(*argv: str, timeout: float = 120, check: bool = True,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(argv)} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
    return proc


@pytest.fixture(scope="session")
def image() -> str:
    if shutil.which("docker") is None or docker("info", check=False).returncode != 0:
        pytest.fail("GITSCALE_TEST_IMAGE is set but no Docker daemon answers `docker info`")
    wanted = os.environ["GITSCALE_TEST_IMAGE"]
    if wanted != "build":
        return wanted
    ref = f"gitscale-test:{__version__}"
    args = ["build", "--network", "host", "--build-arg", f"VERSION={__version__}", "-t", ref]
    if base := os.environ.get("GITSCALE_TEST_PYTHON_IMAGE"):
        args += ["--build-arg", f"PYTHON_IMAGE={base}"]
    docker(*args, str(ROOT), timeout=1800, env={"DOCKER_BUILDKIT": "0"})
    return ref


@pytest.fixture
def volume() -> Iterator[str]:
    """A named volume for the state cache, owned by the image's user as a fsGroup makes it."""
    name = f"gitscale-test-cache-{os.getpid()}-{time.monotonic_ns()}"
    docker("volume", "create", name)
    try:
        yield name
    finally:
        docker("volume", "rm", "-f", name, check=False)


def run(image: str, *argv: str, volume: str | None = None, extra: tuple[str, ...] = (),
        timeout: float = 180) -> subprocess.CompletedProcess[str]:
    mounts = ("--tmpfs", "/tmp:exec") + (("-v", f"{volume}:/var/cache/gitscale")
                                         if volume else ())
    return docker("run", "--rm", *LOCKED_DOWN, *mounts, *extra, image, *argv, timeout=timeout,
                  check=False)


def test_the_image_is_the_version_it_names_and_runs_as_its_user(image: str) -> None:
    config = json.loads(docker("image", "inspect", image).stdout)[0]["Config"]
    assert config["Entrypoint"] == ["gitscale"]
    assert config["User"] == f"{UID}:{UID}"
    assert config["Env"].count("GITSCALE_CACHE_DIR=/var/cache/gitscale") == 1
    version = run(image, "--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"gitscale, version {__version__}")
    if os.environ["GITSCALE_TEST_IMAGE"] == "build":
        assert config["Labels"]["org.opencontainers.image.version"] == __version__
    whoami = run(image, "-c", "import os; print(os.getuid(), os.getgid())",
                 extra=("--entrypoint", "python"))
    assert whoami.stdout.split() == [UID, UID]
    git_version = run(image, "--version", extra=("--entrypoint", "git"))
    assert git_version.returncode == 0 and git_version.stdout.startswith("git version ")


def test_demo_runs_on_a_read_only_root_filesystem(image: str, volume: str) -> None:
    proc = run(image, "demo", volume=volume, extra=("--workdir", "/tmp"))
    assert proc.returncode == 0, proc.stderr
    assert "gitscale: linux-x64 1→5, gpu 2→0" in proc.stdout


def served(server: GitHTTPServer, remote: Path) -> Path:
    """``remote`` served by ``server`` as config.git, pushes allowed."""
    bare = server.project_root / "config.git"
    git(remote.parent, "clone", "-q", "--bare", str(remote), str(bare))
    git(bare, "config", "http.receivepack", "true")
    return bare


def test_reconcile_pushes_over_https_shaped_http_with_the_token_from_the_environment(
        image: str, volume: str, tmp_path: Path, http_git_server: GitHTTPServer) -> None:
    """The CronJob's run: clone --repo URL into /tmp, commit, push with GITSCALE_GIT_TOKEN
    (git's askpass script under /tmp), the state cache on its volume; no token in the output."""
    server, token = http_git_server, http_git_server.token
    (tmp_path / "demo").mkdir()
    bare = served(server, build_demo_repo(tmp_path / "demo")[0])
    env_token = ("-e", "GITSCALE_GIT_TOKEN")
    os.environ["GITSCALE_GIT_TOKEN"] = token  # by name only: never in docker's argv
    try:
        first = run(image, "reconcile", "--repo", server.url(), volume=volume, extra=env_token)
        again = run(image, "reconcile", "--repo", server.url(), volume=volume, extra=env_token)
    finally:
        del os.environ["GITSCALE_GIT_TOKEN"]
    assert first.returncode == 0, first.stderr
    assert again.returncode == 0, again.stderr
    subject = git(bare, "log", "-1", "--format=%s", "main")
    assert subject == "gitscale: linux-x64 1→5, gpu 2→0"
    assert "no change: nothing to commit" in again.stdout + again.stderr
    for proc in (first, again):
        assert token not in proc.stdout + proc.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_controller_makes_runner_pods_that_start_their_runner(
        image: str, tmp_path: Path) -> None:
    """The controller from the image against a Kubernetes-shaped API server: a GitHub set
    (its runner container gives no command: the controller starts run.sh) and a Buildkite one
    (the agent image's own entrypoint, the token from its Secret); SIGTERM ends it with 0."""
    api: KubeAPIServer = start_api_server()
    github = FakeGitHub("ghp-image-test").start()
    name = f"gitscale-test-controller-{os.getpid()}"
    try:
        api.create_object("secrets", {"metadata": {"name": "gh-creds"}, "data": {
            "github_token": base64.b64encode(b"ghp-image-test").decode()}})
        api.create_object("secrets", {"metadata": {"name": "bk-token"}, "data": {
            "token": base64.b64encode(b"bk-agent-token").decode()}})
        for set_name, spec in (("gh", {
                "platform": "github",
                "github": {"configURL": f"{github.url}/acme", "labels": ["linux"],
                           "credentialsSecret": "gh-creds"},
                "template": {"spec": {"containers": [
                    {"name": "runner", "image": "ghcr.io/actions/actions-runner:2.336.0"}]}}}),
                ("bk", {
                    "platform": "buildkite",
                    "buildkite": {"queue": "linux", "agentTokenSecret": "bk-token"},
                    "template": {"spec": {"containers": [
                        {"name": "agent", "image": "buildkite/agent:3.137.0"}]}}})):
            api.create_object("runnersets", {
                "apiVersion": "gitscale.dev/v1alpha1", "kind": "RunnerSet",
                "metadata": {"name": set_name, "namespace": "default"},
                "spec": {**spec, "replicas": 2, "patchID": 1,
                         "effectiveTime": "2026-11-27T12:00:00Z"}})
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        kubeconfig.chmod(0o644)  # read by the image's user through the bind mount
        port = _free_port()
        docker("run", "-d", "--name", name, *LOCKED_DOWN, "-v", f"{kubeconfig}:/kube/config:ro",
               "-e", "KUBECONFIG=/kube/config", image, "controller", "--namespace", "default",
               "--health-port", str(port))
        pods = wait_for(lambda: (lambda p: p if len(p) == 4 else None)(
            api.objects("pods", "default")), timeout=60, interval=0.2)
        containers = {p["metadata"]["name"].split("-")[0]: p["spec"]["containers"][0]
                      for p in pods}
        assert containers["gh"]["command"] == ["/home/runner/run.sh"]
        assert any(e["name"] == "ACTIONS_RUNNER_INPUT_JITCONFIG" for e in containers["gh"]["env"])
        assert "command" not in containers["bk"]  # buildkite/agent's entrypoint starts it
        token_env = next(e for e in containers["bk"]["env"] if e["name"] == "BUILDKITE_AGENT_TOKEN")
        assert token_env["valueFrom"]["secretKeyRef"] == {"name": "bk-token", "key": "token"}
        status = wait_for(lambda: (api.get_object("runnersets", "gh") or {}).get("status"),
                          timeout=30, interval=0.2)
        assert status["observedPatchID"] == 1
        assert _get(port, "/healthz") == 200
        docker("stop", "--time", "30", name, timeout=60)
        state = json.loads(docker("inspect", name).stdout)[0]["State"]
        assert state["ExitCode"] == 0
        logs = docker("logs", name)
        assert "ghp-image-test" not in logs.stdout + logs.stderr
    finally:
        docker("rm", "-f", name, check=False)
        github.stop()
        api.stop()


def test_serve_lands_a_signed_delivery_and_stops_cleanly(
        image: str, volume: str, tmp_path: Path, http_git_server: GitHTTPServer) -> None:
    """`serve` from the image: a signed `workflow_job` delivery becomes a commit pushed over
    HTTP with the token from the environment; `/healthz` answers; SIGTERM ends it with 0; the
    webhook secret and the tokens are in none of its output."""
    checkout = make_repo(tmp_path / "config", {
        "gitscale.yaml": SERVE_CONFIG, "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "sets/gpu.yaml": RUNNERSET.format(name="gpu", replicas=0)})
    server, token = http_git_server, http_git_server.token
    bare = served(server, checkout.parent / "remote.git")
    name, port = f"gitscale-test-serve-{os.getpid()}", _free_port()
    secrets = {"GITSCALE_GIT_TOKEN": token, "GITHUB_WEBHOOK_SECRET": SECRET,
               "GH_TOKEN": "ghp-never-used-" + os.urandom(8).hex()}
    try:
        docker("run", "-d", "--name", name, *LOCKED_DOWN, "--tmpfs", "/tmp:exec",
               "-v", f"{volume}:/var/cache/gitscale", *(a for k in secrets for a in ("-e", k)),
               image, "serve", "--repo", server.url(), "--listen", f"127.0.0.1:{port}",
               "--window", "1s", "--resync", "0", env=secrets)
        wait_for(lambda: _get(port, "/healthz") == 200, timeout=60, interval=0.3)
        body = job(4242, "queued", ["self-hosted", "linux"])
        digest = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/webhook", data=body, method="POST", headers={
                "X-GitHub-Event": "workflow_job", "X-GitHub-Delivery": "d-1",
                "X-Hub-Signature-256": f"sha256={digest}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status in (200, 202)
        subject = wait_for(lambda: (lambda s: s if "linux 0→1" in s else None)(
            git(bare, "log", "-1", "--format=%s", "main")), timeout=60,
            interval=0.3)
        assert subject.startswith("gitscale: linux 0→1")
        docker("stop", "--time", "30", name, timeout=60)
        assert json.loads(docker("inspect", name).stdout)[0]["State"]["ExitCode"] == 0
        logs = docker("logs", name)
        for value in secrets.values():
            assert value not in logs.stdout + logs.stderr
    finally:
        docker("rm", "-f", name, check=False)


def _get(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return int(answer.status)
    except OSError:
        return 0


def test_run_loops_with_the_token_from_a_file_and_stops_cleanly(
        image: str, volume: str, tmp_path: Path, http_git_server: GitHTTPServer) -> None:
    """`run` from the image as deploy/scaler/deployment-run.yaml runs it: the git token from a
    file (GITSCALE_GIT_TOKEN_FILE, a mounted Secret), passes that push, `/healthz` on the
    metrics port (the liveness probe), exit 0 on `docker stop`; the token in none of its
    output."""
    server, token = http_git_server, http_git_server.token
    (tmp_path / "demo").mkdir()
    bare = served(server, build_demo_repo(tmp_path / "demo")[0])
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "token").write_text(token)
    (secret / "token").chmod(0o644)  # read by the image's user through the bind mount
    name, port = f"gitscale-test-run-{os.getpid()}", _free_port()
    try:
        docker("run", "-d", "--name", name, *LOCKED_DOWN, "--tmpfs", "/tmp:exec",
               "-v", f"{volume}:/var/cache/gitscale", "-v", f"{secret}:/var/run/secrets/git:ro",
               "-e", "GITSCALE_GIT_TOKEN_FILE=/var/run/secrets/git/token", image, "run",
               "--repo", server.url(), "--interval", "2s",
               "--metrics-listen", f"127.0.0.1:{port}")
        subject = wait_for(lambda: (lambda s: s if "linux-x64 1→5" in s else None)(
            git(bare, "log", "-1", "--format=%s", "main")), timeout=90, interval=0.3)
        assert subject == "gitscale: linux-x64 1→5, gpu 2→0"
        assert wait_for(lambda: _get(port, "/healthz") == 200, timeout=30, interval=0.3)
        docker("stop", "--time", "60", name, timeout=90)
        assert json.loads(docker("inspect", name).stdout)[0]["State"]["ExitCode"] == 0
        logs = docker("logs", name)
        assert "pass at " in logs.stdout + logs.stderr
        assert token not in logs.stdout + logs.stderr
    finally:
        docker("rm", "-f", name, check=False)
