"""Files that would hang gitscale or eat the machine's memory: a FIFO, /dev/zero, a huge file,
a YAML alias bomb. Each is refused with an error naming it; nothing is written.

Each runs gitscale in a child process with a memory cap and a timeout: a regression must fail
its test, not hang the test run or exhaust the machine.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from gitscale.files import MAX_BYTES
from tests.helpers import RUNNERSET, git, make_repo, simple_config

BOMB = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['lol'] * 9)}]\n"
    for prev, name in zip(["", *"abcdefgh"], "abcdefghi"))


def _cap_memory() -> None:
    limit = 1024 * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def gitscale(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitscale", *argv], capture_output=True,
                          text=True, timeout=60, check=False, preexec_fn=_cap_memory)


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "default"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=2),
        "demand.yaml": "linux: {queued: 1, running: 0}\n",
    })


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _huge(path: Path) -> Path:
    with path.open("wb") as out:
        out.truncate(MAX_BYTES + 1)  # sparse: costs no disk
    return path


@pytest.mark.parametrize(("make", "words"), [
    pytest.param(lambda d: d / "bomb.yaml", [":6: aliases expand to more than"], id="alias-bomb"),
    pytest.param(lambda d: Path("/dev/zero"), ["not a regular file (a device)"], id="dev-zero"),
    pytest.param(lambda d: _huge(d / "huge.yaml"), ["gitscale reads files of at most"],
                 id="huge"),
])
def test_demand_option(tmp_path: Path, checkout: Path, make, words: list[str]) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "bomb.yaml").write_text(BOMB)
    demand = make(tmp_path)
    before = git(checkout, "rev-parse", "HEAD")
    result = gitscale("reconcile", "--repo", str(checkout), "--demand", str(demand))
    assert result.returncode == 1, result
    assert result.stderr.startswith(f"error: {demand}"), result.stderr
    for word in words:
        assert word in result.stderr, result.stderr
    assert git(checkout, "rev-parse", "HEAD") == before
    assert not git(checkout, "status", "--porcelain", "--untracked-files=no")


def test_a_fifo_as_the_config_repos_demand_file(checkout: Path) -> None:
    """A FIFO named on the command line is read (`--demand <(…)`, tests/commands/
    test_demand_stdin.py); one in the config repo (`source: {file: demand.yaml}`) is not: no
    one is there to write it, and the pass would wait for ever. Its set is left untouched, the
    error at its line."""
    (checkout / "demand.yaml").unlink()
    _fifo(checkout / "demand.yaml")
    result = gitscale("plan", "--repo", str(checkout))
    assert result.returncode == 1, result
    assert "! linux" in result.stdout, result.stdout
    assert "demand.yaml: is not a regular file (a FIFO); gitscale reads only regular files" \
        in result.stdout, result.stdout


def test_a_fifo_as_manifest(checkout: Path) -> None:
    manifest = checkout / "sets" / "linux.yaml"
    manifest.unlink()
    os.mkfifo(manifest)
    result = gitscale("plan", "--repo", str(checkout))
    assert result.returncode == 1, result
    assert "sets/linux.yaml: is not a regular file (a FIFO)" in result.stderr, result.stderr


def test_a_fifo_as_the_config(checkout: Path) -> None:
    (checkout / "gitscale.yaml").unlink()
    os.mkfifo(checkout / "gitscale.yaml")
    result = gitscale("plan", "--repo", str(checkout))
    assert result.returncode == 1, result
    assert "gitscale.yaml: is not a regular file (a FIFO)" in result.stderr, result.stderr


@pytest.mark.parametrize("file", ["gitscale.yaml", "demand.yaml", "sets/linux.yaml"])
def test_an_alias_bomb_in_the_repo(checkout: Path, file: str) -> None:
    path = checkout / file
    path.write_text(path.read_text() + "bomb:\n" + "".join(f"  {line}\n" for line in
                                                          BOMB.splitlines()))
    result = gitscale("plan", "--repo", str(checkout))
    assert result.returncode == 1, result
    said = result.stdout + result.stderr  # a demand file's error is that set's line in the plan
    assert f"{file}:" in said and "aliases expand to more than 100,000 values" in said, said


def thousand_objects(checkout: Path) -> None:
    """sets/linux.yaml as one file of a thousand RunnerSets, linux-0 to linux-999."""
    (checkout / "sets" / "linux.yaml").write_text("---\n".join(
        RUNNERSET.format(name=f"linux-{i}", replicas=2) for i in range(1000)))


def test_a_shared_anchor_is_still_fine(checkout: Path) -> None:
    """Anchors are how people share a policy between sets: a thousand uses stay well inside.
    (Each set its own object: two sets on one object are refused, once per object.)"""
    sets = "".join(f"  - {{name: s{i}, manifest: sets/linux.yaml, source: {{file: demand.yaml}}, "
                   f"policy: *p, object: {{name: linux-{i}}}}}\n" if i else
                   "  - {name: s0, manifest: sets/linux.yaml, source: {file: demand.yaml}, "
                   "policy: &p {minReplicas: 0, maxReplicas: 5, scaleDownDelay: 5m}, "
                   "object: {name: linux-0}}\n"
                   for i in range(1000))
    (checkout / "gitscale.yaml").write_text("runnerSets:\n" + sets)
    thousand_objects(checkout)
    result = gitscale("validate", "--repo", str(checkout))
    assert result.returncode == 0, result
    assert "1000 checked" in result.stdout, result


def test_a_thousand_sets_on_one_object_are_one_problem_said_at_once(checkout: Path) -> None:
    """999 entries copied without changing their object: one problem for the object, naming the
    first copy's line and a few more (each line looked up costs a read of gitscale.yaml: one
    problem per set took minutes)."""
    sets = "".join(f"  - {{name: s{i}, manifest: sets/linux.yaml, source: {{file: demand.yaml}}, "
                   "policy: {maxReplicas: 5}, object: {name: linux}}\n" for i in range(1000))
    (checkout / "gitscale.yaml").write_text("runnerSets:\n" + sets)
    result = gitscale("validate", "--repo", str(checkout))
    assert result.returncode == 1, result
    problems = [line for line in result.stderr.splitlines() if "resolves to" in line]
    assert len(problems) == 1, result.stderr
    assert problems[0].startswith("error: gitscale.yaml:3: runner set 's1': "), problems
    assert problems[0].endswith("(so do runner sets 's2', 's3', 's4' and 995 more)"), problems


def test_a_thousand_sets_on_one_broken_file_are_one_problem_said_at_once(checkout: Path) -> None:
    """A file of a thousand objects, one per set, whose YAML breaks at its end: read and
    parsed once, its error said once (it was parsed again for each set, the last error found
    only after minutes)."""
    sets = "".join(f"  - {{name: s{i}, manifest: sets/linux.yaml, source: {{file: demand.yaml}}, "
                   f"policy: {{maxReplicas: 5}}, object: {{name: linux-{i}}}}}\n"
                   for i in range(1000))
    (checkout / "gitscale.yaml").write_text("runnerSets:\n" + sets)
    (checkout / "sets" / "linux.yaml").write_text("---\n".join(
        RUNNERSET.format(name=f"linux-{i}", replicas=2) for i in range(1000)) + "---\nx: [\n")
    result = gitscale("validate", "--repo", str(checkout))
    assert result.returncode == 1, result
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: sets/linux.yaml:"), result.stderr
    assert "not valid YAML" in errors[0], result.stderr


def test_a_missing_file_of_many_sets_is_one_problem(checkout: Path) -> None:
    """The manifest of 300 sets missing: said once, at the first set's line (not once per
    set, each looking its line up in gitscale.yaml)."""
    sets = "".join(f"  - {{name: s{i}, manifest: sets/gone.yaml, source: {{file: demand.yaml}}, "
                   f"policy: {{maxReplicas: 5}}, object: {{name: linux-{i}}}}}\n"
                   for i in range(300))
    (checkout / "gitscale.yaml").write_text("runnerSets:\n" + sets)
    result = gitscale("validate", "--repo", str(checkout))
    assert result.returncode == 1, result
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == ["error: gitscale.yaml:2: runner set 's0': manifest sets/gone.yaml not "
                      "found in the config repo"], result.stderr


def test_a_thousand_sets_each_with_a_warning_are_said_at_once(checkout: Path) -> None:
    """A thousand sets whose source was moved to Buildkite while their RunnerSets (one file of
    a thousand) still run GitHub runners: a warning each, at its lines. Each warning composed
    gitscale.yaml again for its line, and the manifest's whole text for its document's (a
    minute and more each, one set per file or all in one)."""
    sets = "".join(f"  - {{name: s{i}, manifest: sets/linux.yaml, source: {{buildkite: "
                   f"{{queue: q}}}}, policy: {{maxReplicas: 5}}, object: {{name: linux-{i}}}}}\n"
                   for i in range(1000))
    (checkout / "gitscale.yaml").write_text("runnerSets:\n" + sets)
    thousand_objects(checkout)
    result = gitscale("validate", "--repo", str(checkout))
    assert result.returncode == 0, result
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1000, result.stderr[-2000:]
    per_object = RUNNERSET.count("\n") + 1  # (and its "---" line)
    assert warnings[-1].startswith(
        f"warning: gitscale.yaml:1001: runner set 's999': its source counts buildkite jobs, "
        f"and its RunnerSet at sets/linux.yaml:{999 * per_object + 7} runs platform github"), \
        warnings[-1]
