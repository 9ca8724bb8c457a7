"""Many writers on one branch: lost push races are retried until a deadline, not a count.

With a budget of 6 attempts, 8 writers pushing to one branch came close to failing runs (one
needed 5 of its 6). The budget is now time: a run keeps retrying (recomputing on the new head,
with jittered backoff) until 60 s have passed. ``benchmarks/bench_push_race.py`` measures 16
writers × 20 rounds; this suite runs 8 × 5 real processes against ``git daemon``.
"""
from __future__ import annotations

import re
import subprocess
import threading
from pathlib import Path

import pytest

from gitscale.commands import given_demand
from gitscale.config.load import load_config
from gitscale.demand.resolve import read_demand
from gitscale.plan.engine import Plan, compute_plan
from gitscale.errors import GitError
from gitscale.plan.landing import BACKOFF, BACKOFF_CAP, DEADLINE, PRIORITY_AFTER, backoff, land
from gitscale.timeutil import parse_time
from gitscale.repo.opening import open_workspace
from tests.integration import seed
from tests.integration.conftest import CLI_TIMEOUT, GitDaemon, cli_argv, cli_env, rev
from tests.integration.seed import NOW

WRITERS, ROUNDS = 8, 5


@pytest.mark.parametrize(("attempt", "waited", "ceiling"), [
    pytest.param(1, 0.0, BACKOFF, id="first-loss"),
    pytest.param(4, 0.0, BACKOFF * 8, id="exponential"),
    pytest.param(20, 0.0, BACKOFF_CAP, id="capped"),
    pytest.param(20, PRIORITY_AFTER / 2, BACKOFF_CAP / 2, id="older-waits-less"),
    pytest.param(20, PRIORITY_AFTER, 0.0, id="oldest-retries-at-once"),
])
def test_backoff_favours_the_writers_that_waited_longest(attempt: int, waited: float,
                                                          ceiling: float) -> None:
    waits = [backoff(attempt, waited) for _ in range(200)]
    assert all(0 <= w <= ceiling for w in waits)
    assert max(waits) > ceiling * 0.8 or ceiling == 0  # full jitter: the range is used


class Clock:
    """A clock the test moves: every backoff "sleeps" by advancing it, plus what an attempt
    (fetch, commit, push) takes."""

    def __init__(self, attempt_seconds: float = 1.0) -> None:
        self.now = 0.0
        self.attempt_seconds = attempt_seconds

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds + self.attempt_seconds


def _racing_plan(ws, demand: Path, other: Path, races: int) -> tuple[list[str], object]:  # type: ignore[no-untyped-def]
    """A make_plan that lets another writer land first on its first ``races`` calls."""
    bases: list[str] = []
    reading = None

    def make_plan() -> Plan:
        nonlocal reading
        config = load_config(ws.root, "gitscale.yaml")
        if reading is None:
            reading = read_demand(ws.root, config, given_demand(str(demand)))
        plan = compute_plan(ws.root, config, reading, parse_time(NOW), ws.base())
        bases.append(plan.base)
        if len(bases) <= races:
            (other / "README.md").write_text(f"another writer, {len(bases)}\n")
            seed.git(other, "commit", "--quiet", "-am", f"other {len(bases)}")
            seed.git(other, "push", "--quiet", "origin", "HEAD:main")
        return plan

    return bases, make_plan


@pytest.fixture
def other(git_server: GitDaemon, tmp_path: Path) -> Path:
    git_server.create(seed.FILES)
    clone = seed.fresh_clone(git_server.url(), tmp_path / "other")
    seed.git(clone, "config", "user.name", "Other")
    seed.git(clone, "config", "user.email", "other@example.com")
    return clone


