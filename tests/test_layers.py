"""The loop's layering: the decision core is pure (no git, YAML, HTTP or Kubernetes imports,
only the core and the RunnerSet API constants), and each outside system has one owner module."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import imports

PACKAGE = Path(__file__).resolve().parents[1] / "gitscale"
IO = {"yaml", "ruamel", "httpx", "jwt", "kubernetes", "subprocess", "socket", "http", "os",
      "threading", "time", "pathlib", "click"}
OWNERS = {
    "subprocess": {"git.py", "validate.py"},  # git, and kubeconform when on PATH
    "kubernetes": {"controller/kube.py"},
    "matplotlib": {"chart.py", "chart_axis.py"},  # the optional extra, imported lazily
    "prometheus_client": {"metrics.py"},
    "httpx": {"demand/http.py", "demand/github.py", "controller/github.py",
              "controller/buildkite.py", "notify/send.py",
              "github_app.py"},
    "jwt": {"github_app.py"},  # a GitHub App's token: one module for the source and controller
}


@pytest.mark.parametrize("module", sorted(p.name for p in (PACKAGE / "core").glob("*.py")))
def test_the_core_does_no_io(module: str) -> None:
    assert not imports(PACKAGE / "core" / module) & IO


@pytest.mark.parametrize("module", sorted(p.name for p in (PACKAGE / "core").glob("*.py")))
def test_the_core_uses_only_the_core_and_the_api_constants(module: str) -> None:
    tree = ast.parse((PACKAGE / "core" / module).read_text())
    used = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            and node.module and node.module.startswith("gitscale")}
    assert {m for m in used if not m.startswith("gitscale.core")} <= {"gitscale.runnerset_api"}


@pytest.mark.parametrize("library", sorted(OWNERS))
def test_one_owner_per_outside_system(library: str) -> None:
    users = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if library in imports(p)}
    assert users <= OWNERS[library], users - OWNERS[library]
