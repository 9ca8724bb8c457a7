"""`gitscale serve --hold` end to end: a batch that changes only the reservations file (a job
started, nothing scaled) is not committed; it lands with the next scaling commit, once its limit
passes, or at the stop. Real deliveries to the real server on 127.0.0.1, real commits on a bare
remote (``gitscale.webhooks.hold``; tests/webhooks/test_hold.py has the batches' plans)."""
from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

import gitscale.commands.serve
from gitscale.timeutil import format_time, parse_time, utcnow
from tests.commands.test_serve import SECRET, Server, job, wait_for_commit
from tests.commands.test_serve_sets import commits, remote, replicas, shown, until
from tests.helpers import RUNNERSET, git, make_repo

LINUX = ["self-hosted", "linux"]
STATE = ".gitscale/reservations.yaml"
# (each test waits for one delivery's batch at a time; what is held, and for how long, follows
# --hold and the clock, not the window)
pytestmark = pytest.mark.usefixtures("quick_batches")

HELD = "reservations held (committed with the next scaling change, or in the first batch from "


# The scale-down delay keeps the set's patch ID while jobs start: with none, the batch of the
# job that leaves nothing queued writes patch 0 (quiet-reset, a RunnerSet change: committed).
LINUX_SET = """\
  - name: linux
    manifest: sets/linux.yaml
    source: {github: {org: octo-org, labels: [self-hosted, linux], token: {env: GH_TOKEN}}}
    policy: {minReplicas: 0, maxReplicas: 20, scaleDownDelay: %s}
"""


