"""`gitscale init`, day two: the GitOps sync webhook (Flux Receiver / Argo CD secret and the
notify entry) and the ways to run gitscale itself (GitHub and GitLab schedules, and Kubernetes
manifests that validate against the real Kubernetes schema and need no cluster permission)."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gitscale import __version__
from gitscale.config.load import load_config
from tests.helpers import git, run
from tests.notify.engines import Application, FakeArgoCD, FakeFlux, Receiver
from tests.commands.test_init import reference_validator

URL = "https://git.example.com/ci/config.git"
KUBERNETES = ["1.30.0", "1.37.0"]  # a supported old release and the newest schema shipped


def init(tmp_path: Path, capsys, gitops: str,  # type: ignore[no-untyped-def]
         *extra: str, run_in: str = "github-actions") -> tuple[Path, str]:
    root = tmp_path / "config"
    code, out, err = run(capsys, "init", str(root), "--gitops", gitops, "--repo-url", URL,
                         "--run-in", run_in, *(extra or ("--github-org", "acme")))
    assert code == 0, err
    assert git(root, "status", "--porcelain") == ""
    return root, out


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def push_and_reconcile(tmp_path: Path, root: Path, capsys,  # type: ignore[no-untyped-def]
                       monkeypatch: pytest.MonkeyPatch, env: str,
                       secret: str) -> tuple[int, str, str]:
    """The scaffold pushed to a bare remote, then one `reconcile` of its demand file with the
    GitOps engine's shared secret in ``env``: (exit code, stdout, stderr)."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    git(root, "remote", "add", "origin", str(remote))
    git(root, "push", "--quiet", "--set-upstream", "origin", "main")
    monkeypatch.setenv(env, secret)
    return run(capsys, "reconcile", "--repo", str(root), "--demand", str(root / "demand.yaml"))


