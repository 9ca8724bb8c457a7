"""The controller's layering: the decision is pure, only the kube modules (``KUBE``) know the
kubernetes client, and the CI platforms are spoken to through ``gitscale.clients`` (no HTTP
library here)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import imports

PACKAGE = Path(__file__).resolve().parents[2] / "gitscale" / "controller"
CLIENT = {"kubernetes", "pydantic", "urllib3"}
IO = CLIENT | {"httpx", "socket", "http", "subprocess", "threading", "time", "yaml",
               "concurrent", "jwt", "logging", "os"}
# One place speaks Kubernetes: the verbs (kube.py), the kubeconfig and its credentials
# (kube_config.py), the answers and the client's errors (kube_answers.py), and each answer's
# deadline (kube_deadline.py).
KUBE = {"kube.py", "kube_config.py", "kube_answers.py", "kube_deadline.py"}
PURE = ["decide.py", "observe.py", "podspec.py", "status.py", "platform.py", "events.py"]


@pytest.mark.parametrize("module", sorted(p.name for p in PACKAGE.glob("*.py")))
def test_only_kube_imports_the_kubernetes_client(module: str) -> None:
    if module not in KUBE:
        assert not imports(PACKAGE / module) & CLIENT


def test_the_kube_modules_exist() -> None:
    assert {p.name for p in PACKAGE.glob("kube*.py")} == KUBE


@pytest.mark.parametrize("module", PURE)
def test_the_decision_side_does_no_io(module: str) -> None:
    assert not imports(PACKAGE / module) & IO


@pytest.mark.parametrize("module", sorted(p.name for p in PACKAGE.glob("*.py")))
def test_the_platforms_are_spoken_to_through_the_clients_package(module: str) -> None:
    assert not imports(PACKAGE / module) & {"httpx", "jwt", "requests"}


PLATFORM_NAMES = sorted(p.stem.removeprefix("platform_") for p in PACKAGE.glob("platform_*.py"))


def test_every_platform_module_is_found() -> None:
    assert {"github", "buildkite"} <= set(PLATFORM_NAMES)


@pytest.mark.parametrize("name", PLATFORM_NAMES)
def test_each_platform_adapter_uses_its_client(name: str) -> None:
    """``platform_NAME.py``'s side of a runner, ``NAME.py``, speaks through
    ``gitscale/clients/NAME.py`` (CONTRIBUTING, "Adding a controller platform")."""
    text = (PACKAGE / f"{name}.py").read_text()
    assert f"from gitscale.clients.{name} import" in text
