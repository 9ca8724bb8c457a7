"""`run` on a host whose clock is stepped (NTP, a VM resumed) between passes: the waits between
passes, the backoff and the checkpoint run on the monotonic clock and do not move; the
decisions take the stepped wall clock as their "now" — a step back of more than
``CLOCK_SKEW_TOLERANCE`` puts the last scale-up in the future, which holds no scale-down and is
said in the commit (`gitscale.core.decide.hold_from`); a step forward only ends a scale-down
delay that much earlier."""
from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

from gitscale.commands import RepoOptions
from gitscale.commands.run import run_loop
from tests.helpers import RUNNERSET, git, make_repo, simple_config

T0 = datetime(2026, 11, 27, 9, 0, tzinfo=timezone.utc)
# (the wall clock of each pass, the demand it reads)
PASSES = [
    (T0, 6),                                  # 0→6, last scale-up T0
    (T0 + timedelta(minutes=1), 0),           # held until T0+10m
    (T0 - timedelta(hours=2), 0),             # stepped back 2 h: T0 lies 2 h ahead
    (T0 + timedelta(minutes=5), 8),           # stepped forward again: 0→8, last scale-up now
    (T0 + timedelta(minutes=6), 0),           # held until T0+15m
]


class Waits(threading.Event):
    """The loop's stop event: records each wait and returns at once, setting the next pass's
    demand (nothing sleeps)."""

    def __init__(self, demand: Path) -> None:
        super().__init__()
        self.demand = demand
        self.timeouts: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        self.timeouts.append(timeout)
        self.demand.write_text(f"linux: {{queued: {PASSES[len(self.timeouts)][1]}, "
                               "running: 0}\n")
        return False


def test_a_stepped_clock_moves_no_wait_and_is_said_where_it_changes_a_decision(
        tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 20, "
                                        "scaleDownDelay: 10m}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 6, running: 0}\n",
    })
    remote = tmp_path / "remote.git"
    demand = tmp_path / "demand.yaml"
    demand.write_text("linux: {queued: 6, running: 0}\n")
    stop = Waits(demand)
    code = run_loop(RepoOptions(str(remote), None, "gitscale.yaml"), interval="30s",
                    demand=str(demand), max_passes=len(PASSES), stop=stop,
                    clock=lambda: PASSES[len(stop.timeouts)][0])
    err = capsys.readouterr().err
    assert code == 0, err
    # every wait is the interval less the pass's own time, whatever the wall clock did
    assert len(stop.timeouts) == len(PASSES) - 1
    assert all(20.0 <= t <= 30.0 for t in stop.timeouts), stop.timeouts
    subjects = git(remote, "log", "--format=%s", "main").splitlines()
    assert subjects[:3] == ["gitscale: linux 0→8", "gitscale: linux 6→0", "gitscale: linux 0→6"]
    skewed = git(remote, "log", "-1", "--format=%B", "main~1")
    assert "clock skew: last scale-up 2026-11-27T09:00:00+00:00" in skewed
    assert "the scale-down delay is not held on it" in skewed
    # what the manifest records is the stepped clock: the write after the step back has an
    # effectiveTime before its parent's (the controller compares it with runners' finish
    # times; the next write, after the step forward, moves it on again)
    times = [yaml.safe_load(git(remote, "show", f"main~{n}:sets/linux.yaml"))["spec"]
             ["effectiveTime"] for n in range(3)]
    assert times == ["2026-11-27T09:05:00Z", "2026-11-27T07:00:00Z", "2026-11-27T09:00:00Z"]
    held = [line for line in err.splitlines() if "no change: nothing to commit" in line]
    assert len(held) == 2, err  # the passes at T0+1m and T0+6m: held by the delay


def test_effective_time_is_when_the_demand_was_read_not_when_the_pass_began(
        tmp_path: Path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The controller refills the slot of a runner that finished before ``effectiveTime`` (the
    write counted its job as gone) and holds one that finished after (its job was counted). A
    pass that stamped the time it began, before a demand read of some seconds (a clone, an API
    paging through repos), told the controller that a job which ended during the read was
    still counted: its slot was held while the job queued in its place waited, and with
    nothing else changing no later pass wrote again. The stamp is now taken once the demand
    is read (here the clock reads T0 until the demand is read, T0+7s after)."""
    import gitscale.commands.reconcile as reconcile

    read: list[bool] = []
    real = reconcile.read_demand

    def read_demand(*args, **kwargs):  # type: ignore[no-untyped-def]
        reading = real(*args, **kwargs)
        read.append(True)
        return reading

    monkeypatch.setattr(reconcile, "read_demand", read_demand)
    make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 20}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
    })
    remote = tmp_path / "remote.git"
    demand = tmp_path / "demand.yaml"
    demand.write_text("linux: {queued: 3, running: 0}\n")

    def clock() -> datetime:
        return T0 + timedelta(seconds=7) if read else T0

    code = run_loop(RepoOptions(str(remote), None, "gitscale.yaml"), interval="30s",
                    demand=str(demand), max_passes=1, stop=threading.Event(), clock=clock)
    assert code == 0, capsys.readouterr().err
    spec = yaml.safe_load(git(remote, "show", "main:sets/linux.yaml"))["spec"]
    assert (spec["replicas"], spec["effectiveTime"]) == (3, "2026-11-27T09:00:07Z")
