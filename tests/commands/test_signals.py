"""SIGTERM and SIGINT stop `run`, `serve` and `controller` at once, however often they come:
the signal handler takes no lock (gitscale.commands.stop_on_signals)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.helpers import RUNNERSET, make_repo, simple_config, wait_for

# The main thread holds the stop event's lock, as `stop.wait()` does between waking and
# returning, when the signal's Python handler runs: a handler that sets the event there waits
# for its own thread forever.
HELD = textwrap.dedent("""\
    import os, signal, time
    from gitscale.commands import stop_on_signals

    stop = stop_on_signals("testing")
    with stop._cond:
        os.kill(os.getpid(), signal.{name})
        for _ in range(5):
            time.sleep(0.01)  # calls: where the Python handler runs
    print("stopped" if stop.wait(5) else "not stopped", flush=True)
""")


def test_a_signal_while_the_stop_event_is_held_does_not_deadlock() -> None:
    for name in ("SIGTERM", "SIGINT"):
        result = subprocess.run([sys.executable, "-c", HELD.format(name=name)],
                                capture_output=True, text=True, timeout=10)
        assert (result.returncode, result.stdout) == (0, "stopped\n"), result.stderr
        assert f"{name}: testing, then stopping" in result.stderr


def test_run_stops_within_seconds_under_a_burst_of_sigterms(tmp_path: Path) -> None:
    """Five `run` processes, each sent SIGTERM over and over from the moment its loop waits
    for the next pass until it is gone; each must be gone within a few seconds."""
    for attempt in range(5):
        checkout = make_repo(tmp_path / str(attempt), {
            "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 20}"}),
            "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
            "demand.yaml": "linux: {queued: 3, running: 0}\n",
        })
        log = tmp_path / f"{attempt}.log"
        with log.open("w") as err:
            proc = subprocess.Popen([sys.executable, "-m", "gitscale", "run", "--repo",
                                     str(checkout), "--interval", "1s"],
                                    stdout=subprocess.DEVNULL, stderr=err, env=os.environ.copy())
        try:
            wait_for(lambda: "next pass in" in log.read_text(), timeout=20)
            time.sleep(0.1 * attempt)  # somewhere else in the wait each time
            signalled = time.monotonic()
            while proc.poll() is None and time.monotonic() - signalled < 5:
                proc.send_signal(signal.SIGTERM)
                time.sleep(0.0005)
            if proc.poll() is None:
                pytest.fail(f"attempt {attempt}: still running 5 s after the first SIGTERM:\n"
                            + log.read_text())
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        text = log.read_text()
        # killed by a late SIGTERM once Python has put the default handler back: still a stop
        assert proc.returncode in (0, -signal.SIGTERM), text
        assert text.count("SIGTERM: finishing the pass in progress (up to 20s), then stopping") == 1, text
        assert "stopped after" in text and "Traceback" not in text


def interrupted_in_hook(tmp_path: Path, hook_name: str) -> tuple[Path, str]:
    """A checkout whose ``reconcile --no-push`` is sent Ctrl-C (SIGINT to the terminal's
    process group: gitscale, git and its hook) while git runs the hook ``hook_name``; the
    checkout and its HEAD before, once it exited 130 with `interrupted`. The hook is removed."""
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 20}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 3, running: 0}\n",
    })
    ready = tmp_path / "hook-started"
    hook = checkout / ".git" / "hooks" / hook_name
    hook.write_text(f"#!/bin/sh\ntouch '{ready}'\nexec sleep 30\n")
    hook.chmod(0o755)
    base = git_out(checkout, "rev-parse", "HEAD")
    proc = subprocess.Popen([sys.executable, "-m", "gitscale", "reconcile", "--repo",
                             str(checkout), "--no-push"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(ready.exists, timeout=30)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    hook.unlink()
    assert (proc.returncode, err.splitlines()[-1:]) == (130, ["interrupted"]), err
    assert "Traceback" not in err
    return checkout, base


def git_out(checkout: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(checkout), *args], text=True, capture_output=True,
                          check=True).stdout


def test_ctrl_c_while_reconcile_commits_in_a_checkout_puts_the_files_back(tmp_path: Path) -> None:
    """Ctrl-C while the commit is being made (git's prepare-commit-msg hook, run despite
    --no-verify): the edited manifest is put back and the index left as it was, so `git
    status` is clean and no leftovers wait for the next run to discard; exit 130."""
    checkout, base = interrupted_in_hook(tmp_path, "prepare-commit-msg")
    assert git_out(checkout, "status", "--porcelain") == ""  # as it was, nothing staged
    assert git_out(checkout, "rev-parse", "HEAD") == base
    assert not (checkout / ".git" / "index.lock").exists()
    assert not (checkout / ".git" / "gitscale-pending-write.json").exists()


def test_ctrl_c_just_after_git_made_the_commit_leaves_it_for_the_next_run(tmp_path: Path) -> None:
    """Interrupted after the commit exists (in git's post-commit hook): the files are not put
    back under it (a reversed edit over an unpushed commit, refused by every later run); the
    commit and its record stay, and the next run takes them back as its own leftovers."""
    checkout, base = interrupted_in_hook(tmp_path, "post-commit")
    assert git_out(checkout, "rev-parse", "HEAD") != base
    assert git_out(checkout, "status", "--porcelain") == ""
    assert (checkout / ".git" / "gitscale-pending-write.json").exists()
    result = subprocess.run([sys.executable, "-m", "gitscale", "reconcile", "--repo",
                             str(checkout), "--no-push"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert "discarded the leftovers of an interrupted gitscale run" in result.stdout + result.stderr
