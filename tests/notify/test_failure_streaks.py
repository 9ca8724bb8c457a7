"""A notify target that keeps failing in a long-running `run` or `serve` is said once per
streak, reminded every 30 minutes, and said again when it works; the metric counts every
failure. Real passes and batches pushing to a bare remote, a real engine on 127.0.0.1."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from gitscale.notify.failures import NotifyStreaks
from tests.helpers import RUNNERSET, make_repo, run
from tests.notify.engines import FakeFlux, Receiver
from tests.notify.test_notify import TOKEN, no_secret_in, repo
from tests.test_metrics import scrape, value


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_streak_is_said_first_on_a_change_every_reminder_and_at_its_end() -> None:
    clock = Clock()
    told = NotifyStreaks(remind=1800, clock=clock)
    flux, argo = "flux (http://a)", "argocd (https://b)"
    first = told.failed(flux, "HTTP 500")
    assert first is not None and first.startswith(f"notify {flux} failed: HTTP 500; ")
    assert "said again when the error changes, every 30m" in first
    clock.now = 60
    assert told.failed(flux, "HTTP 500") is None
    assert told.failed(argo, "cannot connect") is not None, "each target its own streak"
    clock.now = 1799
    assert told.failed(flux, "HTTP 500") is None
    clock.now = 1800
    assert told.failed(flux, "HTTP 500") == (
        f"notify {flux} still failing, 4 pushes in a row for 30m: HTTP 500; the engine's own "
        "poll still applies")
    clock.now = 1810
    assert told.failed(flux, "HTTP 401") is not None, "another error is said at once"
    clock.now = 1900
    assert told.sent(flux) == f"notify {flux} works again, after 5 failed pushes in 31m40s"
    assert told.sent(flux) is None, "said once"
    assert told.failed(flux, "HTTP 500") is not None and \
        told.streaks[flux].count == 1, "a new streak"


def test_an_answer_that_differs_only_by_its_request_id_or_counts_is_the_same_error() -> None:
    """An engine (or the proxy before it) that puts a request id, a time or a count in its
    error answer: each push's answer differed, so each was said as a new error, a line per
    push for as long as it lasted. Said once per streak now; the line shows the answer as it
    came; another error is still said at once."""
    clock = Clock()
    told = NotifyStreaks(remind=1800, clock=clock)
    flux = "flux (http://a)"

    def answer(request_id: str, retry: int) -> str:
        return (f'HTTP 503: {{"error": "upstream unavailable", "requestId": "{request_id}", '
                f'"retryAfter": {retry}}}')

    first = told.failed(flux, answer("9f1c2e4a-6b7d-4e21-9a0b-3c5d7e9f1a2b", 30))
    assert first is not None and "9f1c2e4a-6b7d-4e21-9a0b-3c5d7e9f1a2b" in first
    clock.now = 30
    assert told.failed(flux, answer("0c8e7d6f-5a4b-4c3d-8e2f-1a0b9c8d7e6f", 45)) is None
    assert told.failed(flux, answer("req_01HX3K9V2M7Q8R4T6Y0Z5W1N3B", 45)) is None
    assert told.failed(flux, "HTTP 401: bad token") is not None, "another error: said"
    assert told.streaks[flux].count == 4


class Scripted(FakeFlux):
    """Flux answering ``statuses`` in turn (then as Flux does), each request moving the demand
    so that the next pass pushes again."""

    def __init__(self, receiver: Receiver, demand: Path, statuses: list[int]) -> None:
        super().__init__(receiver)
        self.demand, self.statuses = demand, statuses

    def answer(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, str]:
        sent = len(self.seen)
        self.demand.write_text(f"linux: {{queued: {sent + 4}, running: 0}}\n")
        if sent < len(self.statuses):
            return self.statuses[sent], "failing on purpose"
        return super().answer(path, headers, body)


def run_against_flux(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                     statuses: list[int], passes: int) -> tuple[int, str, Scripted]:
    """`run --max-passes` with a Flux receiver that answers ``statuses`` first, then 200:
    the exit code, stderr and the receiver (what it saw, its address)."""
    demand = tmp_path / "demand.yaml"
    demand.write_text("linux: {queued: 3, running: 0}\n")
    receiver = Receiver("gitscale", "flux-system", TOKEN)
    with Scripted(receiver, demand, statuses) as flux:
        checkout = repo(tmp_path, f"""\
