"""Fixtures for integration tests against a real git server on loopback.

``git_server`` runs ``git daemon`` (git:// with receive-pack enabled) over a fresh base directory;
``http_git_server`` (see git_http.py) runs ``git http-backend`` behind HTTP Basic auth. Both are
stopped at teardown, and the daemon also dies with the pytest process (parent-death signal).

Every gitscale subprocess gets an isolated git configuration (no system or global config), so a
developer's credential helper or url.insteadOf cannot make a test pass or fail.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

import pytest

from tests.helpers import git, write

from tests.integration.git_http import GitHTTPServer

STARTUP_TIMEOUT = 10.0
CLI_TIMEOUT = 60.0


# -- isolation ------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def isolated_git(tmp_path_factory: pytest.TempPathFactory,
                 monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """No system/global git config and no inherited gitscale credentials, in-process too."""
    empty = tmp_path_factory.mktemp("gitconfig") / "config"
    empty.write_text("")
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": str(empty),
           "GIT_TERMINAL_PROMPT": "0"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name in ("GITSCALE_GIT_TOKEN", "GITSCALE_GIT_TOKEN_FILE", "GITSCALE_GIT_USERNAME",
                 "GITSCALE_AUTHOR", "GIT_ASKPASS", "SSH_ASKPASS", "GIT_DIR", "GIT_WORK_TREE"):
        monkeypatch.delenv(name, raising=False)
    return env


# -- the gitscale CLI as a real subprocess ----------------------------------------------------
@dataclass(frozen=True)
class CliResult:
    code: int
    out: str
    err: str
    argv: list[str]

    def __str__(self) -> str:
        return (f"$ {' '.join(self.argv)}\n(exit {self.code})\n"
                f"--- stdout\n{self.out}--- stderr\n{self.err}")


def cli_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra or {})
    return env


def cli_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "gitscale", *args]


def run_cli(*args: str, cwd: Path, env: Mapping[str, str] | None = None) -> CliResult:
    argv = cli_argv(*args)
    proc = subprocess.run(argv, cwd=cwd, env=cli_env(env), capture_output=True, text=True,
                          timeout=CLI_TIMEOUT)
    return CliResult(proc.returncode, proc.stdout, proc.stderr, argv)


# -- bare repositories ------------------------------------------------------------------------
def make_bare(base: Path, name: str, files: dict[str, str]) -> Path:
    """A bare repo ``base/name`` whose main branch holds ``files`` in one commit."""
    bare = base / name
    git(base, "init", "--quiet", "--bare", "--initial-branch=main", str(bare))
    seed = base / f".seed-{name}"
    seed.mkdir()
    git(seed, "init", "--quiet", "--initial-branch=main")
    write(seed, files)
    git(seed, "add", "--all")
    git(seed, "-c", "user.name=Human", "-c", "user.email=human@example.com",
        "commit", "--quiet", "-m", "Add runner sets")
    git(seed, "push", "--quiet", str(bare), "HEAD:refs/heads/main")
    shutil.rmtree(seed)
    return bare


def rev(bare: Path, spec: str = "refs/heads/main") -> str:
    return git(bare, "rev-parse", spec)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes] | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.02)
    return False


def port_is_closed(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return False
    except OSError:
        return True


# -- git daemon ---------------------------------------------------------------------------------
@dataclass
class GitDaemon:
    base: Path
    port: int
    proc: subprocess.Popen[bytes]
    log: Path
    repos: list[str] = field(default_factory=list)

    def url(self, name: str = "config.git") -> str:
        return f"git://127.0.0.1:{self.port}/{name}"

    def create(self, files: dict[str, str], name: str = "config.git") -> Path:
        self.repos.append(name)
        return make_bare(self.base, name, files)

    def stop(self) -> None:
        if self.proc.poll() is None:
            # The daemon leads its own session: its per-connection children go with it.
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        try:  # stragglers of the session (a connection handler that outlived its parent)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _git_daemon_binary() -> list[str]:
    """The real daemon: ``git daemon`` is a wrapper that forks it as a child, and a parent-death
    signal on the wrapper would orphan the daemon itself."""
    exec_path = subprocess.run(["git", "--exec-path"], capture_output=True, text=True,
                               check=True).stdout.strip()
    binary = Path(exec_path) / "git-daemon"
    return [str(binary)] if binary.is_file() else ["git", "daemon"]


def _daemon_argv(base: Path, port: int) -> list[str]:
    argv = [*_git_daemon_binary(), "--export-all", "--enable=receive-pack", "--reuseaddr",
            "--informative-errors", f"--base-path={base}", "--listen=127.0.0.1",
            f"--port={port}", str(base)]
    setpriv = shutil.which("setpriv")
    if setpriv:  # kill the daemon if pytest itself is killed before teardown runs
        argv = [setpriv, "--pdeathsig", "KILL", "--", *argv]
    return argv


def start_daemon(base: Path) -> GitDaemon:
    log = base.parent / "git-daemon.log"
    for _ in range(5):
        port = free_port()
        with log.open("ab") as sink:
            proc = subprocess.Popen(_daemon_argv(base, port), stdin=subprocess.DEVNULL,
                                    stdout=sink, stderr=sink, start_new_session=True)
        daemon = GitDaemon(base, port, proc, log)
        if wait_for_port(port, proc, STARTUP_TIMEOUT):
            return daemon
        daemon.stop()  # the port was taken in between, or the daemon failed: try another
    raise RuntimeError(f"git daemon did not start; its log:\n{log.read_text()}")


@pytest.fixture
def git_server(tmp_path: Path) -> Iterator[GitDaemon]:
    base = tmp_path / "srv"
    base.mkdir()
    daemon = start_daemon(base)
    try:
        yield daemon
    finally:
        daemon.stop()
        assert daemon.proc.poll() is not None, "git daemon is still running"
        assert port_is_closed(daemon.port), f"something still listens on {daemon.port}"


# -- git http-backend behind Basic auth -------------------------------------------------------
@pytest.fixture
def http_git_server(tmp_path: Path) -> Iterator[GitHTTPServer]:
    root = tmp_path / "http-root"
    root.mkdir()
    token = "tok-" + os.urandom(16).hex()
    server = GitHTTPServer(root, user="x-access-token", token=token)
    server.start()
    try:
        assert wait_for_port(server.port, None, STARTUP_TIMEOUT)
        yield server
    finally:
        server.stop()
        assert port_is_closed(server.port), f"the HTTP git server still listens on {server.port}"
