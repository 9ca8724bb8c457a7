"""A CLI pass imports what it uses: what a warm `reconcile` or `plan` loads, in a real process.

Interpreter start and imports are a large share of a short pass, so each command module, and
the libraries only some passes need (PyYAML's editor, diffs, JSON patches, schema validation,
the controller, HTTP clients, charts), are imported by the code that uses them. Each test runs
the real CLI in a fresh interpreter on a real config repo and lists ``sys.modules`` at exit.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import RUNNERSET, make_repo, run, simple_config

# Writes every module loaded by the end of the run, one per line; installed before gitscale
# is imported, so it sees the process exit after main() returns.
CHILD = """\
import atexit, sys
out, argv = sys.argv[1], sys.argv[2:]
def _dump() -> None:
    with open(out, "w") as handle:
        handle.write("\\n".join(sorted(sys.modules)))
atexit.register(_dump)
from gitscale.cli import main
sys.exit(main(argv))
"""

NOW = "2026-11-21T09:00:00Z"
# Never on a pass: the cluster side, HTTP clients and their network layers (a file source
# reads none), TLS, charts, metrics, the round-trip YAML library and the test-only ones
# (installed beside gitscale in the venv, so a stray import would not fail), serve's and
# simulate's modules.
NEVER = ("kubernetes", "kubernetes_validate", "httpx", "httpcore", "h11", "ssl", "asyncio",
         "http.client", "email", "jwt", "prometheus_client", "matplotlib", "jsonschema",
         "ruamel", "dateutil", "hypothesis", "gitscale.controller", "gitscale.notify.send",
         "gitscale.charts.render", "gitscale.clients.http", "gitscale.metrics",
         "gitscale.simulate", "gitscale.webhooks.endpoints", "gitscale.webhooks.batch",
         "gitscale.commands.helptext")
# Only when a pass writes: editing YAML, validating it, showing a diff.
ONLY_WRITING = ("gitscale.manifest.edit", "gitscale.manifest.splice", "gitscale.manifest.verify",
                "gitscale.manifest.validate", "gitscale.manifest.crd_schemas",
                "gitscale.manifest.kubeconform", "gitscale.manifest.problem", "fastjsonschema",
                "difflib")
# Only when a YAML text is read: a warm pass with a JSON demand file (integers) reads none.
ONLY_READING_YAML = ("yaml", "_yaml")
# Only when a config is parsed (not from the state cache), a set has a forecast or a source is
# asked (not --demand FILE): the notify targets' parser; the history reader (its regexes, its
# table of times), which reads commits; the sources' client registry.
ONLY_PARSING_OR_FORECAST = ("gitscale.config.notify_targets", "gitscale.record.history",
                            "gitscale.demand.registry")


def loaded(tmp_path: Path, *argv: str, code: int = 0) -> set[str]:
    """The modules a fresh `gitscale ARGV...` process has loaded when it exits."""
    out = tmp_path / "modules.txt"
    result = subprocess.run([sys.executable, "-c", CHILD, str(out), *argv], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == code, result.stdout + result.stderr
    return set(out.read_text().split("\n"))


def found(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """The modules among ``modules`` that are one of ``names`` or inside one of them."""
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.fixture
def remote(tmp_path: Path, capsys) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    """A bare remote whose sets were written once (the state cache is warm), and a JSON
    demand file that asks for what they have."""
    make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 1, maxReplicas: 9, buffer: 1}",
                                        "gpu": "default"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=1),
        "sets/gpu.yaml": RUNNERSET.format(name="gpu", replicas=0),
        "demand.yaml": "linux: {queued: 0, running: 0}\ngpu: {queued: 0, running: 0}\n",
    })
    demand = tmp_path / "demand.json"
    demand.write_text(json.dumps({"linux": {"queued": 2, "running": 0},
                                  "gpu": {"queued": 0, "running": 0}}))
    bare = tmp_path / "remote.git"
    code, out, err = run(capsys, "reconcile", "--repo", str(bare), "--demand", str(demand),
                         "--now", NOW)
    assert code == 0 and "committed" in out, out + err
    return bare, demand


def test_version_imports_no_command(tmp_path: Path) -> None:
    modules = loaded(tmp_path, "--version")
    assert found(modules, ("gitscale.commands",)) == ["gitscale.commands"]  # (options only)
    assert found(modules, ("yaml", "gitscale.repo.git", "gitscale.crash", "gitscale.config.load",
                           *NEVER)) == []


def test_a_warm_reconcile_without_change_loads_nothing_for_writing(
        tmp_path: Path, remote: tuple[Path, Path]) -> None:
    bare, demand = remote
    modules = loaded(tmp_path, "reconcile", "--repo", str(bare), "--demand", str(demand),
                     "--now", NOW)
    assert "gitscale.commands.reconcile" in modules
    assert found(modules, ("gitscale.commands",)) == ["gitscale.commands",
                                                      "gitscale.commands.plan",
                                                      "gitscale.commands.reconcile"]
    assert found(modules, (*NEVER, *ONLY_WRITING, *ONLY_READING_YAML, "jsonpatch",
                           "gitscale.controller.crd", "gitscale.core.reservations", "zoneinfo",
                           "traceback", *ONLY_PARSING_OR_FORECAST)) == []


def test_plan_loads_difflib_only_for_a_diff(tmp_path: Path, remote: tuple[Path, Path]) -> None:
    bare, demand = remote
    argv = ("plan", "--repo", str(bare), "--now", NOW)
    quiet = loaded(tmp_path, *argv, "--demand", str(demand))
    assert found(quiet, (*NEVER, *ONLY_WRITING, "jsonpatch", "gitscale.controller.crd")) == []

    more = tmp_path / "more.json"
    more.write_text(json.dumps({"linux": {"queued": 5, "running": 0},
                                "gpu": {"queued": 0, "running": 0}}))
    pending = loaded(tmp_path, *argv, "--demand", str(more), code=2)
    # a plan that would write checks its edits as reconcile would (a change reconcile refuses
    # exits 1), and shows no JSON patch in text
    assert {"difflib", "gitscale.manifest.edit", "gitscale.manifest.validate"} <= pending
    assert found(pending, (*NEVER, "jsonpatch")) == []


def test_a_reconcile_that_writes_loads_no_cluster_or_http_client(
        tmp_path: Path, remote: tuple[Path, Path]) -> None:
    bare, _ = remote
    more = tmp_path / "more.json"
    more.write_text(json.dumps({"linux": {"queued": 5, "running": 0},
                                "gpu": {"queued": 1, "running": 0}}))
    modules = loaded(tmp_path, "reconcile", "--repo", str(bare), "--demand", str(more),
                     "--now", NOW)
    assert {"gitscale.manifest.edit", "gitscale.manifest.validate"} <= modules  # it did write
    # validation reads the RunnerSet CRD as shipped, not built from the controller's registry,
    # and its data from the state cache (the fixture's pass parsed it); the block-style
    # manifests are read and edited without PyYAML
    assert found(modules, (*NEVER, "gitscale.controller.crd", "difflib", "jsonpatch",
                           *ONLY_READING_YAML, *ONLY_PARSING_OR_FORECAST)) == []


def test_a_command_module_is_imported_with_the_collector_off_then_frozen() -> None:
    import gc

    from gitscale.commands import collector_off

    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    try:
        with collector_off():
            assert not gc.isenabled()
            loaded_now = [[index] for index in range(100)]
        assert gc.isenabled()  # on again for the pass
        assert gc.get_freeze_count() >= frozen + len(loaded_now)
        gc.disable()
        with collector_off():
            pass
        assert not gc.isenabled()  # left as it was found
    finally:
        gc.enable()
        gc.unfreeze()  # this test process is not a CLI run
