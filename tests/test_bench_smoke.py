"""benchmarks/bench_reconcile.py keeps working as gitscale changes: its names for gitscale's
functions are checked before anything is built, and a tiny run goes through every stage."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_reconcile.py"


def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_reconcile", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_name_the_benchmark_times_exists() -> None:
    assert bench().stale_names() == []


def test_a_stale_name_stops_the_benchmark_before_it_builds_anything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    module = bench()
    monkeypatch.setattr(module, "PHASES", [*module.PHASES,
                                           ("renamed", "gitscale.plan.engine", "_read", False)])
    code = module.main(["--workdir", str(tmp_path / "work"), "--results", str(tmp_path)])
    assert code == 2
    assert "gitscale.plan.engine._read" in capsys.readouterr().err
    assert not (tmp_path / "work").exists() and not list(tmp_path.iterdir())


def test_a_tiny_run_goes_through_every_stage(tmp_path: Path) -> None:
    results = tmp_path / "results"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--sets", "12", "--changing", "2",
                           "--passes", "1", "--warmup", "0", "--profile-passes", "1",
                           "--modes", "cli-checkout,in-process", "--import-repeats", "1",
                           "--results", str(results)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((results / "reconcile-latest.json").read_text())
    assert "error_after_timed_passes" not in data, data["error_after_timed_passes"]
    assert set(data["modes"]) == {"cli-checkout", "in-process"}
    phases = data["modes"]["in-process"]["phases"]["rows"]
    timed = {row["what"].strip(): row["calls_per_pass"] for row in phases}
    # a pass reads what changes: the 2 files it edits, not the 12 (the state cache knows the
    # others by their blob ids)
    assert timed["files.read_manifest x misses (safe_repo_path + read)"] == 2
    assert "profile_cli" in data and "profile_in_process" in data


def test_the_yaml_benchmark_runs_and_every_reader_reads_alike(tmp_path: Path) -> None:
    """benchmarks/bench_yaml.py on a tiny corpus: each reader gives PyYAML's data (it exits
    non-zero otherwise), and each corpus goes the way the benchmark says it does."""
    script = SCRIPT.with_name("bench_yaml.py")
    proc = subprocess.run([sys.executable, str(script), "--sets", "14", "--repeats", "1",
                           "--results", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [result] = tmp_path.glob("yaml-*.json")
    corpora = json.loads(result.read_text())["corpora"]
    assert {name: c["paths"] for name, c in corpora.items()} == {
        "manifests": ["block"], "crlf": ["events"], "block-scalar": ["events"],
        "multiline-flow": ["events"], "crd-shipped": ["events"], "crd-arc": ["events"]}
    assert corpora["manifests"]["seconds"]["block"] is not None
    assert corpora["crlf"]["seconds"]["block"] is None  # the line reader declines CRLF


@pytest.mark.parametrize("checkout", [pytest.param(False, id="bare remote"),
                                      pytest.param(True, id="checkout")])
def test_the_ab_benchmark_runs_two_builds_and_checks_they_agree(tmp_path: Path,
                                                                checkout: bool) -> None:
    """benchmarks/bench_ab.py on a tiny fixture, this tree against itself: every pass of each
    build lands the same commit, and the figures are written where it is told; with
    ``--checkout`` each pass runs in a checkout (and says so)."""
    script = SCRIPT.with_name("bench_ab.py")
    done = subprocess.run(
        [sys.executable, str(script), "--before", str(SCRIPT.parents[1]), "--sets", "20",
         "--passes", "2", "--workdir", str(tmp_path / "work"), "--results", str(tmp_path),
         *(["--checkout"] if checkout else [])],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    [result] = tmp_path.glob("ab-*.json")
    figures = json.loads(result.read_text())
    assert sorted(figures["wall"]) == ["A", "B"] and figures["params"]["passes"] == 2
    assert figures["params"]["checkout"] is checkout
    assert "B faster in" in done.stdout
    assert ("in a checkout" in done.stdout) is checkout


def test_the_serve_restart_benchmark_times_a_restart_that_commits_nothing(
        tmp_path: Path) -> None:
    """benchmarks/bench_serve_restart.py on a tiny reservations file (`--modes plain`: the
    resync mode's first resync alone waits two --window's): the settling start commits the
    scale-up, the timed restart lands its first batch without a commit, and the one event is
    the run's only commit."""
    script = SCRIPT.with_name("bench_serve_restart.py")
    out = tmp_path / "restart.json"
    done = subprocess.run([sys.executable, str(script), "--reservations", "40", "--sets", "2",
                           "--runs", "1", "--modes", "plain", "--timeout", "30",
                           "--json", str(out)],
                          capture_output=True, text=True, timeout=120, check=False,
                          env=dict(os.environ, TMPDIR=str(tmp_path)))
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(out.read_text())
    assert figures["settle"]["commits"] == 1
    [sample] = figures["samples"]
    assert sample["mode"] == "plain"
    assert sample["first_batch_commits"] == 0 and sample["commits"] == 1, sample["log"]
    assert 0 < sample["listening_s"] < sample["first_batch_s"]
    assert sample["rss_peak_mb"] >= sample["rss_first_batch_mb"] > 0
    assert "batch of 1 event: committed" in "\n".join(sample["log"]), sample["log"]
    assert "plain: commits of the first batch [0]" in done.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["restart.json"]  # its work directory: gone
