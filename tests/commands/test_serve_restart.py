"""`gitscale serve` restarted (a rolling update, an OOM kill, a node drain) with nothing changed
in between adds no commit; a start that does land one says why, not "batch of 0 events". The
real server, real commits on a bare remote."""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from gitscale.timeutil import format_time, utcnow
from tests.commands.test_serve import SECRET, Server
from tests.commands.test_serve_hold import make
from tests.commands.test_serve_sets import commits, remote, shown
from tests.helpers import git

STATE = ".gitscale/reservations.yaml"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """linux (0 to 20), claimed by a first serve: its manifest and reservations file written."""
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    checkout = make(tmp_path)
    Server(checkout, window="1s").close()
    git(checkout, "pull", "-q")
    return checkout


def push_state(repo: Path, sets: str) -> None:
    """The reservations file as serve wrote it, with ``sets``."""
    state = repo / STATE
    state.write_text(state.read_text().replace("sets: {}\n", sets))
    git(repo, "commit", "-qam", "the reservations of an earlier serve")
    git(repo, "push", "-q")


@pytest.mark.parametrize("hold", ["0", "5m"])
def test_two_starts_after_completed_jobs_are_forgotten_land_no_commit(
        repo: Path, hold: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A job completed 20 minutes ago: its tombstone (kept 10 minutes, so a late `queued` is not
    counted) ran out while serve was down. Dropping it from the file changes nothing anyone
    reads — a tombstone past its time is ignored — so neither start commits it, nor holds it
    for the stop to commit (each restart landed a `gitscale: reservations: 1 completed job
    forgotten`)."""
    past = format_time(utcnow() - timedelta(minutes=10))
    push_state(repo, f"sets:\n  linux:\n    reservations: []\n    completed:\n"
                     f"    - until: '{past}'\n      jobs: [7]\n")
    before = commits(repo)
    for _ in range(2):
        Server(repo, window="1s", hold=hold).close()
    assert commits(repo) == before, git(remote(repo), "log", "-3", "--format=%B", "main")
    err = capsys.readouterr().err
    assert "batch of 0 events" not in err and "reservations held" not in err, err
    # the file stays as it was until a commit that changes something carries its rewrite
    assert "jobs: [7]" in shown(repo, STATE)


def test_a_start_that_expires_a_reservation_commits_it_and_says_why(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A queued job's reservation ran out while serve was down: linux goes 1 → 0 at the start,
    a change the controller needs. The log says what the commit is for."""
    state = repo / "sets/linux.yaml"
    state.write_text(state.read_text().replace("replicas: 0", "replicas: 1"))
    created, expired = (format_time(utcnow() - timedelta(minutes=m)) for m in (30, 20))
    push_state(repo, "sets:\n  linux:\n    reservations:\n"
                     f"    - {{job: 5, running: false, created: '{created}', "
                     f"expires: '{expired}'}}\n    completed: []\n")
    capsys.readouterr()
    before = commits(repo)
    Server(repo, window="1s").close()
    assert commits(repo) == before + 1
    assert yaml.safe_load(shown(repo, "sets/linux.yaml"))["spec"]["replicas"] == 0
    err = capsys.readouterr().err
    assert "batch of 0 events" not in err, err
    assert " no event (linux scale-down): committed " in err, err
    # the next start lets the controller remove the idle runners (patch 0): needed too
    Server(repo, window="1s").close()
    assert commits(repo) == before + 2
    assert " no event (linux quiet-reset): committed " in capsys.readouterr().err
