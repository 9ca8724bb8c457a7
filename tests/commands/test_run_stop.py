"""`gitscale run` stopped (SIGTERM) while its config repo's git server hangs mid-pass: the pass
in progress gets ``--shutdown-timeout`` from the stop (its fetch or push was bounded only by the
git timeout, 120 s each by default, past the pod's grace period), then run says so and exits 0.
A real ``git http-backend`` on 127.0.0.1 behind a proxy that stops answering."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.commands.test_run_loop import setup, wait_for
from tests.commands.test_serve_stop import TOKEN, git_server, no_lock_left, proxy  # noqa: F401
from tests.helpers import git
from tests.integration.stalling_proxy import StallingProxy


def test_a_pass_held_by_a_hung_git_server_ends_at_the_stop_deadline(
        tmp_path: Path, proxy: StallingProxy) -> None:  # noqa: F811
    checkout = setup(tmp_path)
    remote = tmp_path / "remote.git"
    argv = [sys.executable, "-m", "gitscale", "run", "--repo", proxy.url("remote.git"),
            "--interval", "1s", "--shutdown-timeout", "2s"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=os.environ.copy())  # (GITSCALE_GIT_TIMEOUT=60: git_server's)
    try:
        assert wait_for(lambda: "replicas: 3" in git(remote, "show", "main:sets/linux.yaml"))
        proxy.hang()
        assert wait_for(lambda: proxy.stalled > 0), "no pass tried the hung server"
        # (what the proxy first held may be the tail of the first pass's push, that pass
        # done: past the 1 s interval the second pass is surely in its fetch, held)
        time.sleep(1.5)
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert took < 20, f"the stop took {took:.1f}s"  # (2 s and the stop; it was up to 60 s)
    assert "SIGTERM: finishing the pass in progress (up to 2s), then stopping" in err
    assert ("stopping: the pass in progress did not finish within --shutdown-timeout 2s (git "
            "fetch was stopped at the deadline): what it would have written is left to the next "
            "start, whose first pass decides again") in err, err
    assert "pass failed" not in err, err
    assert err.rstrip().splitlines()[-1].split(" ", 1)[1] == "stopped after 2 passes", err
    assert "Traceback" not in err and TOKEN not in err
    proxy.release()
    assert git(remote, "fsck", "--no-progress") == "" and no_lock_left(remote) == []
    assert checkout.is_dir()


def test_a_push_that_landed_but_went_unanswered_is_said_to_have_maybe_landed(
        tmp_path: Path, proxy: StallingProxy) -> None:  # noqa: F811
    """The pass's push reaches the server, which takes it, and its answer never comes back:
    stopped at the deadline, the pass is not said to have left its write to the next start."""
    setup(tmp_path)
    remote = tmp_path / "remote.git"
    demand = tmp_path / "demand.yaml"
    demand.write_text("linux: {queued: 3, running: 0}\n")
    argv = [sys.executable, "-m", "gitscale", "run", "--repo", proxy.url("remote.git"),
            "--interval", "1s", "--shutdown-timeout", "2s", "--demand", str(demand)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=os.environ.copy())
    try:
        assert wait_for(lambda: "replicas: 3" in git(remote, "show", "main:sets/linux.yaml"))
        proxy.hang_answers()
        demand.write_text("linux: {queued: 5, running: 0}\n")
        assert wait_for(lambda: "replicas: 5" in git(remote, "show", "main:sets/linux.yaml"))
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert ("stopping: the pass in progress did not finish within --shutdown-timeout 2s (git "
            "push was stopped at the deadline before the remote answered: what it pushed may "
            "have landed); the next start's first pass decides again") in err, err
    assert "left to the next start" not in err, err
    assert "Traceback" not in err and TOKEN not in err