def test_flux_receiver_matches_the_crd_the_gitrepository_and_the_notify_entry(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    root, out = init(tmp_path, capsys, "flux")
    (receiver,) = docs(root / "flux/receiver.yaml")
    validator = reference_validator("notification.toolkit.fluxcd.io_receivers.yaml")
    assert validator.knows(receiver) and validator.check(receiver) == []
    assert receiver["spec"]["type"] == "generic-hmac"
    # it triggers the GitRepository that flux/gitscale.yaml defines
    source = next(d for d in docs(root / "flux/gitscale.yaml") if d["kind"] == "GitRepository")
    (resource,) = receiver["spec"]["resources"]
    assert (resource["kind"], resource["name"]) == ("GitRepository", source["metadata"]["name"])
    assert receiver["metadata"]["namespace"] == source["metadata"]["namespace"]
    # the token is never written: the Secret is created by hand, as the comment and output say
    secret = receiver["spec"]["secretRef"]["name"]
    assert f"create secret generic {secret}" in (root / "flux/receiver.yaml").read_text()
    assert f"create secret generic {secret}" in out
    assert not any(d.get("kind") == "Secret" for p in root.rglob("*.yaml") for d in docs(p))
    (target,) = load_config(root).notify
    assert target.kind == "flux" and target.secret == {"env": "FLUX_RECEIVER_TOKEN"}
    assert target.receiver == (receiver["metadata"]["name"], receiver["metadata"]["namespace"])


@pytest.mark.parametrize("run_in", ["github-actions", "cluster"])
def test_the_scaffolded_flux_notify_reaches_its_receiver(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         run_in: str) -> None:
    """The scaffold as written, with only the webhook-receiver's address filled in (from CI,
    the CHANGE-ME init listed; in the cluster, the Service's address changed to where the test
    can reach it), makes a request that Receiver accepts."""
    root, out = init(tmp_path, capsys, "flux", run_in=run_in)
    (receiver,) = docs(root / "flux/receiver.yaml")
    meta = receiver["metadata"]
    with FakeFlux(Receiver(meta["name"], meta["namespace"], "t0ken-from-the-secret")) as flux:
        config = root / "gitscale.yaml"
        text = config.read_text()
        written = ("http://webhook-receiver.flux-system.svc.cluster.local" if run_in == "cluster"
                   else "https://CHANGE-ME")
        assert f"url: {written}" in text
        # from CI the URL is one of the edits init listed, and refused until it is done
        assert (f"gitscale.yaml:{text[:text.index(written)].count(chr(10)) + 1}: replace "
                "CHANGE-ME" in out) == (run_in != "cluster")
        config.write_text(text.replace(written, flux.base))
        (root / "demand.yaml").write_text("linux: {queued: 2, running: 0}\n")
        git(root, "commit", "-qam", "point notify at the receiver's ingress")
        code, out, err = push_and_reconcile(tmp_path, root, capsys, monkeypatch,
                                            "FLUX_RECEIVER_TOKEN", "t0ken-from-the-secret")
    assert code == 0, err
    assert [s.status for s in flux.seen] == [200] and flux.reconciled == ["GitRepository/gitscale"]
    assert f"notified flux ({flux.base})" in out


def test_argocd_notify_entry_and_webhook_secret_howto(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    root, out = init(tmp_path, capsys, "argocd")
    app = docs(root / "argocd/application.yaml")[0]
    (target,) = load_config(root).notify
    assert target.kind == "argocd" and target.url.endswith("/api/webhook")
    assert target.repo_url == app["spec"]["source"]["repoURL"] == URL
    assert target.secret == {"env": "ARGOCD_WEBHOOK_SECRET"}
    text = (root / "gitscale.yaml").read_text()
    for words in ("argocd-secret", "webhook.github.secret", "ARGOCD_WEBHOOK_SECRET"):
        assert words in text and words in out


def test_the_in_cluster_argocd_notify_speaks_https_to_a_self_signed_server(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """--run-in cluster: argocd-server's Service over https (plain http is redirected, and
    notify follows no redirect), accepting its self-signed certificate for this entry alone.
    The scaffold as written, with only the Service's host:port changed to the fake's, makes
    Argo CD refresh the Application init wrote."""
    root, out = init(tmp_path, capsys, "argocd", run_in="cluster")
    assert "edits left: none" in out
    (target,) = load_config(root).notify
    assert target.url == "https://argocd-server.argocd.svc.cluster.local/api/webhook"
    assert not target.verify_tls
    text = (root / "gitscale.yaml").read_text()
    assert "self-signed" in text and "insecureSkipTLSVerify: true" in text
    app = docs(root / "argocd/application.yaml")[0]
    source = app["spec"]["source"]
    with FakeArgoCD("webhook-secret-4b1d", Application(
            app["metadata"]["name"], source["repoURL"], source["targetRevision"]),
            tls=True) as argo:
        (root / "gitscale.yaml").write_text(text.replace(
            "https://argocd-server.argocd.svc.cluster.local", argo.base))
        (root / "demand.yaml").write_text("linux: {queued: 2, running: 0}\n")
        git(root, "commit", "-qam", "the Service's address, as the test reaches it")
        code, out, err = push_and_reconcile(tmp_path, root, capsys, monkeypatch,
                                            "ARGOCD_WEBHOOK_SECRET", "webhook-secret-4b1d")
    assert code == 0, err
    assert argo.refreshed == ["gitscale"] and f"notified argocd ({argo.base})" in out


@pytest.mark.parametrize("gitops", ["argocd", "flux"])
def test_github_workflow_runs_every_5_minutes_one_at_a_time_with_least_permissions(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, gitops: str) -> None:
    root, _ = init(tmp_path, capsys, gitops)
    workflow = yaml.safe_load((root / ".github/workflows/gitscale.yml").read_text())
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as true
    assert triggers["schedule"] == [{"cron": "*/5 * * * *"}]
    assert workflow["concurrency"] == {"group": "gitscale", "cancel-in-progress": False}
    assert workflow["permissions"] == {"contents": "write"}
    (job,) = workflow["jobs"].values()
    assert job["env"]["GITSCALE_VERSION"] == __version__
    steps = job["steps"]
    installs = [s["run"] for s in steps if "pip install" in s.get("run", "")]
    assert installs == ['python -m pip install "gitscale==${GITSCALE_VERSION}"']
    (cache,) = [s for s in steps if s.get("uses", "").startswith("actions/cache@")]
    assert cache["with"]["path"] == "${{ env.GITSCALE_CACHE_DIR }}"
    assert "GITSCALE_CACHE_DIR" in job["env"] and cache["with"]["restore-keys"]
    checkout = next(s for s in steps if s.get("uses", "").startswith("actions/checkout@"))
    # the whole history (0): a forecast reads the past weeks' commits; the default is one
    assert checkout["with"]["fetch-depth"] == 0
    reconcile = next(s for s in steps if "gitscale reconcile" in s.get("run", ""))
    assert f"--repo {checkout['with']['path']}" in reconcile["run"]
    # every action is pinned to a release
    assert all(re.search(r"@v\d+$", s["uses"]) for s in steps if "uses" in s)
    notify_env = "FLUX_RECEIVER_TOKEN" if gitops == "flux" else "ARGOCD_WEBHOOK_SECRET"
    assert reconcile["env"][notify_env] == f"${{{{ secrets.{notify_env} }}}}"


def test_gitlab_example_is_serialised_cached_and_pinned(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    root, _ = init(tmp_path, capsys, "flux", run_in="gitlab")
    job = yaml.safe_load((root / ".gitlab-ci.yml").read_text())["gitscale"]
    assert {"if": '$CI_PIPELINE_SOURCE == "schedule"'} in job["rules"]
    assert job["resource_group"] == "gitscale"
    assert job["variables"]["GITSCALE_VERSION"] == __version__
    assert job["cache"]["paths"] == [".gitscale-cache/"]
    assert job["variables"]["GITSCALE_CACHE_DIR"] == "$CI_PROJECT_DIR/.gitscale-cache"
    assert any('gitscale==$GITSCALE_VERSION' in line for line in job["script"])
    assert "GITSCALE_GIT_TOKEN" not in str(job["variables"])  # a masked CI/CD variable
    # gitscale clones the repo itself (a URL clone is deepened for a forecast): no shallow
    # GitLab checkout for it to read
    assert job["variables"]["GIT_STRATEGY"] == "none" and "GIT_DEPTH" not in job["variables"]
    assert any('--repo "$CI_PROJECT_URL.git"' in line for line in job["script"])


SCALER = ["serviceaccount.yaml", "cache-pvc.yaml", "cronjob.yaml", "deployment-run.yaml",
          "deployment-serve.yaml", "service-serve.yaml"]
BUILDKITE = ["--buildkite-org", "acme-ci"]  # no serve: webhooks are GitHub's


def pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] == "CronJob":
        return [obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]]
    if obj["kind"] == "Deployment":
        return [obj["spec"]["template"]["spec"]]
    return []


@pytest.mark.parametrize("kubernetes", KUBERNETES)
@pytest.mark.parametrize("platform", ["github", "buildkite"])
def test_scaler_manifests_validate_against_the_kubernetes_schema(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, kubernetes: str, platform: str) -> None:
    root, _ = init(tmp_path, capsys, "argocd", *(BUILDKITE if platform == "buildkite" else ()),
                   run_in="cluster")
    scaler = root / "deploy/scaler"
    kustomization = yaml.safe_load((scaler / "kustomization.yaml").read_text())
    assert all((scaler / r).is_file() for r in kustomization["resources"])
    expected = SCALER if platform == "github" else [n for n in SCALER if "serve" not in n]
    assert sorted(p.name for p in scaler.glob("*.yaml")) == sorted([*expected,
                                                                    "kustomization.yaml"])
    for name in expected:
        for obj in docs(scaler / name):
            # strict: an unknown or misspelt field anywhere is an error
            kubernetes_validate.validate(obj, kubernetes, strict=True)


def test_the_scaler_needs_no_cluster_permission_and_reads_git_from_a_secret(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    root, _ = init(tmp_path, capsys, "flux", run_in="cluster")
    objects = [o for name in SCALER for o in docs(root / "deploy/scaler" / name)]
    kinds = {o["kind"] for o in objects}
    # no Role, no binding
    assert kinds == {"ServiceAccount", "PersistentVolumeClaim", "CronJob", "Deployment",
                     "Service"}
    (account,) = [o for o in objects if o["kind"] == "ServiceAccount"]
    assert account["automountServiceAccountToken"] is False
    (cron,) = [o for o in objects if o["kind"] == "CronJob"]
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    commands = []
    for obj in objects:
        for spec in pod_specs(obj):
            assert spec["automountServiceAccountToken"] is False
            assert spec["serviceAccountName"] == account["metadata"]["name"]
            (container,) = spec["containers"]
            assert container["image"].endswith(f":{__version__}")
            commands.append(container["args"][0])
            assert container["args"][container["args"].index("--repo") + 1] == URL
            env = {e["name"]: e for e in container["env"]}
            token_file = env["GITSCALE_GIT_TOKEN_FILE"]["value"]
            mount = next(m for m in container["volumeMounts"]
                         if token_file.startswith(m["mountPath"] + "/"))
            volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
            assert "secret" in volume and mount["readOnly"] is True
            assert "GITSCALE_GIT_TOKEN" not in env  # the token is a file, never a plain value
    assert sorted(commands) == ["reconcile", "run", "serve"]
    (serve,) = [o for o in objects if o["kind"] == "Deployment" and "serve" in
                o["metadata"]["name"]]
    (svc,) = [o for o in objects if o["kind"] == "Service"]
    assert svc["spec"]["selector"].items() <= \
        serve["spec"]["template"]["metadata"]["labels"].items()
    assert all(d["spec"]["strategy"] == {"type": "Recreate"} for d in objects
               if d["kind"] == "Deployment")


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_scaler_kustomization_builds(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    root, _ = init(tmp_path, capsys, "flux", run_in="cluster")
    built = subprocess.run(["kubectl", "kustomize", str(root / "deploy/scaler")],
                           capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    objects = list(yaml.safe_load_all(built.stdout))
    assert sorted(d["kind"] for d in objects) == ["CronJob", "PersistentVolumeClaim",
                                                  "ServiceAccount"]
    (claim,) = [d for d in objects if d["kind"] == "PersistentVolumeClaim"]
    (cron,) = [d for d in objects if d["kind"] == "CronJob"]
    volumes = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "cache", "persistentVolumeClaim": {
        "claimName": claim["metadata"]["name"]}} in volumes
    assert_notify_is_a_file(cron["spec"]["jobTemplate"]["spec"]["template"]["spec"])
    # the README's swap: run, or serve with its Service, instead of the CronJob and its claim
    kustomization = root / "deploy/scaler/kustomization.yaml"
    kustomization.write_text(kustomization.read_text().replace(
        "- cache-pvc.yaml\n- cronjob.yaml", "- deployment-run.yaml\n- deployment-serve.yaml\n"
        "- service-serve.yaml"))
    built = subprocess.run(["kubectl", "kustomize", str(root / "deploy/scaler")],
                           capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    deployments = [d for d in yaml.safe_load_all(built.stdout) if d["kind"] == "Deployment"]
    assert sorted(d["metadata"]["name"] for d in deployments) == ["gitscale-run",
                                                                  "gitscale-serve"]
    for deployment in deployments:
        assert deployment["metadata"]["namespace"] == "gitscale-system"
        assert_notify_is_a_file(deployment["spec"]["template"]["spec"])


def assert_notify_is_a_file(spec: dict[str, Any]) -> None:
    """Flux's notify token: the key FLUX_RECEIVER_TOKEN of the optional Secret gitscale-notify,
    a file that FLUX_RECEIVER_TOKEN_FILE points at; no Secret loaded as variables."""
    (container,) = spec["containers"]
    assert "envFrom" not in container
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert "FLUX_RECEIVER_TOKEN" not in env
    directory, key = env["FLUX_RECEIVER_TOKEN_FILE"].rsplit("/", 1)
    assert key == "FLUX_RECEIVER_TOKEN"
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == directory]
    assert mount["readOnly"] is True
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"] == {"secretName": "gitscale-notify", "optional": True}


@pytest.mark.parametrize("gitops", ["argocd", "flux"])
def test_a_notify_url_given_leaves_nothing_to_edit_and_reaches_the_engine(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch, gitops: str) -> None:
    """From CI with --notify-url: the engine's address goes into notify as given (no
    CHANGE-ME, no step asking for it, no certificate check skipped), and the scaffold as
    written, untouched, makes the engine sync after a push."""
    secret = "shared-4b1d"
    app = Application("gitscale", URL, "main")
    with (FakeArgoCD(secret, app) if gitops == "argocd"
          else FakeFlux(Receiver("gitscale", "flux-system", secret))) as engine:
        root, out = init(tmp_path, capsys, gitops, "--github-org", "acme",
                         "--notify-url", engine.base + "/")
        assert "edits left: none" in out and "set notify's url" not in out
        text = (root / "gitscale.yaml").read_text()
        assert f"url: {engine.base}\n" in text and "--notify-url" in text
        assert "insecureSkipTLSVerify" not in text
        code, out, err = push_and_reconcile(
            tmp_path, root, capsys, monkeypatch,
            "ARGOCD_WEBHOOK_SECRET" if gitops == "argocd" else "FLUX_RECEIVER_TOKEN", secret)
    assert code == 0, err
    assert f"notified {gitops} ({engine.base})" in out
    if gitops == "argocd":
        assert engine.refreshed == ["gitscale"]  # type: ignore[union-attr]
    else:
        assert engine.reconciled == ["GitRepository/gitscale"]  # type: ignore[union-attr]


@pytest.mark.parametrize(("url", "words"), [
    pytest.param("argocd.example.com", "is not an http(s):// URL", id="no-scheme"),
    pytest.param("ftp://argocd.example.com", "is not an http(s):// URL", id="ftp"),
    pytest.param("https://argocd.example.com/api/webhook", "no path", id="a-path"),
    pytest.param("https://admin:hunter2@argocd.example.com", "has credentials in it; nothing "
                 "was written (gitscale takes the notify token from FLUX_RECEIVER_TOKEN or "
                 "ARGOCD_WEBHOOK_SECRET", id="credentials"),
])
def test_a_bad_notify_url_is_refused_before_anything_is_written(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, url: str, words: str) -> None:
    code, out, err = run(capsys, "init", str(tmp_path / "config"), "--gitops", "argocd",
                         "--notify-url", url)
    assert code == 1 and err.startswith("error: --notify-url: ") and words in err, err
    assert "hunter2" not in err + out and not (tmp_path / "config").exists()


@pytest.mark.parametrize(("option", "url", "words"), [
    pytest.param("--github-url", "https://ghp_tok1234@github.example.com",
                 "takes the GitHub token from GITHUB_TOKEN", id="github-url"),
    pytest.param("--cluster", "https://admin:hunter2@k8s.example.com",
                 "Argo CD takes a cluster's credentials from its cluster Secret", id="cluster"),
    pytest.param("--repo-url", "https://x:hunter2@github.com/acme/c.git",
                 "takes the git token from GITSCALE_GIT_TOKEN_FILE", id="repo-url"),
])
def test_a_url_with_credentials_says_where_that_credential_goes(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, option: str, url: str, words: str) -> None:
    """Each refused URL names where its own credential comes from (it named the git token
    for every one: a notify or GitHub token has nothing to do with it)."""
    code, out, err = run(capsys, "init", str(tmp_path / "config"), "--gitops", "argocd",
                         option, url)
    assert code == 1 and err.startswith(f"error: {option}: ") and words in err, err
    assert "hunter2" not in err + out and "tok1234" not in err + out
    assert not (tmp_path / "config").exists()
