"""The ways `gitscale init` is called in the tests: each platform, bare (every value init cannot
know left as CHANGE-ME) and complete (every one given), with either GitOps tool."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.helpers import git, run

URL = "https://git.example.com/ci/config.git"
GITOPS = ["argocd", "flux"]

# name → the options; a complete variant leaves nothing to edit
BARE = {
    "github": [],
    "buildkite": ["--platform", "buildkite"],
    "github-app": ["--github-app-id", "123456"],
}
COMPLETE = {
    "github": ["--github-org", "acme", "--repo-url", URL],
    "ghes-app": ["--github-url", "https://ghe.example.com", "--github-org", "acme",
                 "--github-app-id", "123456", "--github-app-installation-id", "7890",
                 "--repo-url", URL, "--namespace", "runners", "--path", "clusters/east"],
    "buildkite": ["--buildkite-org", "acme-ci", "--buildkite-queue", "linux-large",
                  "--repo-url", URL],
}
ARGOCD_CLUSTER = ["--cluster", "prod-east"]  # Argo CD only: Flux applies where it runs


def options(gitops: str, variant: str, complete: bool, run_in: str = "cluster") -> list[str]:
    """The variant's options; ``run_in`` cluster by default: the scheduler with the most files
    (deploy/scaler/, where the source's credential and the repo URL go)."""
    given = (COMPLETE if complete else BARE)[variant]
    return given + (ARGOCD_CLUSTER if complete and gitops == "argocd" else []) + [
        "--run-in", run_in]


ALL = [(gitops, variant, complete) for gitops in GITOPS
       for complete, table in ((False, BARE), (True, COMPLETE)) for variant in table]


def init(tmp_path: Path, capsys, gitops: str, *extra: str,  # type: ignore[no-untyped-def]
         name: str = "config") -> tuple[Path, str]:
    root = tmp_path / name
    code, out, err = run(capsys, "init", str(root), "--gitops", gitops, *extra)
    assert code == 0, err
    assert git(root, "status", "--porcelain") == ""
    return root, out


def written(root: Path) -> list[Path]:
    """Every file init wrote (what it committed)."""
    return [root / rel for rel in git(root, "ls-files").splitlines()]


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
