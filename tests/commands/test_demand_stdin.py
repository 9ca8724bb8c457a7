"""`--demand -` (standard input) and `--demand <(…)` or a FIFO named on the command line: read
once per process, to at most ``files.MAX_BYTES``, errors naming `--demand (stdin)` or the path
as typed, at their line. (A FIFO in the config repo is still refused:
tests/test_hostile_files.py.)"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gitscale.files import MAX_BYTES
from tests.helpers import RUNNERSET, git, make_repo, simple_config


def setup(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 20}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 1, running: 0}\n",
    })


def gitscale(*argv: str, cwd: Path, stdin: bytes | None = None,
             stdin_file: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI in a child process, ``stdin`` (or the file ``stdin_file``) on its standard
    input."""
    with open(stdin_file or os.devnull, "rb") as handle:
        result = subprocess.run([sys.executable, "-m", "gitscale", *argv], cwd=cwd,
                                input=stdin, stdin=None if stdin is not None else handle,
                                capture_output=True, timeout=60, check=False)
    return subprocess.CompletedProcess(result.args, result.returncode,
                                       result.stdout.decode(), result.stderr.decode())


def in_bash(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``script`` run by bash, ``$1`` the Python that runs gitscale, then ``args``."""
    return subprocess.run(["bash", "-c", script, "bash", sys.executable, *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False)


def test_plan_reads_the_demand_from_standard_input(tmp_path: Path) -> None:
    checkout = setup(tmp_path)
    result = gitscale("plan", "--repo", str(checkout), "--demand", "-", cwd=tmp_path,
                      stdin=b"linux: {queued: 40, running: 0}\n")
    assert result.returncode == 2, result
    assert "~ linux  0 → 20" in result.stdout, result.stdout
    assert "demand 40 (queued 40, running 0)" in result.stdout, result.stdout


def test_plan_reads_a_process_substitution(tmp_path: Path) -> None:
    """`<(…)` is /dev/fd/63, a pipe: `Path.resolve` made it /proc/…/pipe:[…] ("demand file
    not found"), and only regular files were read."""
    checkout = setup(tmp_path)
    result = in_bash('"$1" -m gitscale plan --repo "$2" --demand '
                     '<(printf "linux: {queued: 7, running: 0}\\n")', str(checkout),
                     cwd=tmp_path)
    assert result.returncode == 2, result
    assert "demand 7 (queued 7, running 0)" in result.stdout, result.stdout


def test_reconcile_reads_a_fifo_named_on_the_command_line(tmp_path: Path) -> None:
    """A FIFO made with mkfifo, its writer starting after gitscale: waited for, as `cat`
    would, then read."""
    checkout = setup(tmp_path)
    fifo = tmp_path / "what-if"
    os.mkfifo(fifo)

    def writer() -> None:
        with open(fifo, "w") as out:  # (waits for gitscale to open it)
            out.write("linux: {queued: 5, running: 0}\n")

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    result = gitscale("reconcile", "--repo", str(checkout), "--demand", "what-if", cwd=tmp_path)
    thread.join(timeout=10)
    assert result.returncode == 0, result
    assert "replicas: 5" in git(tmp_path / "remote.git", "show", "main:sets/linux.yaml")


@pytest.mark.parametrize(("stdin", "said"), [
    pytest.param(b"linux: {queued: 1, running: 0}\n# caf\xe9\n",
                 "error: --demand (stdin):2: is not UTF-8 text: byte 0xe9 at column 6; save "
                 "the file as UTF-8", id="latin-1"),
    pytest.param(b"linux: {queued: 1, running: 0}\nlinus: {queued: 1, running: 0}\n",
                 "error: --demand (stdin):2: names a runner set that gitscale.yaml does not "
                 "declare: linus (did you mean linux?); gitscale.yaml declares linux",
                 id="unknown-set"),
    pytest.param(b"linux: {queued: 1, running: 0}\n\nlinux: {queued: 1, running: -1}\n",
                 "error: --demand (stdin):3: ", id="bad-value"),
    pytest.param(b"", "error: --demand (stdin): expected one YAML or JSON mapping",
                 id="empty"),
    pytest.param(None, f"error: --demand (stdin): is larger than {MAX_BYTES:,} bytes "
                 "(gitscale's limit)", id="dev-zero"),
])
def test_bad_standard_input_is_said_and_nothing_lands(tmp_path: Path, stdin: bytes | None,
                                                      said: str) -> None:
    checkout = setup(tmp_path)
    before = git(tmp_path / "remote.git", "rev-parse", "main")
    result = gitscale("reconcile", "--repo", str(checkout), "--demand", "-", cwd=tmp_path,
                      stdin=stdin, stdin_file=Path("/dev/zero") if stdin is None else None)
    assert result.returncode == 1, result
    assert result.stderr.startswith(said), result.stderr
    assert "Traceback" not in result.stderr
    assert git(tmp_path / "remote.git", "rev-parse", "main") == before


def test_a_closed_standard_input_is_said(tmp_path: Path) -> None:
    """`<&-`: descriptor 0 is no one's, and the next file opened would take it."""
    checkout = setup(tmp_path)
    result = in_bash('"$1" -m gitscale plan --repo "$2" --demand - <&-', str(checkout),
                     cwd=tmp_path)
    assert result.returncode == 1, result
    assert result.stderr == "error: --demand (stdin): standard input is closed: pipe the " \
        "demand into gitscale, or give a file\n", result.stderr


def test_a_bad_process_substitution_is_said_by_its_path_not_procs(tmp_path: Path) -> None:
    checkout = setup(tmp_path)
    result = in_bash('"$1" -m gitscale plan --repo "$2" --demand '
                     '<(printf "linux: {queued: 1, running: 0}\\n# caf\\xe9\\n")',
                     str(checkout), cwd=tmp_path)
    assert result.returncode == 1, result
    assert result.stderr.startswith("error: /dev/fd/"), result.stderr
    assert ":2: is not UTF-8 text: byte 0xe9 at column 6" in result.stderr, result.stderr
    assert "/proc/" not in result.stderr and "pipe:[" not in result.stderr, result.stderr


def test_a_missing_file_is_named_as_typed(tmp_path: Path) -> None:
    checkout = setup(tmp_path)
    result = gitscale("plan", "--repo", str(checkout), "--demand", "what-if/none.yaml",
                      cwd=tmp_path)
    assert result.returncode == 1, result
    assert result.stderr == "error: what-if/none.yaml: demand file not found\n", result.stderr


class NoWait(threading.Event):
    """`run`'s stop event, whose wait between passes (on the main thread) returns at once;
    other threads' waits (the stop deadline's watch) wait as ever."""

    def wait(self, timeout: float | None = None) -> bool:
        if threading.current_thread() is threading.main_thread():
            return self.is_set()
        return super().wait(timeout)


def test_run_reads_a_pipe_once_and_decides_every_pass_from_it(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A second read of the pipe would find it empty (an error for every pass after the
    first): `run` keeps what it held."""
    from gitscale.commands import RepoOptions
    from gitscale.commands.run import run_loop

    checkout = setup(tmp_path)
    read, write = os.pipe()
    os.write(write, b"linux: {queued: 3, running: 0}\n")
    os.close(write)
    try:
        code = run_loop(RepoOptions(str(checkout), None, "gitscale.yaml"), interval="30s",
                        demand=f"/dev/fd/{read}", max_passes=3, stop=NoWait())
    finally:
        os.close(read)
    err = capfd.readouterr().err
    assert code == 0, err
    assert "stopped after 3 passes" in err and "error" not in err.lower(), err
    assert "replicas: 3" in git(tmp_path / "remote.git", "show", "main:sets/linux.yaml")
