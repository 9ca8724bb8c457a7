"""The loop's layering (STYLE.md): the decision core is pure, and each outside system has one
owner module."""
from __future__ import annotations

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
              "controller/buildkite.py", "controller/platforms.py", "notify/send.py"},
}


@pytest.mark.parametrize("module", sorted(p.name for p in (PACKAGE / "core").glob("*.py")))
def test_the_core_does_no_io(module: str) -> None:
    assert not imports(PACKAGE / "core" / module) & IO


@pytest.mark.parametrize("library", sorted(OWNERS))
def test_one_owner_per_outside_system(library: str) -> None:
    users = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if library in imports(p)}
    assert users <= OWNERS[library], users - OWNERS[library]
