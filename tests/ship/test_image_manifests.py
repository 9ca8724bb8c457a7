"""The manifests `init --run-in cluster` writes, run by Docker from the image as a kubelet would
run them (tests/ship/kubelet.py): opt-in, with test_image_docker.py (``-m image`` and
$GITSCALE_TEST_IMAGE).

Each pod is the manifest's own: its args, env, mounts (the Secrets of init's printed steps as
files), user, read-only root and capabilities; only the image is the one under test, and the
servers it talks to are this process's, on 127.0.0.1: git over HTTP with a token, GitHub's
jobs API, Flux's receiver and a Kubernetes-shaped API server over TLS. The config gitscale
init wrote is edited only where a cluster's name would not resolve here (the GitHub API's
address, Flux's receiver, the RunnerSet's configURL).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import shutil
import socket
import ssl
import subprocess
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from tests.commands.test_serve import job
from tests.controller.github_fake import FakeGitHub as FakeRunnersAPI
from tests.demand.fake_buildkite import FakeBuildkite, metrics
from tests.demand.fake_github import FakeGitHub
from tests.helpers import git, run, wait_for
from tests.integration.git_http import GitHTTPServer
from tests.kubeapi.server import KubeAPIServer, start_api_server
from tests.notify.engines import Application, FakeArgoCD, FakeFlux, Receiver
from tests.ship.kubelet import Kubelet, ServiceAccount, environment, shown
from tests.ship.test_image_docker import docker, http_git_server, image

__all__ = ["http_git_server", "image"]  # fixtures
pytestmark = [
    pytest.mark.image,
    pytest.mark.skipif(not os.environ.get("GITSCALE_TEST_IMAGE"),
                       reason="needs GITSCALE_TEST_IMAGE (an image, or 'build') and Docker"),
]

ORG, FLUX_TOKEN, GITHUB_TOKEN = "acme", "flux-receiver-token", "ghp-scaler-token"
WEBHOOK_SECRET = "webhook-secret-value"
AGENT_TOKEN = "bkua-scaler-agent-token"
ARGOCD_SECRET = "argocd-webhook-secret"


@dataclass
class Scaffold:
    root: Path  # init's checkout
    bare: Path  # its remote, served by the git HTTP server
    kubelet: Kubelet
    github: FakeGitHub
    flux: FakeFlux
    buildkite: FakeBuildkite
    argocd: FakeArgoCD

    @property
    def notified(self) -> list[str]:
        """What the GitOps engine was asked to sync: Flux's GitRepositories, Argo CD's
        Applications."""
        return self.flux.reconciled + self.argocd.refreshed

    def pod(self, path: str) -> dict[str, Any]:
        """The pod template of a manifest init wrote (a Deployment's, a CronJob's Job's)."""
        obj = yaml.safe_load((self.root / path).read_text())
        spec = obj["spec"]
        template = (spec["jobTemplate"]["spec"]["template"] if obj["kind"] == "CronJob"
                    else spec["template"])
        return {"spec": template["spec"], "manifest": obj}

    def subject(self) -> str:
        return git(self.bare, "log", "-1", "--format=%s", "main")

    def start(self, path: str, name: str) -> dict[str, Any]:
        """The manifest's pod, started in the background; its ports must be free."""
        pod = self.pod(path)
        for port in _listens(pod):
            assert _free(port), f"port {port} of {path} is taken on this machine"
        argv, secret_env = self.kubelet.argv(pod, name)
        proc = subprocess.run(["docker", "run", "-d", *argv], capture_output=True, text=True,
                              env=environment(secret_env), timeout=120)
        assert proc.returncode == 0, f"{shown(argv)}\n{proc.stderr}"
        return pod

    def probe(self, pod: dict[str, Any], kind: str) -> int:
        """The status of the pod's ``kind`` probe (livenessProbe, readinessProbe), 0 when
        nothing answers."""
        (container,) = pod["spec"]["containers"]
        http = container[kind]["httpGet"]
        url = f"http://127.0.0.1:{self.kubelet.port(pod, http['port'])}{http['path']}"
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return int(answer.status)
        except OSError as exc:
            return int(getattr(exc, "code", 0) or 0)

    def stop(self, pod: dict[str, Any], name: str) -> tuple[int, str]:
        """SIGTERM, then the pod's grace period, as the kubelet stops it: its exit code and
        its log."""
        grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
        docker("stop", "--time", str(grace), name, timeout=grace + 30)
        code = json.loads(docker("inspect", name).stdout)[0]["State"]["ExitCode"]
        logs = docker("logs", name)
        return int(code), logs.stdout + logs.stderr


def _listens(pod: dict[str, Any]) -> list[int]:
    (container,) = pod["spec"]["containers"]
    return [int(p["containerPort"]) for p in container.get("ports", [])]


def _free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


@contextmanager
def scaffolded(root: Path, capsys: pytest.CaptureFixture[str], image: str,
               server: GitHTTPServer, platform: str = "github",
               gitops: str = "flux") -> Iterator[Scaffold]:
    """init's repo (the scaler in the cluster) pushed to the git HTTP server, jobs queued
    for its set (three on GitHub, or Buildkite's reference queue: 3 scheduled, 1 running), and
    the Secrets of init's steps."""
    options = (["--github-org", ORG] if platform == "github" else
               ["--platform", "buildkite", "--buildkite-org", ORG])
    code, _, err = run(capsys, "init", str(root), "--gitops", gitops, *options,
                       "--repo-url", server.url(), "--run-in", "cluster")
    assert code == 0, err
    with FakeGitHub(token=GITHUB_TOKEN) as github, FakeBuildkite(token=AGENT_TOKEN) as bk, \
            FakeFlux(Receiver("gitscale", "flux-system", FLUX_TOKEN)) as flux, \
            FakeArgoCD(ARGOCD_SECRET, Application("gitscale", server.url()), tls=True) as argocd:
        repo = github.add_repo(ORG, "app")
        github.add_run(repo, "queued", [("queued", ["self-hosted", "linux"])] * 3)
        bk.queues["default"] = metrics("TestCollectorWithSomeJobsAndAgentsForAQueue")
        config = root / "gitscale.yaml"
        text = config.read_text()
        text = text.replace(f"        org: {ORG}", f"        org: {ORG}\n        apiUrl: {github.url}",
                            1).replace("        queue: default",
                                       f"        queue: default\n        apiUrl: {bk.url}", 1)
        text = text.replace("http://webhook-receiver.flux-system.svc.cluster.local", flux.base)
        text = text.replace("https://argocd-server.argocd.svc.cluster.local", argocd.base)
        config.write_text(text)
        git(root, "commit", "-qam", "the test's addresses of GitHub, Buildkite and the engine")
        bare = server.project_root / "config.git"
        git(root.parent, "clone", "-q", "--bare", str(root), str(bare))
        git(bare, "config", "http.receivepack", "true")
        prefix = f"gs-{os.getpid()}-"
        kubelet = Kubelet(image, root.parent / "kubelet", "gitscale-system", claims=prefix,
                          secrets={"gitscale-git": {"token": server.token},
                                   "gitscale-scaler": {"github_token": GITHUB_TOKEN,
                                                       "buildkite_agent_token": AGENT_TOKEN},
                                   "gitscale-notify": {"FLUX_RECEIVER_TOKEN": FLUX_TOKEN,
                                                       "ARGOCD_WEBHOOK_SECRET": ARGOCD_SECRET},
                                   "gitscale-webhook": {"secret": WEBHOOK_SECRET}})
        try:
            yield Scaffold(root, bare, kubelet, github, flux, bk, argocd)
        finally:
            names = [n for n in docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
                     if n.startswith(prefix)]
            if names:
                docker("rm", "-f", *names, check=False)
            volumes = [v for v in docker("volume", "ls", "-q").stdout.split()
                       if v.startswith(prefix)]
            if volumes:
                docker("volume", "rm", "-f", *volumes, check=False)


@pytest.fixture
def scaffold(tmp_path: Path, capsys: pytest.CaptureFixture[str], image: str,
             http_git_server: GitHTTPServer) -> Iterator[Scaffold]:
    with scaffolded(tmp_path / "config", capsys, image, http_git_server) as made:
        yield made


@pytest.mark.parametrize(("platform", "gitops", "first", "engine"), [
    pytest.param("github", "flux", "gitscale: linux 0→3", "GitRepository/gitscale",
                 id="github-flux"),
    pytest.param("buildkite", "argocd", "gitscale: linux 0→4", "gitscale",
                 id="buildkite-argocd"),
])
def test_the_cronjobs_pod_reconciles_pushes_and_notifies_the_engine(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], image: str,
        http_git_server: GitHTTPServer, platform: str, gitops: str, first: str,
        engine: str) -> None:
    """Argo CD's notify goes to its server over TLS with a self-signed certificate, as init
    writes it (insecureSkipTLSVerify), signed with `gitscale-notify`'s secret."""
    with scaffolded(tmp_path / "config", capsys, image, http_git_server, platform,
                    gitops) as scaffold:
        cronjob(scaffold, first)
        assert scaffold.notified == [engine]
        if platform == "github":
            assert any(entry.authorization == f"Bearer {GITHUB_TOKEN}"
                       for entry in scaffold.github.log), "the source read GitHub with its token"
        else:
            assert any(entry.path.startswith("/v3/metrics/queue")
                       and entry.authorization == f"Token {AGENT_TOKEN}"
                       for entry in scaffold.buildkite.log), "the source read the queue"


