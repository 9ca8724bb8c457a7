"""`gitscale run` through an outage of its git server (a real `git daemon` on loopback, stopped
and started again on the same port): it waits for the remote, whether it was down at the
loop's start or went away later, says a streak of the same failure in one line a pass, and
lands once the remote answers again, from a kept clone that still works."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from tests.helpers import RUNNERSET, git, simple_config, wait_for
from tests.integration.conftest import GitDaemon, _daemon_argv, cli_env, make_bare, \
    wait_for_port

# the loop with its backoff capped at --interval (1 s): the test needs passes, not waits
FAST_RUN = """
import sys
import gitscale.commands.run as run
run.BACKOFF_CAP = 0.0
from gitscale.cli import main
sys.exit(main(sys.argv[1:]))
"""

FILES = {
    "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 20}"}),
    "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
    "demand.yaml": "linux: {queued: 3, running: 0}\n",
}


def restart(daemon: GitDaemon) -> None:
    """The same daemon (same port, same repositories) started again after ``stop``."""
    with daemon.log.open("ab") as sink:
        daemon.proc = subprocess.Popen(_daemon_argv(daemon.base, daemon.port),
                                       stdin=subprocess.DEVNULL, stdout=sink, stderr=sink,
                                       start_new_session=True)
    assert wait_for_port(daemon.port, daemon.proc, 10.0)


def more_demand(tmp_path: Path, remote: Path) -> None:
    """A person pushes more demand (5 queued) to ``remote``."""
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(remote), str(work))
    (work / "demand.yaml").write_text("linux: {queued: 5, running: 0}\n")
    git(work, "-c", "user.name=A", "-c", "user.email=a@example.com", "commit", "-qam",
        "more demand")
    git(work, "push", "-q")


def stopped_cleanly(proc: subprocess.Popen[bytes], log: Path) -> str:
    """SIGTERM to the loop: it stops, exit 0, no traceback; its log."""
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    text = log.read_text()
    assert proc.returncode == 0, text
    assert "Traceback" not in text
    return text


def failures(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if " pass failed (" in line]


def test_run_waits_for_its_remote_and_lands_when_it_is_back(git_server: GitDaemon,
                                                            tmp_path: Path) -> None:
    bare = git_server.create(FILES)
    git_server.stop()  # down before the loop starts: a Deployment restarted in an outage
    log = tmp_path / "run.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", FAST_RUN, "run", "--repo", git_server.url(),
             "--interval", "1s"], stdout=subprocess.DEVNULL, stderr=err,
            env=cli_env({"GITSCALE_CACHE_DIR": str(tmp_path / "cache")}))
    try:
        wait_for(lambda: len(failures(log)) >= 3 or proc.poll() is not None, 30.0)
        assert proc.poll() is None, log.read_text()  # before: exit 1 on the first clone
        restart(git_server)
        wait_for(lambda: "replicas: 3" in git(bare, "show", "main:sets/linux.yaml"), 30.0)
        # and the push's report read: a daemon stopped as the ref moves cuts the push short,
        # which the loop counts as one more failure of the first streak
        wait_for(lambda: " and pushed to " in log.read_text(), 30.0)
        # down again while it runs (its kept clone's fetch fails), then back with new demand
        git_server.stop()
        seen = len(failures(log))
        wait_for(lambda: len(failures(log)) >= seen + 3, 30.0)
        more_demand(tmp_path, bare)
        restart(git_server)
        wait_for(lambda: "replicas: 5" in git(bare, "show", "main:sets/linux.yaml"), 30.0)
    finally:
        text = stopped_cleanly(proc, log)
    lines = text.splitlines()
    # each streak: its first failure whole (git's command and output), each repeat one line
    firsts = [i for i, line in enumerate(lines) if " pass failed (1 in a row): " in line]
    assert len(firsts) == 2, text
    assert "git clone" in lines[firsts[0]] and "git fetch" in lines[firsts[1]], text
    repeats = [line for line in lines if " in a row since " in line]
    assert len(repeats) >= 4, text
    for line in repeats:
        assert line.endswith(": the same error again: 127.0.0.1[0: 127.0.0.1]: "
                             "errno=Connection refused"), line
    assert lines[firsts[0] + 1].endswith("unable to connect to 127.0.0.1:"), text
    # the pass that lands after a streak says so
    back = [line for line in lines if "(recovered: " in line]
    assert len(back) == 2 and "linux 0→3" in back[0] and "linux 3→5" in back[1], text
    log_of = git(bare, "log", "--format=%s", "main").splitlines()
    assert log_of[:3] == ["gitscale: linux 3→5", "more demand", "gitscale: linux 0→3"]


def test_max_passes_against_a_remote_that_never_answers(tmp_path: Path) -> None:
    """Every pass fails: each is counted, the exit code is the last one's (1), no traceback."""
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = subprocess.run(
        [sys.executable, "-c", FAST_RUN, "run", "--repo", f"git://127.0.0.1:{port}/x.git",
         "--interval", "1s", "--max-passes", "3"], capture_output=True, text=True, timeout=60,
        env={**os.environ, "GITSCALE_CACHE_DIR": str(tmp_path / "cache")})
    assert result.returncode == 1, result.stderr
    assert "stopped after 3 passes" in result.stderr, result.stderr
    assert len([line for line in result.stderr.splitlines() if " pass failed (" in line]) == 3
    assert "pass failed (3 in a row since " in result.stderr
    assert "Traceback" not in result.stderr


