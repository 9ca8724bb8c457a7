"""`gitscale run`'s `/healthz` (on `--metrics-listen`): 200 while the loop moves, 503 once a pass
has run past every bound a pass has — a liveness probe then restarts a wedged loop, which
otherwise would have kept its pod alive, scaling nothing."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import gitscale.commands.run as run
from gitscale.plan.pass_watch import STALL_MIN, PassWatch, stall_limit
from tests.test_metrics import Loop, eventually


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_pass_that_runs_past_the_limit_is_stuck_and_waiting_is_not() -> None:
    clock = Clock()
    watch = PassWatch(stall=900.0, clock=clock)
    assert watch.health() == (200, {"status": "ok", "passes": 0})
    watch.begin()
    clock.now += 900
    assert watch.health()[0] == 200  # (at the limit: not yet)
    clock.now += 1
    status, body = watch.health()
    assert status == 503 and body["status"] == "stuck" and body["pass_running_seconds"] == 901
    assert body["error"] == ("a pass has run for 901 s, more than the 900 s every pass ends "
                             "within: the loop is stuck")
    watch.end()
    clock.now += 3600  # a rate limit holds the next pass for an hour: waiting, not stuck
    assert watch.health() == (200, {"status": "ok", "passes": 1,
                                    "last_pass_ended_seconds_ago": 3600.0})


@pytest.mark.parametrize(("timeout", "limit"), [
    pytest.param("", STALL_MIN, id="default"),
    pytest.param("10m", 3000.0, id="five-git-timeouts"),
])
def test_the_limit_follows_the_git_timeout(timeout: str, limit: float,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITSCALE_GIT_TIMEOUT", timeout)
    assert stall_limit() == limit


def get(port: int) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_loop_held_by_a_remote_that_never_answers_is_stuck_then_moves_again(
        tmp_path: Path, black_hole: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITSCALE_GIT_TIMEOUT", "2.5")
    monkeypatch.setattr(run, "stall_limit", lambda: 1.0)
    loop = Loop(f"git://127.0.0.1:{black_hole}/config.git")
    try:
        stuck = eventually(lambda: (lambda a: a if a[0] == 503 else None)(get(loop.port)))
        assert stuck[1]["status"] == "stuck" and stuck[1]["passes"] == 0
        # the clone is stopped at GITSCALE_GIT_TIMEOUT: the pass fails, and the loop moves on
        moved = eventually(lambda: (lambda a: a if a[1]["passes"] >= 1 else None)(get(loop.port)))
        assert moved[1]["passes"] >= 1
    finally:
        loop.close()
