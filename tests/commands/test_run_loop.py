"""`gitscale run`: passes on an interval, a clean stop on SIGTERM, backoff on errors."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gitscale.commands.run import BACKOFF_CAP, LoopState
from tests.helpers import RUNNERSET, git, make_repo, simple_config


def setup(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 20}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 3, running: 0}\n",
    })


def wait_for(predicate, timeout: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("target", ["checkout", "url"])
def test_loop_follows_demand_and_stops_on_sigterm(tmp_path: Path, target: str) -> None:
    checkout = setup(tmp_path)
    remote = tmp_path / "remote.git"
    repo = str(checkout) if target == "checkout" else str(remote)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gitscale", "run", "--repo", repo, "--interval", "1s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert wait_for(lambda: "replicas: 3" in git(remote, "show", "main:sets/linux.yaml"))
        # demand changes in the repo (a human or a script commits it): the loop follows
        other = tmp_path / "other"
        git(tmp_path, "clone", "-q", str(remote), str(other))
        (other / "demand.yaml").write_text("linux: {queued: 5, running: 1}\n")
        git(other, "commit", "-qam", "more demand")
        git(other, "push", "-q")
        assert wait_for(lambda: "replicas: 6" in git(remote, "show", "main:sets/linux.yaml"))
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "SIGTERM: finishing the pass in progress (up to 20s), then stopping" in err
    assert "stopped after" in err and "Traceback" not in err
    log = git(remote, "log", "--format=%s", "main").splitlines()
    assert log[0] == "gitscale: linux 3→6"
    assert "gitscale: linux 0→3" in log


def test_each_pass_says_what_it_did_once(tmp_path: Path) -> None:
    checkout = setup(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "gitscale", "run", "--repo", str(checkout), "--interval", "1s",
         "--max-passes", "2"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    passes = [line.split(" ", 1)[1] for line in result.stderr.splitlines() if " pass at " in line]
    assert len(passes) == 2, result.stderr
    assert passes[0].endswith(": linux 0→3; committed " + git(checkout, "rev-parse", "HEAD")[:12]
                              + " and pushed to origin/main"), passes[0]
    assert passes[1].endswith(": no change: nothing to commit"), passes[1]


def test_loop_survives_a_bad_pass(tmp_path: Path) -> None:
    checkout = setup(tmp_path)
    bad = checkout / "demand.yaml"
    bad.write_text("linux: {queued: -1, running: 0}\n")
    git(checkout, "commit", "-qam", "bad demand")
    git(checkout, "push", "-q")
    result = subprocess.run(
        [sys.executable, "-m", "gitscale", "run", "--repo", str(checkout), "--interval", "1s",
         "--max-passes", "3"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    # the loop kept going, every pass saying the set was left alone; the error itself is
    # said when it starts (a repeat, once every ten minutes: a day of one 401 was 2,880 lines)
    assert result.stderr.count("demand.yaml:1") == 1, result.stderr
    passes = [line for line in result.stderr.splitlines() if " pass at " in line]
    assert len(passes) >= 2 and all("left untouched: linux" in p for p in passes), passes
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("interval", "failures", "expected"),
    [pytest.param(30.0, 0, 30.0, id="ok"), pytest.param(30.0, 1, 60.0, id="one-failure"),
     # a 30 s loop waits at most 2 minutes once the remote is back, not 10
     pytest.param(30.0, 3, 120.0, id="three-capped-at-2-minutes"),
     pytest.param(30.0, 5000, 120.0, id="days-of-failures"),  # 2**5000: no float overflow
     pytest.param(1.0, 4, 16.0, id="fast-loop-doubles"),
     pytest.param(600.0, 1, 600.0, id="slow-loop-never-beyond-its-interval"),
     pytest.param(3600.0, 9, 3600.0, id="hourly")],
)
def test_backoff(interval: float, failures: int, expected: float) -> None:
    assert BACKOFF_CAP == 120.0
    assert LoopState(interval, failures).delay() == expected


def test_rate_limit_pushes_the_next_pass_back() -> None:
    state = LoopState(30.0, 0, time.monotonic() + 500)
    assert 499 < state.delay() <= 500


def test_bad_interval(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "gitscale", "run", "--interval", "soon"],
                            capture_output=True, text=True)
    assert result.returncode == 1 and "--interval" in result.stderr


def test_a_bug_in_a_pass_is_reported_and_the_loop_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """One rule for every long-running command: a pass that crashes on a bug (not a
    GitscaleError) is logged with a crash report and tried again, like a failed pass."""
    import gitscale.commands.run as run_module
    from gitscale.commands import RepoOptions
    from gitscale.crash import EXIT_CRASH

    checkout = setup(tmp_path)
    real_land = run_module.land
    calls = []

    def land_once_broken(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 1:
            raise KeyError("a bug")
        return real_land(*args, **kwargs)

    monkeypatch.setattr(run_module, "land", land_once_broken)
    monkeypatch.setattr(run_module.LoopState, "delay", lambda self: 0.0)
    code = run_module.run_loop(RepoOptions(str(checkout), None, "gitscale.yaml"),
                               interval="1s", demand=None, max_passes=2,
                               stop=threading.Event())
    err = capsys.readouterr().err
    assert code == 0 and len(calls) == 2
    assert "pass crashed (1 in a row): unexpected KeyError: 'a bug' (a bug: please report it)" \
        in err
    assert "Traceback" in err and "Python " in err  # the crash report, in the log
    assert "replicas: 3" in git(tmp_path / "remote.git", "show", "main:sets/linux.yaml")
    assert EXIT_CRASH == 70


def test_a_stop_during_a_pass_announces_no_next_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """SIGTERM while a pass pushes: the pass lands, then the loop stops. It said `next pass
    in 0s` between the two, a pass that never came."""
    import gitscale.commands.run as run_module
    from gitscale.commands import RepoOptions

    checkout = setup(tmp_path)
    real_land = run_module.land
    stop = threading.Event()

    def land_then_stop(*args, **kwargs):  # type: ignore[no-untyped-def]
        stop.set()  # (the signal handler's doing, mid-pass)
        return real_land(*args, **kwargs)

    monkeypatch.setattr(run_module, "land", land_then_stop)
    code = run_module.run_loop(RepoOptions(str(checkout), None, "gitscale.yaml"),
                               interval="1s", demand=None, max_passes=None, stop=stop)
    lines = [line.split(" ", 1)[1] for line in capsys.readouterr().err.splitlines()]
    assert code == 0
    assert lines[-2].startswith("pass at ") and "linux 0→3; committed " in lines[-2], lines
    assert lines[-1] == "stopped after 1 passes", lines
    assert not any(line.startswith("next pass in") for line in lines), lines


def test_a_forecast_in_run_serves_until_the_next_pass(tmp_path: Path) -> None:
    """`run --interval 30s`: a forecast set's cushion counts the jobs that arrived within
    reach = 30s + 1m lead - 30s wait = 1m of each other (a single CLI pass, which does not
    know when the next comes, takes a window of 1m: 90s)."""
    from datetime import timedelta

    from gitscale.commands import RepoOptions
    from gitscale.commands.run import run_loop
    from tests.record.test_series import START, forecast_repo

    checkout = forecast_repo(tmp_path, "{maxReplicas: 50, forecast: {}}")
    now = START + timedelta(days=14, hours=8, minutes=59)  # the past Mondays' 40 at 09:00
    code = run_loop(RepoOptions(str(checkout), None, "gitscale.yaml"), interval="30s",
                    demand=None, max_passes=1, stop=threading.Event(), clock=lambda: now)
    assert code == 0
    body = git(tmp_path / "remote.git", "log", "-1", "--format=%B", "main")
    assert "linux 0→40" in body
    # 40 jobs arrived at 09:00 on both past Mondays; the first's is the oldest commit of the
    # history, which shows no rise (0): q0.9 of (0, 40) is 40, on a demand of 0
    assert "- linux: demand 0 (queued 0, running 0) + forecast +40: q0.9 of the jobs that " \
        "arrived within 1m, from 08:57–09:02 UTC, on the last 2 Mondays (0, 40)" in body


CHECKPOINTED_RUN = """
import sys
import gitscale.commands as commands
import gitscale.commands.run as run
commands.CHECKPOINT_SECONDS = float(sys.argv[1])
run.QUIET_LOG_EVERY = 0.0  # every pass logged: the test counts them
from gitscale.cli import main
main(sys.argv[2:])
"""


@pytest.mark.parametrize("every", [0.0, 3600.0])
def test_a_killed_run_keeps_what_it_learnt_up_to_its_last_checkpoint(tmp_path: Path,
                                                                     every: float) -> None:
    """`run` saves its state cache every CHECKPOINT_SECONDS, not only at a clean stop: after a
    kill -9 the cache holds the passes before it (here a checkpoint after every pass, against
    none within the hour)."""
    checkout = setup(tmp_path)
    cache = tmp_path / "cache"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHECKPOINTED_RUN, str(every), "run", "--repo", str(checkout),
         "--interval", "1s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "GITSCALE_CACHE_DIR": str(cache)})
    passes = 0
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the third pass logged: two checkpoints behind it
            passes += " pass at " in line
            if passes == 3:
                break
        proc.kill()  # kill -9: no clean stop, no save at exit
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert passes == 3
    saved = sorted(p.name for p in cache.iterdir()) if cache.exists() else []
    if every == 0.0:
        assert "manifest-state.marshal" in saved, saved
    else:
        assert "manifest-state.marshal" not in saved, saved


def test_checkpoint_saves_once_every_period_counted_from_its_first_call() -> None:
    from gitscale.commands import Checkpoint

    now = [100.0]
    saves: list[float] = []
    checkpoint = Checkpoint(lambda: saves.append(now[0]), every=60.0, clock=lambda: now[0])
    for at in (100.0, 130.0, 159.9, 160.0, 200.0, 219.9, 220.0, 400.0):
        now[0] = at
        checkpoint()
    assert saves == [160.0, 220.0, 400.0]


def test_a_quiet_loop_logs_a_line_every_ten_minutes_not_every_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A day without a change is a few lines an hour: the first pass without one is said, then
    one line per QUIET_LOG_EVERY standing for the passes in between; a change is said at once."""
    from gitscale.commands import RepoOptions
    from gitscale.commands import run as run_module

    checkout = setup(tmp_path)
    demand = tmp_path / "demand.yaml"
    demand.write_text("linux: {queued: 3, running: 0}\n")
    clock = [1000.0]
    monkeypatch.setattr(run_module.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(run_module.LoopState, "delay", lambda self: 0.0)
    quiet_pass = run_module._one_pass

    def one(*args, **kwargs):  # type: ignore[no-untyped-def]
        clock[0] += 30.0  # a 30 s loop, without waiting for it
        number = args[7]
        if number == 45:
            demand.write_text("linux: {queued: 5, running: 0}\n")
        return quiet_pass(*args, **kwargs)

    monkeypatch.setattr(run_module, "_one_pass", one)
    code = run_module.run_loop(RepoOptions(str(checkout), None, "gitscale.yaml"),
                               interval="30s", demand=str(demand), max_passes=50)
    assert code == 0
    lines = [line.split(" ", 1)[1] for line in capsys.readouterr().err.splitlines()]
    passes = [line for line in lines if line.startswith("pass at ")]
    # 1: 0→3; 2: the first quiet one; 22 and 42: ten minutes on; 46: 3→5; 47: quiet again
    assert len(passes) == 6, lines
    assert ": linux 0→3; committed" in passes[0]
    assert passes[1].endswith(": no change: nothing to commit"), passes[1]
    assert passes[2].endswith("(nothing changed in 21 passes since " + passes[1][8:28] + ")")
    assert "(nothing changed in 41 passes since" in passes[3]
    assert ": linux 3→5; committed" in passes[4]
    assert passes[5].endswith(": no change: nothing to commit"), passes[5]
    assert len([line for line in lines if line.startswith("next pass in")]) == 6
    assert lines[-1] == "stopped after 50 passes"


def test_a_set_left_untouched_pass_after_pass_is_said_when_it_starts_changes_and_ends(
        ) -> None:
    from datetime import datetime, timedelta, timezone

    from gitscale.commands import run

    state = LoopState(30.0)
    t0 = datetime(2026, 11, 27, 9, 0, tzinfo=timezone.utc)
    at = [t0 + timedelta(seconds=30 * i) for i in range(8)]
    elapsed = [0.0]

    def unread(errors: dict[str, str], i: int, read: frozenset[str] = frozenset()) -> list[str]:
        return run._unread(state, errors, at[i], read, clock=lambda: elapsed[0])

    revoked = "GitHub GET …/actions/runs answered 401: Bad credentials"
    assert unread({"linux": revoked}, 0) == [f"linux: {revoked} (left untouched)"]
    elapsed[0] = run.QUIET_LOG_EVERY - 1
    assert unread({"linux": revoked}, 1) == []  # a repeat within ten minutes: nothing
    elapsed[0] = run.QUIET_LOG_EVERY  # ten minutes after it was said
    assert unread({"linux": revoked}, 2) == [
        f"linux: still left untouched (3 passes since 2026-11-27T09:00:00Z): {revoked}"]
    other = "GitHub GET …/actions/runs answered 503"
    assert unread({"linux": other, "gpu": other}, 3) == [
        f"linux: {other} (left untouched)", f"gpu: {other} (left untouched)"]  # changed, new
    assert unread({"gpu": other}, 4, frozenset({"linux"})) == [
        "linux: demand read again (after 1 pass left untouched since 2026-11-27T09:01:30Z)"]
    assert unread({}, 5, frozenset({"linux"})) == []  # gpu: gone from gitscale.yaml
    assert state.unread == {}
