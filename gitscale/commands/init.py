"""`gitscale init DIR --gitops argocd|flux`: scaffold a config repo that works on first push.

Writes gitscale.yaml, an example RunnerSet, the CRD, the controller (ServiceAccount, RBAC,
Deployment), a kustomization tying them together, and the Argo CD Application or the Flux
GitRepository + Kustomization that applies it. Refuses to overwrite anything.
"""
from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

import click
import yaml

from gitscale.commands import EXIT_OK
from gitscale.commands.init_notify import notify_block, notify_files, notify_next_steps
from gitscale.commands.init_schedules import schedule_files, schedule_next_steps
from gitscale.errors import InputError
from gitscale.repo.git import Git, check_url, is_url
from gitscale.controller.crd import crd_yaml

NAMESPACE = "ci-runners"

GITSCALE_YAML = """\
# gitscale.yaml: which runner sets gitscale scales, from what demand, by which policy.
# Docs: README.md of gitscale. Validate with `gitscale validate`, preview with `gitscale plan`.
runnerSets:
  - name: linux
    manifest: {path}/runnersets/linux.yaml
    object: {{kind: RunnerSet, name: linux}}
    # Poll GitHub (set GITHUB_TOKEN), or feed it with `gitscale serve` webhooks:
    # source: {{github: {{org: my-org, labels: [self-hosted, linux], token: {{env: GITHUB_TOKEN}}}}}}
    source: {{file: demand.yaml}}
    policy: default
"""

DEMAND_YAML = """\
# Demand for sets with `source: {file: demand.yaml}`: set name -> queued and running jobs.
linux: {queued: 0, running: 0}
"""

RUNNERSET = """\
# A pool of ephemeral GitHub Actions runners. gitscale owns spec.replicas, spec.patchID and
# spec.effectiveTime (and gitscale.dev/ annotations); everything else is yours.
apiVersion: gitscale.dev/v1alpha1
kind: RunnerSet
metadata:
  name: linux
  namespace: {namespace}
spec:
  replicas: 0
  platform: github
  github:
    configURL: https://github.com/my-org
    labels: [self-hosted, linux]
    credentialsSecret: github-app
  template:
    spec:
      containers:
        - name: runner
          image: ghcr.io/actions/actions-runner:latest
          resources:
            requests: {{cpu: "1", memory: 2Gi}}
"""


def scaffold(directory: Path, gitops: str, repo_url: str, branch: str,
             path: str) -> dict[str, str]:
    """path → text of every file ``init`` writes."""
    files = {
        "gitscale.yaml": GITSCALE_YAML.format(path=path),
        "demand.yaml": DEMAND_YAML,
        f"{path}/runnersets/linux.yaml": RUNNERSET.format(namespace=NAMESPACE),
        f"{path}/gitscale-system/crd.yaml": crd_yaml(),
    }
    controller = resources.files("gitscale.deploy").joinpath("controller")
    names = []
    if controller.is_dir():
        for item in sorted(controller.iterdir(), key=lambda i: i.name):
            if item.name.endswith(".yaml") and item.name != "kustomization.yaml":
                files[f"{path}/gitscale-system/{item.name}"] = item.read_text(encoding="utf-8")
                names.append(f"gitscale-system/{item.name}")
    files[f"{path}/kustomization.yaml"] = _dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["gitscale-system/crd.yaml", *names, "runnersets/linux.yaml"],
    })
    if gitops == "argocd":
        files["argocd/application.yaml"] = _dump(argocd_application(repo_url, branch, path))
        # RunnerSet health for Argo CD (a Lua check on the status the controller writes).
        files["argocd/argocd-cm-patch.yaml"] = resources.files("gitscale.deploy").joinpath(
            "argocd", "argocd-cm-patch.yaml").read_text(encoding="utf-8")
    else:
        source, kustomization = flux_objects(repo_url, branch, path)
        files["flux/gitscale.yaml"] = _dump(source) + "---\n" + _dump(kustomization)
    files["gitscale.yaml"] += notify_block(gitops, repo_url)
    files.update(notify_files(gitops))
    files.update(schedule_files(repo_url, branch, gitops))
    return files


def argocd_application(repo_url: str, branch: str, path: str) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "gitscale", "namespace": "argocd"},
        "spec": {
            "project": "default",
            "source": {"repoURL": repo_url, "targetRevision": branch, "path": path},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": NAMESPACE},
            "syncPolicy": {"automated": {"prune": True, "selfHeal": True},
                           "syncOptions": ["CreateNamespace=true", "ServerSideApply=true"]},
        },
    }


def flux_objects(repo_url: str, branch: str, path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    source = {
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "GitRepository",
        "metadata": {"name": "gitscale", "namespace": "flux-system"},
        "spec": {"interval": "1m", "url": repo_url, "ref": {"branch": branch}},
    }
    kustomization = {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": "gitscale", "namespace": "flux-system"},
        # wait: Flux checks every object's health (kstatus: a RunnerSet short of its runners
        # is in progress, a stalled one failed) and says so on the Kustomization.
        "spec": {"interval": "1m", "path": f"./{path}", "prune": True, "wait": True,
                 "timeout": "5m", "sourceRef": {"kind": "GitRepository", "name": "gitscale"}},
    }
    return source, kustomization


def _dump(obj: dict[str, Any]) -> str:
    return yaml.safe_dump(obj, sort_keys=False, width=100)


def run_init(directory: str, *, gitops: str, repo_url: str | None, branch: str,
             path: str) -> int:
    root = Path(directory).expanduser()
    url = repo_url or "https://github.com/my-org/gitscale-config.git"
    if is_url(url):
        check_url(url)
    if path.startswith("/") or ".." in Path(path).parts:
        raise InputError("--path", f"{path!r} must be a relative path inside the repo")
    if not re.fullmatch(r"[A-Za-z0-9._/-]+", path):
        # it is written unquoted into gitscale.yaml and the kustomizations
        raise InputError("--path", f"{path!r}: use letters, digits, '.', '_', '-' and '/'")
    if Git(Path.cwd()).run("check-ref-format", "--branch", branch, check=False).code != 0:
        raise InputError("--branch", f"{branch!r} is not a valid git branch name")
    files = scaffold(root, gitops, url, branch, path.strip("/"))
    clashes = sorted(rel for rel in files if (root / rel).exists())
    if clashes:
        raise InputError(str(root), "already has " + ", ".join(clashes[:5])
                         + (" …" if len(clashes) > 5 else "") + "; nothing was written")
    try:
        for rel, text in files.items():
            target = root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
    except OSError as exc:  # DIR is a file, or not writable
        raise InputError(str(root), f"cannot be written: {exc}") from None
    repo = Git(root)
    if repo.run("rev-parse", "--show-toplevel", check=False).code != 0:
        repo.run("init", "--quiet", f"--initial-branch={branch}")
    repo.run("add", "--", *files)
    # Only the scaffold: DIR may sit in a repo whose index holds someone's staged work.
    repo.run("commit", "--quiet", "-m", f"gitscale init ({gitops})", "--", *files)
    click.echo(f"wrote {len(files)} files to {root} and committed them:")
    for rel in files:
        click.echo(f"  {rel}")
    apply = ("kubectl apply -f argocd/application.yaml" if gitops == "argocd"
             else "kubectl apply -f flux/gitscale.yaml")
    click.echo(f"\nnext: push {root} to {url} ({branch}), then `{apply}`;\n"
               f"try `gitscale plan --repo {root}` and `gitscale validate --repo {root}`.")
    click.echo(f"\n{notify_next_steps(gitops)}\n\n{schedule_next_steps()}")
    return EXIT_OK