def test_a_run_that_loses_ten_races_in_a_row_still_lands(git_server: GitDaemon, other: Path,
                                                         tmp_path: Path) -> None:
    demand = tmp_path / "demand.yaml"
    demand.write_text(seed.demand_text((6, 0)))
    clock = Clock()
    with open_workspace(git_server.url(), None) as ws:
        bases, make_plan = _racing_plan(ws, demand, other, races=10)
        landed = land(ws, make_plan, sleep=clock.sleep, clock=clock)  # type: ignore[arg-type]
    assert landed.pushed and landed.attempts == 11, landed
    assert clock.now < DEADLINE
    history = seed.commits(git_server.base / "config.git")
    assert history[0] == landed.commit and history[1] == bases[-1]  # on the last foreign head
    assert seed.merges(git_server.base / "config.git") == []


def test_a_run_gives_up_at_the_deadline_and_leaves_nothing(git_server: GitDaemon, other: Path,
                                                           tmp_path: Path) -> None:
    demand = tmp_path / "demand.yaml"
    demand.write_text(seed.demand_text((6, 0)))
    bare = git_server.base / "config.git"
    clock = Clock(attempt_seconds=2.0)
    with open_workspace(git_server.url(), None) as ws:
        bases, make_plan = _racing_plan(ws, demand, other, races=10_000)
        with pytest.raises(GitError, match=r"gave up after \d+ attempts in \d+ s"):
            land(ws, make_plan, sleep=clock.sleep, clock=clock,  # type: ignore[arg-type]
                 deadline=40.0)
    assert 40.0 - 10 < clock.now <= 40.0 + 2
    assert len(bases) > 6  # the old budget was 6 attempts, whatever the time
    assert all(seed.message(bare, sha).subject.startswith("other")
               for sha in seed.commits(bare)[:-1])  # nothing of ours was pushed


def test_many_writers_many_rounds_every_run_lands(git_server: GitDaemon, tmp_path: Path) -> None:
    """WRITERS processes at once, ROUNDS runs each; every run has a change to make (a count of
    its own), so every run must land exactly one commit, in one linear history."""
    files = dict(seed.FILES)  # room for a count of its own per run (40 > the seed's max of 20)
    files["gitscale.yaml"] = files["gitscale.yaml"].replace("maxReplicas: 20", "maxReplicas: 500")
    assert files["gitscale.yaml"] != seed.FILES["gitscale.yaml"]
    bare = git_server.create(files)
    original = rev(bare)
    failures: list[str] = []
    attempts: list[int] = []
    lock = threading.Lock()

    def writer(number: int) -> None:
        for round_no in range(ROUNDS):
            demand = tmp_path / f"demand-{number}-{round_no}.yaml"
            # a count no other run asks for (never the seed's 2): whichever run landed last,
            # this one has a change to make
            demand.write_text(seed.demand_text((3 + number * ROUNDS + round_no, 0),
                                               jobs=[number * 1000 + round_no]))
            proc = subprocess.run(cli_argv("reconcile", "--repo", git_server.url(),
                                           "--demand", str(demand), "--now", NOW),
                                  cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
                                  timeout=CLI_TIMEOUT + 30)
            retried = re.search(r"after (\d+) retr(?:y|ies)", proc.stdout)
            with lock:
                if proc.returncode != 0 or "and pushed to" not in proc.stdout:
                    failures.append(f"writer {number} round {round_no}: exit "
                                    f"{proc.returncode}\n{proc.stdout}{proc.stderr}")
                attempts.append(1 + int(retried.group(1)) if retried else 1)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    history = seed.commits(bare)
    assert len(history) == WRITERS * ROUNDS + 1 and history[-1] == original
    assert seed.merges(bare) == []
    messages = [seed.message(bare, sha) for sha in history[:-1]]
    assert all("linux-x64" in m.sets for m in messages), [m.raw for m in messages]
    patches = [int(m.sets["linux-x64"]["patch"]) for m in messages]
    assert patches == list(range(patches[-1], patches[-1] + len(patches)))[::-1]  # consecutive
    print(f"{WRITERS} writers x {ROUNDS} rounds: attempts per run max {max(attempts)}, "
          f"mean {sum(attempts) / len(attempts):.2f}")