def make(tmp_path: Path, delay: str = "10m") -> Path:
    return make_repo(tmp_path, {"gitscale.yaml": "runnerSets:\n" + LINUX_SET % delay,
                                "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0)})


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout pushed to a bare remote: one webhook-fed set, linux (0 to 20)."""
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    return make(tmp_path)


def running(repo: Path) -> dict[int, bool]:
    """job → running, as the pushed reservations file says (linux's)."""
    book = yaml.safe_load(shown(repo, STATE))["sets"].get("linux") or {}
    return {r["job"]: r["running"] for r in book.get("reservations", [])}


def message(repo: Path) -> str:
    return git(remote(repo), "log", "-1", "--format=%B", "main")


class Log:
    """What serve said on stderr so far (``capsys`` drained into one string)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys, self.text = capsys, ""

    def __call__(self) -> str:
        self.text += self.capsys.readouterr().err
        return self.text

    def held_by(self) -> tuple[str, str]:
        """The held line's own time, and the time it says the hold lands by."""
        found = re.search(r"^(\S+) batch of 1 event: " + re.escape(HELD) + r"(\S+)\)$",
                          self(), re.M)
        assert found, self.text
        return found.group(1), found.group(2)


def queued_then_started(server: Server, repo: Path, log: Log) -> int:
    """Job 1 queued (0→1, committed), then started: held. Returns the remote's commits."""
    before = commits(repo)
    assert server.post(job(1, "queued", LINUX))[0] == 202
    wait_for_commit(server, repo, before)
    assert replicas(repo, "linux") == 1 and running(repo) == {1: False}
    scaled = commits(repo)
    assert server.post(job(1, "in_progress", LINUX))[0] == 202
    until(lambda: HELD in log(), f"the in_progress was not held: {log.text}")
    return scaled


def started_at_once(server: Server, repo: Path) -> int:
    """Job 1 queued (0→1, committed), then started, its start committed too (not held).
    Returns the remote's commits after the first."""
    before = commits(repo)
    assert server.post(job(1, "queued", LINUX))[0] == 202
    wait_for_commit(server, repo, before)
    scaled = commits(repo)
    assert server.post(job(1, "in_progress", LINUX))[0] == 202
    wait_for_commit(server, repo, scaled)
    return scaled


def test_a_started_job_is_held_and_committed_at_the_stop(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = Log(capsys)
    server = Server(repo, window="1s", hold="5m")
    try:
        scaled = queued_then_started(server, repo, log)
        said, by = log.held_by()
        # by the first held batch's time and --hold (5m): the line is a moment later
        assert timedelta(minutes=4, seconds=30) <= parse_time(by) - parse_time(said) \
            <= timedelta(minutes=5), (said, by)
        health = server.health()
        assert health["pending_events"] == 0
        assert parse_time(health["reservations_held_since"]) <= parse_time(said), health
        assert commits(repo) == scaled and running(repo) == {1: False}, "held, not pushed"
    finally:
        server.close()
    assert commits(repo) == scaled + 1, "the stop's last batch commits what is held"
    assert running(repo) == {1: True} and replicas(repo, "linux") == 1
    text = message(repo)
    assert text.startswith("gitscale: record 1 workflow_job event\n"), text
    assert "Gitscale-Events: in_progress=1\n" in text, text
    # (a batch of no event: said as what it lands, not as "batch of 0 events")
    since = re.search(r"reservations held since (\S+): committed \S+ ", log(), re.M)
    assert since and parse_time(since.group(1)) <= parse_time(said), log.text


def test_hold_0_commits_a_started_job_at_once(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = Log(capsys)
    server = Server(repo, window="1s", hold="0")
    try:
        scaled = started_at_once(server, repo)
        assert commits(repo) == scaled + 1 and running(repo) == {1: True}
        assert "Gitscale-Events: in_progress=1\n" in message(repo)
    finally:
        server.close()
    assert commits(repo) == scaled + 1, "nothing left for the stop"
    text = log()
    assert "(--hold 0)" in text and "reservations held" not in text, text


@pytest.mark.parametrize(("resync", "hold", "said", "held"), [
    pytest.param("0", None, "lands at once (--hold 0, as there is no resync)", False,
                 id="no-resync-no-hold"),
    pytest.param("0", "5m", "is held up to 5m for a scaling commit (--hold) — with no resync, "
                 "what serve holds when it is killed is lost", True, id="no-resync-but-held"),
    pytest.param("5m", None, "is held up to 5m for a scaling commit (--hold)\n", True,
                 id="resync-default"),
])
def test_the_default_hold_follows_the_resync(
        repo: Path, capsys: pytest.CaptureFixture[str], resync: str, hold: str | None,
        said: str, held: bool) -> None:
    """Without a resync nothing rebuilds what a killed serve held (a running job's lost
    `completed` would keep its runner until the file is edited): --hold is 0 unless given,
    and when given the start line says what it risks."""
    log = Log(capsys)
    extra = {"hold": hold} if hold is not None else {}
    server = Server(repo, window="1s", resync=resync, **extra)
    try:
        until(lambda: "listening on " in log(), "serve did not start")
        assert said in log(), log.text
        scaled = queued_then_started(server, repo, log) if held else None
        if not held:
            started_at_once(server, repo)
            assert running(repo) == {1: True}, "committed at once"
        else:
            assert commits(repo) == scaled and running(repo) == {1: False}, "held"
    finally:
        server.close()


def test_what_is_held_lands_once_its_limit_passes(
        repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch without events runs every EXPIRY_CHECK (a minute): here every window, so the
    one after the limit (2s) commits what is held, with no delivery and no stop."""
    monkeypatch.setattr(gitscale.commands.serve, "EXPIRY_CHECK", 0.0)
    log = Log(capsys)
    server = Server(repo, window="1s", hold="2s")
    try:
        scaled = queued_then_started(server, repo, log)
        said, by = log.held_by()
        assert timedelta(0) <= parse_time(by) - parse_time(said) \
            <= timedelta(seconds=2), (said, by)
        until(lambda: commits(repo) > scaled, "what is held never landed", timeout=15)
        assert not server.stop.is_set()
        until(lambda: server.health()["reservations_held_since"] is None, "still held")
        assert commits(repo) == scaled + 1 and running(repo) == {1: True}
        assert "Gitscale-Events: in_progress=1\n" in message(repo)
        landed = re.findall(r"^(\S+) reservations held since \S+: committed ", log(), re.M)[-1]
        assert parse_time(landed) >= parse_time(by), log.text
    finally:
        server.close()
    assert commits(repo) == scaled + 1, "nothing left for the stop"


def test_a_delivery_after_the_limit_lands_what_is_held(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With the minute's batch far off, a delivery's batch after the limit commits what is
    held, with its own events (a duplicate in_progress, which changes nothing itself)."""
    log = Log(capsys)
    server = Server(repo, window="1s", hold="2s")
    try:
        scaled = queued_then_started(server, repo, log)
        _, by = log.held_by()
        # (``by`` is to the second: one later, the limit has passed; RFC 3339 in UTC sorts)
        until(lambda: format_time(utcnow()) > by, "the clock stopped", timeout=10)
        assert commits(repo) == scaled, "no batch without an event before the minute's"
        assert server.post(job(1, "in_progress", LINUX))[0] == 202
        wait_for_commit(server, repo, scaled)
        assert commits(repo) == scaled + 1 and running(repo) == {1: True}
        assert "Gitscale-Events: in_progress=2\n" in message(repo), message(repo)
    finally:
        server.close()


def test_what_is_held_lands_with_the_next_scaling_commit(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = Log(capsys)
    server = Server(repo, window="1s", hold="5m")
    try:
        scaled = queued_then_started(server, repo, log)
        assert server.post(job(2, "queued", LINUX))[0] == 202
        wait_for_commit(server, repo, scaled)
        assert commits(repo) == scaled + 1
        assert replicas(repo, "linux") == 2 and running(repo) == {1: True, 2: False}
        text = message(repo)
        assert text.startswith("gitscale: linux 1→2\n"), text
        assert "Gitscale-Events: in_progress=1 queued=1\n" in text, text
    finally:
        server.close()
    assert commits(repo) == scaled + 1, "nothing left for the stop"


def test_what_is_held_is_dropped_when_the_file_changes_in_the_repo(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Someone deletes the reservations file while serve holds a change to it: serve goes on
    from the repo's (the next batch writes it anew) and says what it dropped."""
    log = Log(capsys)
    server = Server(remote(repo), window="1s", hold="5m")  # a clone: the file is pushed
    try:
        queued_then_started(server, repo, log)
        git(repo, "pull", "-q")
        git(repo, "rm", "-q", STATE)
        git(repo, "commit", "-qm", "reservations deleted")
        git(repo, "push", "-q")
        deleted = commits(repo)
        assert server.post(job(2, "queued", LINUX))[0] == 202
        until(lambda: "are dropped" in log(), "the held reservations were not dropped")
        wait_for_commit(server, repo, deleted)
        assert running(repo) == {2: False}, "job 1's held reservation went with the file"
        assert "Gitscale-Events: queued=1\n" in message(repo), message(repo)
    finally:
        server.close()
    assert commits(repo) == deleted + 1, "nothing held for the stop"
    assert re.search(r"the reservations held since \S+ are dropped: \.gitscale/reservations"
                     r"\.yaml changed in the repo meanwhile \(serve went on from it\)",
                     log.text), log.text


def test_a_started_job_that_lets_the_set_reset_its_patch_is_committed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Without a scale-down delay, the start of the last queued job sets patch 0 (nothing
    waits: the controller may remove idle runners): a RunnerSet change, not held."""
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    repo = make(tmp_path, delay="0s")
    log = Log(capsys)
    server = Server(repo, window="1s", hold="5m")
    try:
        scaled = started_at_once(server, repo)
        assert running(repo) == {1: True}
        text = message(repo)
        assert "reason=quiet-reset" in text and "Gitscale-Events: in_progress=1\n" in text, text
    finally:
        server.close()
    assert commits(repo) == scaled + 1 and "reservations held" not in log()


def test_what_the_last_batch_cannot_commit_is_named(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A remote that refuses at the stop: the held reservations are named as lost, with what
    corrects them (here nothing: the test's --resync 0), as accepted events are."""
    log = Log(capsys)
    server = Server(repo, window="1s", hold="5m")
    try:
        scaled = queued_then_started(server, repo, log)
        hook = remote(repo) / "hooks" / "pre-receive"
        hook.write_text("#!/bin/sh\nexit 1\n")
        hook.chmod(0o755)
    finally:
        server.close()
    assert commits(repo) == scaled and running(repo) == {1: False}
    assert re.search(r"^\S+ stopping: the last batch did not land after 3 tries \(.*\); not "
                     r"committed: the reservations held since \S+ \(linux: job 1\); with "
                     r"--resync 0 nothing recovers them", log(), re.M), log.text
    assert "accepted event" not in log.text