def break_the_kept_clone_then(tmp_path: Path, meanwhile: Callable[[Path], Any] = lambda _: None,
                              failed: str = " pass failed (") -> None:
    """`run` on a local bare remote; once it landed, its kept clone breaks under it (its
    objects gone: a fetch cut by a full disk, a clean-up of /tmp) and ``meanwhile(remote)``
    happens; once the log says ``failed``, a person's push of more demand must land (the
    clone made again), and SIGTERM stops the loop cleanly, exit 0."""
    remote = make_bare(tmp_path, "remote.git", FILES)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    log = tmp_path / "run.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", FAST_RUN, "run", "--repo", str(remote), "--interval", "1s"],
            stdout=subprocess.DEVNULL, stderr=err,
            env=cli_env({"GITSCALE_CACHE_DIR": str(tmp_path / "cache"), "TMPDIR": str(scratch)}))
    try:
        wait_for(lambda: "replicas: 3" in git(remote, "show", "main:sets/linux.yaml"), 30.0)
        wait_for(lambda: " and pushed to " in log.read_text(), 30.0)  # (the push over)
        [clone] = scratch.glob(f"gitscale-clone.*.{proc.pid}.*")
        for _ in range(50):  # (the loop's next pass may be writing objects meanwhile)
            try:
                shutil.rmtree(clone / "repo" / ".git" / "objects")
                break
            except OSError:
                time.sleep(0.02)
        restore = meanwhile(remote)
        wait_for(lambda: failed in log.read_text() or proc.poll() is not None, 30.0)
        assert proc.poll() is None, log.read_text()
        if restore is not None:
            restore()
        more_demand(tmp_path, remote)
        wait_for(lambda: "replicas: 5" in git(remote, "show", "main:sets/linux.yaml"), 30.0)
    finally:
        stopped_cleanly(proc, log)


def test_a_broken_kept_clone_is_cloned_again(tmp_path: Path) -> None:
    """The pass that meets a broken kept clone fails, and the next one clones afresh and lands
    — before, every pass failed on it until a restart."""
    break_the_kept_clone_then(tmp_path)


def test_a_clone_made_again_that_meets_an_input_error_is_a_failed_pass(tmp_path: Path) -> None:
    """The kept clone broke, and the remote's default branch is gone when it is made again
    (its HEAD names a branch that does not exist): at the loop's start that is exit 1, a
    wrong --repo; made again mid-run, it is one failed pass, and the loop lands once the
    branch is back — it exited 1, ending a Deployment's container."""
    def lose_the_default_branch(remote: Path) -> Callable[[], None]:
        git(remote, "symbolic-ref", "HEAD", "refs/heads/gone")
        return lambda: git(remote, "symbolic-ref", "HEAD", "refs/heads/main")

    break_the_kept_clone_then(tmp_path, lose_the_default_branch, failed="does not exist there")


def test_a_push_refused_by_a_hook_says_that_run_tries_again_and_what_to_change(
        tmp_path: Path) -> None:
    """Branch protection (a pre-receive hook that declines): the loop said `reconcile`'s "not
    retried" while it tried again at every pass, and not what a person could change; serve
    said both. Now the first failure says the hook's words, that run tries again, and what to
    change; a repeat is the hook's line (the refusal's cause), not the advice."""
    remote = make_bare(tmp_path, "remote.git", FILES)
    hook = remote / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'GH006: Protected branch update failed for "
                    "refs/heads/main.' >&2\nexit 1\n")
    os.chmod(hook, 0o755)
    result = subprocess.run(
        [sys.executable, "-c", FAST_RUN, "run", "--repo", str(remote), "--interval", "1s",
         "--max-passes", "2"], capture_output=True, text=True, timeout=60,
        env=cli_env({"GITSCALE_CACHE_DIR": str(tmp_path / "cache")}))
    err = result.stderr
    assert result.returncode == 1, err
    assert "not retried" not in err, err
    assert err.count("GH006: Protected branch update failed") == 2, err
    assert ("run tries again at every pass; to land its changes, let the identity run pushes "
            "as (GITSCALE_GIT_TOKEN's user, the deploy key) push to main") in err, err
    assert "(--branch)" in err
    [repeat] = [line for line in err.splitlines() if "pass failed (2 in a row since " in line]
    assert repeat.endswith(": the same error again: remote: GH006: Protected branch update "
                           "failed for refs/heads/main."), err
    assert "Traceback" not in err
