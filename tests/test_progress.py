"""The progress bar: on stderr, only on a terminal, never into JSON, erased when done; what the
commands print is the same with or without it."""
from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

from gitscale.progress import Progress
from tests.helpers import RUNNERSET, git, make_repo


def on_pty(argv: list[str], cwd: Path, delay: str = "0") -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal: (exit code, stdout, what the terminal got)."""
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm", "GITSCALE_PROGRESS_DELAY": delay}
    proc = subprocess.Popen([sys.executable, "-m", "gitscale", *argv], cwd=cwd, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    seen = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    out = proc.stdout.read().decode() if proc.stdout else ""
    return proc.wait(timeout=60), out, seen.decode()


def piped(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TERM": "xterm", "GITSCALE_PROGRESS_DELAY": "0"}
    return subprocess.run([sys.executable, "-m", "gitscale", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three sets and three scaling commits."""
    root = tmp_path_factory.mktemp("progress")
    checkout = make_repo(root, {
        "gitscale.yaml": "".join(f"""\
{"runnerSets:" if n == 0 else ""}
  - name: s{n}
    manifest: sets/s{n}.yaml
    source: {{file: demand.yaml}}
    policy: {{minReplicas: 0, maxReplicas: 20}}
""" for n in range(3)),
        **{f"sets/s{n}.yaml": RUNNERSET.format(name=f"s{n}", replicas=0) for n in range(3)},
        "demand.yaml": "s0: {queued: 1, running: 0}\ns1: {queued: 2, running: 0}\n"
                       "s2: {queued: 3, running: 0}\n",
    })
    for queued in (4, 5):
        (checkout / "demand.yaml").write_text("".join(
            f"s{n}: {{queued: {queued + n}, running: 0}}\n" for n in range(3)))
        git(checkout, "commit", "-qam", "demand")
        git(checkout, "push", "-q")
        assert piped(["reconcile", "--now", f"2026-11-23T09:0{queued}:00Z"], checkout) \
            .returncode == 0
    return checkout


@pytest.mark.parametrize("argv", [
    pytest.param(["history"], id="history"),
    pytest.param(["plan", "--demand", "demand.yaml", "--now", "2026-11-23T10:00:00Z"],
                 id="plan"),
    pytest.param(["simulate", "--synthetic", "steady", "--hours", "0.2"], id="simulate"),
])
def test_a_bar_on_a_terminal_and_nothing_else_changes(repo: Path, argv: list[str]) -> None:
    code, out, terminal = on_pty(argv, repo)
    plain = piped(argv, repo)
    assert code == plain.returncode and code in (0, 2)
    assert out == plain.stdout  # stdout is the same with a bar on stderr
    assert "[" in terminal and "%" in terminal and "\r\x1b[K" in terminal  # drawn, then erased
    assert plain.stderr == ""  # not a terminal: nothing at all
    assert "\r" not in plain.stderr


@pytest.mark.parametrize("argv", [
    pytest.param(["history", "--output", "json"], id="history-json"),
    pytest.param(["plan", "--demand", "demand.yaml", "--output", "json"], id="plan-json"),
])
def test_never_with_json_output(repo: Path, argv: list[str]) -> None:
    code, out, terminal = on_pty(argv, repo)
    assert code in (0, 2) and out.lstrip().startswith(("[", "{"))
    assert terminal == ""


def test_quick_work_shows_nothing_even_on_a_terminal(repo: Path) -> None:
    code, out, terminal = on_pty(["history"], repo, delay="30")
    assert code == 0 and "s2" in out
    assert terminal == ""


def test_bar_drawing_on_a_real_terminal() -> None:
    master, slave = pty.openpty()
    ticks = iter(range(100))
    with open(slave, "w", closefd=True) as stream:
        with Progress("planning", 4, stream=stream, delay=2,
                      clock=lambda: float(next(ticks))) as bar:
            for _ in bar.each(range(4)):
                pass
    chunks = []
    while select.select([master], [], [], 0.2)[0]:
        try:
            chunks.append(os.read(master, 4096))
        except OSError:  # EIO: the writing end is closed and all was read
            break
    os.close(master)
    drawn = b"".join(chunks).decode()
    # started at t=0, 2 s of delay: steps at t=1 draw nothing, t=2 and after draw
    assert "planning [" not in drawn.split("\r")[0]
    assert "planning [######################--------]  75% 3/4" in drawn
    assert "planning [##############################] 100% 4/4" in drawn
    assert drawn.endswith("\r\x1b[K")


def test_not_a_terminal_draws_nothing() -> None:
    stream = io.StringIO()
    with Progress("planning", 3, stream=stream, delay=0) as bar:
        for _ in bar.each(range(3)):
            pass
    assert stream.getvalue() == ""
