"""The hold a pass takes on a checkout (``Workspace.exclusive``): a second holder waits, says
who it waits for, gives up at its deadline with nothing written; a killed holder leaves no lock
behind (the kernel releases an ``flock`` with its process); a clone takes no lock at all.
The race it serves, two real processes in one checkout, is tests/integration/test_one_checkout.py.
"""
from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gitscale.errors import GitError
from gitscale.repo.checkout_lock import LOCK
from gitscale.repo.opening import open_workspace
from tests.helpers import RUNNERSET, git, make_repo, run, simple_config

HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.pwrite(fd, b"%d\\n" % os.getpid(), 0)
print("held", flush=True)
time.sleep(600)
"""
# Another user's lock file, which this one may not write: held through a read-only descriptor.
HOLD_READ_ONLY = HOLD.replace("os.O_RDWR | os.O_CREAT", "os.O_RDONLY").replace(
    'os.pwrite(fd, b"%d\\n" % os.getpid(), 0)\n', "")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 9}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 3, running: 0}\n"})


def hold(lock: Path, script: str = HOLD) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", script, str(lock)], stdout=subprocess.PIPE,
                              text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


def test_a_second_holder_waits_says_for_whom_and_gives_up(checkout: Path) -> None:
    holder = hold(checkout / ".git" / LOCK)
    said: list[str] = []
    try:
        with open_workspace(str(checkout), None) as ws:
            started = time.monotonic()
            with pytest.raises(GitError) as caught:
                with ws.exclusive(0.5, said.append):
                    raise AssertionError("entered while another process holds the checkout")
            assert time.monotonic() - started >= 0.5
    finally:
        holder.kill()
        holder.wait()
    assert said == [f"waiting for another gitscale run in {checkout} (pid {holder.pid}) to "
                    "finish its pass"]
    assert f"another gitscale run (pid {holder.pid}) has been writing in this checkout for " \
           "more than 0.5 s" in str(caught.value)
    assert "nothing was written" in str(caught.value)
    # the waiter never held it: the holder's number is left as the holder wrote it
    assert (checkout / ".git" / LOCK).read_text() == f"{holder.pid}\n"


def test_a_killed_holder_leaves_no_lock_and_the_next_pass_lands(checkout: Path,  # type: ignore[no-untyped-def]
                                                               capsys) -> None:
    holder = hold(checkout / ".git" / LOCK)
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert (checkout / ".git" / LOCK).exists()  # the file stays; its lock went with its holder
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, out + err
    assert "and pushed to origin/main" in out and "waiting" not in err
    assert git(checkout.parent / "remote.git", "log", "-1", "--format=%s", "main") == \
        "gitscale: linux 0→3"


def test_the_lock_is_held_for_the_pass_only(checkout: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    lock = checkout / ".git" / LOCK
    with open_workspace(str(checkout), None) as ws:
        with ws.exclusive(1.0):
            fd = os.open(lock, os.O_RDWR)
            try:
                with pytest.raises(BlockingIOError):
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                assert lock.read_text() == f"{os.getpid()}\n"
            finally:
                os.close(fd)
        assert lock.read_text() == ""  # let go: no holder named any more
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released: free again
        finally:
            os.close(fd)


def test_a_holder_that_cannot_write_its_number_is_not_named_after_the_last_one(  # type: ignore[no-untyped-def]
        checkout: Path, capsys) -> None:
    """A pass that lets go takes its process number out of the lock file: a later holder
    through a read-only descriptor, which cannot write its own, is "pid unknown" to a waiter,
    not the number of a process gone (which another process may have by then)."""
    lock = checkout / ".git" / LOCK
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0 and "pushed" in out, err
    assert lock.read_text() == ""
    holder = hold(lock, HOLD_READ_ONLY)
    said: list[str] = []
    try:
        with open_workspace(str(checkout), None) as ws:
            with pytest.raises(GitError) as caught:
                with ws.exclusive(0.2, said.append):
                    raise AssertionError("entered while another process holds the checkout")
    finally:
        holder.kill()
        holder.wait()
    assert said == [f"waiting for another gitscale run in {checkout} (pid unknown) to finish "
                    "its pass"]
    assert "another gitscale run (pid unknown)" in str(caught.value)


def test_a_clone_takes_no_lock(checkout: Path) -> None:
    holder = hold(checkout.parent / "remote.git" / LOCK)  # (where none would be looked for)
    try:
        with open_workspace(str(checkout.parent / "remote.git"), None) as ws:
            with ws.exclusive(0.0):
                assert not (ws.git.git_path(LOCK)).exists()
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("argv", [
    pytest.param(["plan", "--demand", "demand.yaml"], id="plan"),
    pytest.param(["crd"], id="crd"),
])
def test_plan_and_crd_wait_for_a_pass_writing_in_the_checkout(  # type: ignore[no-untyped-def]
        checkout: Path, capsys, monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> None:
    """plan would read the writer's edit in progress; crd's commit would collide with its
    commit: both wait for the holder (here gone after a moment), say for whom, then go on."""
    holder = hold(checkout / ".git" / LOCK)
    releaser = subprocess.Popen([sys.executable, "-c",
                                 f"import os, signal, time; time.sleep(0.5); "
                                 f"os.kill({holder.pid}, signal.SIGKILL)"])
    monkeypatch.chdir(checkout)
    try:
        started = time.monotonic()
        code, out, err = run(capsys, *argv, "--repo", str(checkout))
        waited = time.monotonic() - started
    finally:
        releaser.wait()
        holder.kill()
        holder.wait()
    assert f"waiting for another gitscale run in {checkout} (pid {holder.pid})" in err
    assert waited >= 0.4
    assert code == (2 if argv[0] == "plan" else 0), out + err


def test_a_lock_that_cannot_be_opened_stops_a_writer_and_not_plan(checkout: Path,  # type: ignore[no-untyped-def]
                                                                 capsys) -> None:
    """As on a read-only mount: the lock file can be neither created nor opened (here a
    dangling symlink into a folder that does not exist). `plan` writes nothing and no writer
    can be editing there, so it goes on without the hold; `reconcile` stops, naming the file,
    with nothing written and no traceback."""
    lock = checkout / ".git" / LOCK
    lock.symlink_to(checkout / "no-such-folder" / "lock")
    head = git(checkout, "rev-parse", "HEAD")
    code, out, err = run(capsys, "plan", "--repo", str(checkout), "--demand",
                         str(checkout / "demand.yaml"))
    assert code == 2 and "linux" in out, err
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1 and "Traceback" not in err
    assert f"cannot hold the checkout for this pass: {lock}: No such file or directory" in err
    assert git(checkout, "rev-parse", "HEAD") == head and git(checkout, "status",
                                                              "--porcelain") == ""