def cronjob(scaffold: Scaffold, first: str) -> None:
    """Two Jobs of the CronJob: the first commits ``first``; the second finds nothing to
    do."""
    pod = scaffold.pod("deploy/scaler/cronjob.yaml")
    secrets = scaffold.kubelet.secrets
    for attempt, want in ((1, first), (2, None)):
        name = f"gs-{os.getpid()}-reconcile-{attempt}"
        argv, secret_env = scaffold.kubelet.argv(pod, name)
        deadline = int(pod["manifest"]["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"])
        proc = subprocess.run(["docker", "run", "--rm", *argv], capture_output=True, text=True,
                              env=environment(secret_env), timeout=deadline)
        said = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"{shown(argv)}\n{said}"
        if want:
            assert scaffold.subject() == want
        else:  # the second Job: nothing to do, and the state cache (the claim) was kept
            assert "no change: nothing to commit" in said
        for values in secrets.values():
            for value in values.values():
                assert value not in said


def test_the_run_deployments_pod_loops_answers_its_probe_and_stops_in_its_grace(
        scaffold: Scaffold) -> None:
    name = f"gs-{os.getpid()}-run"
    pod = scaffold.start("deploy/scaler/deployment-run.yaml", name)
    wait_for(lambda: scaffold.subject() == "gitscale: linux 0→3", timeout=90, interval=0.3)
    assert wait_for(lambda: scaffold.probe(pod, "livenessProbe") == 200, timeout=30,
                    interval=0.3)
    code, logs = scaffold.stop(pod, name)
    assert code == 0, logs
    assert "pass at " in logs and GITHUB_TOKEN not in logs