notify:
  - flux: {{url: {flux.base}, receiver: {{name: gitscale, namespace: flux-system}},
            token: {{env: FLUX_RECEIVER_TOKEN}}}}
""")
        code, _, err = run(capsys, "run", "--repo", str(checkout), "--demand", str(demand),
                           "--interval", "1s", "--max-passes", str(passes))
    return code, err, flux


def test_run_says_a_failing_notify_once_and_when_it_works_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FLUX_RECEIVER_TOKEN", TOKEN)
    code, err, flux = run_against_flux(tmp_path, capsys, [500, 500, 500], 4)
    assert code == 0, err
    assert [s.status for s in flux.seen] == [500, 500, 500, 200], err
    label = f"flux ({flux.base})"
    assert err.count(f"notify {label} failed: HTTP 500") == 1, err
    assert f"notify {label} still failing" not in err
    assert err.count(f"notify {label} works again, after 3 failed pushes in ") == 1, err
    assert f"notified {label}" in err
    no_secret_in(err)


def test_serve_says_a_missing_notify_secret_once_and_counts_every_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The walkthrough's case: ARGOCD_WEBHOOK_SECRET not set, every batch that commits fails
    to notify; the log says it once, gitscale_notifications_total counts each."""
    from tests.commands.test_serve import CONFIG, SECRET, Server, job, remote_state

    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    monkeypatch.delenv("ARGOCD_WEBHOOK_SECRET", raising=False)
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": CONFIG + "notify:\n  - argocd: {url: 'https://argocd.example.com', "
        "secret: {env: ARGOCD_WEBHOOK_SECRET}, repoURL: 'https://git.example.com/c.git'}\n",
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "sets/gpu.yaml": RUNNERSET.format(name="gpu", replicas=0),
    })
    server = Server(checkout, window="1s")
    try:
        for job_id in (1, 2):  # the start's commit, then one commit per job
            commits = remote_state(checkout)[0]
            assert server.post(job(job_id, "queued", ["self-hosted", "linux"]))[0] == 202
            deadline = time.monotonic() + 30
            while remote_state(checkout)[0] == commits:
                assert time.monotonic() < deadline, "no commit"
                time.sleep(0.1)
        assert server.port is not None
        # (the notification follows the push: the last one may not be counted yet when its
        # commit is on the remote)
        deadline = time.monotonic() + 10
        while True:
            _, _, samples = scrape(server.port)
            failed = value(samples, "gitscale_notifications_total", engine="argocd",
                           result="failed")
            if failed >= 3 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        server.close()
    assert failed == 3, "every failure counted"
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if "notify argocd" in line]
    assert len(said) == 1, err
    assert "environment variable ARGOCD_WEBHOOK_SECRET is not set" in said[0]


def test_a_failing_notify_is_a_warning_in_a_json_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """GITSCALE_LOG_FORMAT=json: a target that fails is level "warning" (an alert on warnings
    sees a notify secret that is not set), its recovery "info" (was: both "info", as a
    routine line)."""
    import json

    monkeypatch.setenv("FLUX_RECEIVER_TOKEN", TOKEN)
    monkeypatch.setenv("GITSCALE_LOG_FORMAT", "json")
    code, err, flux = run_against_flux(tmp_path, capsys, [500], 2)
    assert code == 0, err
    label = f"flux ({flux.base})"
    said = [(entry["level"], entry["msg"]) for entry in map(json.loads, err.splitlines())
            if entry["msg"].startswith(f"notify {label} ")]
    assert [level for level, _ in said] == ["warning", "info"], said
    assert said[0][1].startswith(f"notify {label} failed: HTTP 500"), said
    assert said[1][1].startswith(f"notify {label} works again"), said
    no_secret_in(err)
