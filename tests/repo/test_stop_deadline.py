"""A stopping process's git commands that talk to a remote end at its stop deadline
(``--shutdown-timeout`` from the stop), however long the git timeout is; its local commands
finish; other threads' commands are not touched."""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from gitscale.errors import GitStopped, InputError
from gitscale.repo.deadline import StopDeadline, seconds_of, stop_deadline, stopping_by
from gitscale.repo.git import Git
from tests.repo.stuck import alive, install_stuck_helper


@pytest.fixture(autouse=True)
def long_git_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITSCALE_GIT_TIMEOUT", "60")  # only the stop deadline can end git


def test_a_remote_command_running_at_the_stop_ends_at_the_deadline_with_its_helpers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pids_file = install_stuck_helper(tmp_path, monkeypatch)
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()  # the stop comes while git waits on the remote
    began = time.monotonic()
    with stopping_by(StopDeadline(0.5), stop):
        with pytest.raises(GitStopped) as raised:
            Git(tmp_path).run("ls-remote", "stuck::nowhere")
    took = time.monotonic() - began
    assert took < 10, took  # (0.8 s: 0.3 s to the stop, then its 0.5 s)
    assert took >= 0.75, took  # (not before the deadline)
    assert str(raised.value) == (
        "git ls-remote was stopped: the process is stopping and its stop deadline "
        "(--shutdown-timeout 0.5s after the stop) passed before git was done with the remote")
    pids = [int(p) for p in pids_file.read_text().split()]
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if alive(p)], "the helper or its child outlived git"


def test_past_the_deadline_a_remote_command_is_not_started(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pids_file = install_stuck_helper(tmp_path, monkeypatch)
    stop = threading.Event()
    stop.set()
    deadline = StopDeadline(0.0)
    deadline.start()
    with stopping_by(deadline, stop):
        for args in (("fetch", "stuck::nowhere", "main"), ("-c", "a.b=c", "push", "x", "y")):
            with pytest.raises(GitStopped, match=rf"^git {args[-3]} was stopped") as raised:
                Git(tmp_path).run(*args)
            assert not raised.value.may_have_landed()  # (refused: nothing reached the remote)
    assert not pids_file.exists(), "the remote helper was started"


def test_local_commands_finish_past_the_deadline_and_other_threads_are_not_touched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit or a reset killed half-way could leave a checkout's index.lock: local
    commands are left to finish (a git alias here stands for a slow one)."""
    pids_file = install_stuck_helper(tmp_path, monkeypatch)
    stop = threading.Event()
    stop.set()
    deadline = StopDeadline(0.0)
    deadline.start()
    outside: list[BaseException | str] = []

    def elsewhere() -> None:  # a thread of its own: no stop deadline
        assert stop_deadline() is None
        try:
            Git(tmp_path).run("ls-remote", "stuck::nowhere")
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            outside.append(exc)
        outside.append("done")

    with stopping_by(deadline, stop):
        slow = Git(tmp_path).run("-c", "alias.slow=!sleep 0.3 && echo finished", "slow")
        assert slow.stdout.strip() == "finished"
        thread = threading.Thread(target=elsewhere, daemon=True)
        thread.start()
        thread.join(1.0)
        assert thread.is_alive(), outside  # still waiting on the remote: not stopped
    assert stop_deadline() is None
    pids = [int(p) for p in pids_file.read_text().split()]
    for pid in pids:  # (end the helper: the thread's git then fails and returns)
        os.kill(pid, signal.SIGKILL)
    thread.join(10)
    assert not thread.is_alive()


@pytest.mark.parametrize("text, seconds", [
    pytest.param("20", 20.0, id="seconds"),
    pytest.param("20s", 20.0, id="duration"),
    pytest.param("1m", 60.0, id="minutes"),
    pytest.param(" 2.5 ", 2.5, id="fraction"),
])
def test_shutdown_timeout_values(text: str, seconds: float) -> None:
    assert seconds_of("--shutdown-timeout", text) == seconds


@pytest.mark.parametrize("text", ["0", "0.5s", "2h", "soon", "-5", ""])
def test_shutdown_timeout_refused_values_name_the_option(text: str) -> None:
    with pytest.raises(InputError, match=r"--shutdown-timeout.*expected a duration from 1s to "
                                         r"3600s such as 20, 20s or 1m"):
        seconds_of("--shutdown-timeout", text)


# An upload-pack that sends the pack's start, then holds the rest back (a remote that stalls
# mid-transfer): real git upload-pack behind a pipe that stops forwarding after "PACK".
_STALLING_UPLOAD_PACK = """#!{python}
import os, subprocess, sys, time
proc = subprocess.Popen(["git", "upload-pack", *sys.argv[1:]], stdout=subprocess.PIPE)
seen = b""
while chunk := os.read(proc.stdout.fileno(), 65536):
    at = (seen[-3:] + chunk).find(b"PACK")
    if at >= 0:
        os.write(1, chunk[:max(0, at - 3) + 16])
        time.sleep(60)
    os.write(1, chunk)
    seen += chunk
"""


def _commit(repo: Path, name: str) -> None:
    (repo / name).write_text(name)
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    Git(repo).run("add", name)
    Git(repo).run(*ident, "commit", "--quiet", "-m", name)


def test_a_shallow_fetch_ended_at_the_deadline_leaves_no_lock_behind(tmp_path: Path) -> None:
    """git holds ``.git/shallow.lock`` while a depth-1 fetch (a kept clone's sync) receives
    the pack: killed outright there, the lock stayed, and every later fetch in that clone
    failed ('Unable to create …/shallow.lock: File exists'). Asked to end, git removes it."""
    remote = tmp_path / "remote"
    remote.mkdir()
    Git(remote).run("init", "--quiet", "-b", "main")
    _commit(remote, "one")
    clone = tmp_path / "clone"
    Git(tmp_path).run("clone", "--quiet", "--depth=1", f"file://{remote}", str(clone))
    _commit(remote, "two")
    wrapper = tmp_path / "upload-pack"
    wrapper.write_text(_STALLING_UPLOAD_PACK.format(python=sys.executable))
    wrapper.chmod(0o755)
    Git(clone).run("config", "remote.origin.uploadpack", str(wrapper))
    stop = threading.Event()
    stop.set()
    with stopping_by(StopDeadline(0.5), stop):
        with pytest.raises(GitStopped):
            Git(clone).fetch("origin", "main", depth=1)
    assert not list((clone / ".git").glob("*.lock")), "git was killed holding its lock"
    Git(clone).run("config", "--unset", "remote.origin.uploadpack")
    assert Git(clone).fetch("origin", "main", depth=1) == Git(remote).head()
