"""The package's layering: every part imports only parts on lower layers (so no circle, and no
import back up), the decision core is pure (no git, YAML, HTTP or Kubernetes imports, only the
core and the RunnerSet API constants), and each outside system has one owner module."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import imports

PACKAGE = Path(__file__).resolve().parents[1] / "gitscale"
IO = {"yaml", "ruamel", "httpx", "jwt", "kubernetes", "subprocess", "socket", "http", "os",
      "threading", "time", "pathlib", "click"}
OWNERS = {
    "subprocess": {"repo/git.py", "manifest/kubeconform.py"},  # git, and kubeconform on PATH
    # the verbs, the kubeconfig and its credentials, the answers and the client's errors
    "kubernetes": {"controller/kube.py", "controller/kube_config.py",
                   "controller/kube_answers.py"},
    "matplotlib": {"charts/render.py", "charts/axis.py"},  # the optional extra, imported lazily
    "prometheus_client": {"metrics.py", "controller/metrics.py"},
    # GitHub, Buildkite, notifications: the one client, its answers, its URLs, no answer's cause
    "httpx": {"clients/http.py", "clients/answers.py", "clients/urls.py", "clients/no_answer.py",
              "clients/deadline.py"},
    "jwt": {"clients/github_app.py"},  # a GitHub App's token, for the source and controller
    "httpcore": {"clients/deadline.py"},  # the network layer under httpx: a request's deadline
}


# The parts of gitscale/, lowest first: a module may import its own part and the layers below.
# Type-only and function-level imports count too: a circle closed by them still says that a
# name lives in the wrong part.
LAYERS: list[set[str]] = [
    {"__init__", "errors", "timeutil", "redact", "runnerset_api", "data"},
    {"files", "progress", "http_server", "logline", "streak", "yamlio", "core"},
    {"repo", "config", "clients"},  # git verbs; gitscale.yaml…; GitHub's and Buildkite's APIs
    {"crash", "record", "demand", "manifest", "notify"},
    {"charts", "plan"},  # plan: the pass (engine, cache, landing)
    {"metrics"},  # the Prometheus verbs of run, serve's webhook parts and the controller
    {"webhooks", "controller"},
    {"simulate"},
    {"commands"},
    {"cli"},
    {"__main__"},
]
RANK = {part: n for n, parts in enumerate(LAYERS) for part in parts}


def part_of(module: str) -> str:
    """``gitscale.plan.engine`` → ``plan``; ``gitscale.errors`` → ``errors``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def gitscale_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "gitscale":
            found |= {f"gitscale.{a.name}" for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(
                "gitscale."):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("gitscale.")}
    return {m.replace("gitscale.__version__", "gitscale") for m in found}


MODULES = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py"))


def test_every_part_has_a_layer() -> None:
    parts = {Path(m).parts[0].removesuffix(".py") for m in MODULES}
    assert parts == set(RANK), parts ^ set(RANK)


@pytest.mark.parametrize("module", MODULES)
def test_imports_go_down_the_layers(module: str) -> None:
    mine = Path(module).parts[0].removesuffix(".py")
    upward = {m for m in gitscale_imports(PACKAGE / module)
              if part_of(m) != mine and RANK[part_of(m)] >= RANK[mine]}
    assert not upward, f"{module} ({mine}, layer {RANK[mine]}) imports {sorted(upward)}"


def test_the_layer_check_catches_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from gitscale.plan.engine import Plan\nimport gitscale.cli\n")
    assert {part_of(m) for m in gitscale_imports(module)} == {"plan", "cli"}
    assert RANK["plan"] > RANK["config"]  # config importing the engine would fail above


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