def test_the_serve_deployments_pod_takes_a_signed_delivery(scaffold: Scaffold) -> None:
    name = f"gs-{os.getpid()}-serve"
    pod = scaffold.start("deploy/scaler/deployment-serve.yaml", name)
    assert wait_for(lambda: scaffold.probe(pod, "readinessProbe") == 200, timeout=60,
                    interval=0.3)
    body = job(4242, "queued", ["self-hosted", "linux"], repo=f"{ORG}/app")
    digest = hmac.new(WEBHOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
    port = scaffold.kubelet.port(pod, "http")
    request = urllib.request.Request(f"http://127.0.0.1:{port}/webhook", data=body, headers={
        "X-GitHub-Event": "workflow_job", "X-GitHub-Delivery": "d-1",
        "X-Hub-Signature-256": f"sha256={digest}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status in (200, 202)
    wait_for(lambda: "linux 0→" in scaffold.subject(), timeout=60, interval=0.3)
    code, logs = scaffold.stop(pod, name)
    assert code == 0, logs
    assert WEBHOOK_SECRET not in logs and GITHUB_TOKEN not in logs


def _tls(api: KubeAPIServer, directory: Path) -> Path:
    """The API server over TLS, with a certificate for 127.0.0.1: its CA certificate."""
    cert, key = directory / "apiserver.crt", directory / "apiserver.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    api.socket = context.wrap_socket(api.socket, server_side=True)
    return cert


def test_the_controller_deployment_runs_in_cluster_and_makes_runner_pods(
        scaffold: Scaffold, tmp_path: Path) -> None:
    """The controller's Deployment from the service account's in-cluster config (token, CA,
    KUBERNETES_SERVICE_HOST), leader election in its own namespace, and the RunnerSet init
    wrote, as Argo CD or Flux applies it after a scaling commit."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not on PATH")
    api = start_api_server()
    runners = FakeRunnersAPI("ghp-controller-token").start()
    try:
        ca = _tls(api, tmp_path)
        scaffold.kubelet.service_account = ServiceAccount("sa-token", ca, "127.0.0.1",
                                                         int(api.server_address[1]))
        runnerset = yaml.safe_load(
            (scaffold.root / "clusters/prod/runnersets/linux.yaml").read_text())
        namespace = runnerset["metadata"]["namespace"]
        runnerset["spec"]["github"]["configURL"] = f"{runners.url}/{ORG}"
        runnerset["spec"].update(replicas=2, patchID=1, effectiveTime="2026-11-27T12:00:00Z")
        api.create_object("runnersets", runnerset, namespace)
        secret = runnerset["spec"]["github"]["credentialsSecret"]
        api.create_object("secrets", {"metadata": {"name": secret}, "data": {
            "github_token": base64.b64encode(b"ghp-controller-token").decode()}}, namespace)
        name = f"gs-{os.getpid()}-controller"
        pod = scaffold.start("clusters/prod/gitscale-system/deployment.yaml", name)
        pods = wait_for(lambda: (lambda p: p if len(p) == 2 else None)(
            api.objects("pods", namespace)), timeout=90, interval=0.3)
        for runner in pods:
            (container,) = [c for c in runner["spec"]["containers"] if c["name"] == "runner"]
            assert container["command"] == ["/home/runner/run.sh"]
        assert api.get_object("leases", "gitscale-controller", "gitscale-system") is not None
        assert wait_for(lambda: scaffold.probe(pod, "readinessProbe") == 200, timeout=30,
                        interval=0.3)
        assert scaffold.probe(pod, "livenessProbe") == 200
        code, logs = scaffold.stop(pod, name)
        assert code == 0, logs
        assert "ghp-controller-token" not in logs and "sa-token" not in logs
    finally:
        runners.stop()
        api.stop()
