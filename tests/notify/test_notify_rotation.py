"""A notify secret rotated under a running scaler. The in-cluster pods read it through
``NAME_FILE`` from the Secret volume of ``gitscale-notify``, which the kubelet updates by
swapping its ``..data`` symlink: each send reads the file, so the send after a rotation signs
with the new value, with no restart. A refused send is one request and one line (never a retry
in a loop): the next send reads the file again. ``NAME`` beside ``NAME_FILE`` (an old
``envFrom`` Secret, a variable of one's own) is refused naming both, never a value."""
from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Callable

import pytest

from gitscale.config.notify_targets import Target
from gitscale.notify.payloads import Pushed
from gitscale.notify.send import notify_all
from tests.helpers import git, run
from tests.notify.engines import FakeArgoCD, FakeFlux, Receiver, _Fake
from tests.notify.test_notify import repo

OLD = "notify-secret-before-rotation-31c4"
NEW = "notify-secret-after-rotation-8d07"
PUSHED = Pushed(repo_url="https://git.example.com/ci/config.git", branch="main",
                before="1" * 40, after="2" * 40, subject="gitscale: linux 0→3",
                time="2026-11-26T10:00:00Z", added=(), modified=("clusters/prod/linux.yaml",))


class Volume:
    """A Secret volume laid out as the kubelet's atomic writer lays it out: each key a symlink
    to ``..data/KEY``, ``..data`` a symlink to a timestamped directory that an update replaces
    (a new directory, then ``..data`` renamed over in one step)."""

    def __init__(self, root: Path, data: dict[str, str]) -> None:
        self.root = root
        self.generation = 0
        root.mkdir()
        self.update(data)
        for key in data:
            (root / key).symlink_to(Path("..data") / key)

    def update(self, data: dict[str, str]) -> None:
        self.generation += 1
        payload = self.root / f"..2026_11_26_10_00_0{self.generation}.000000001"
        payload.mkdir()
        for key, value in data.items():
            (payload / key).write_text(value)
        link = self.root / "..data_tmp"
        link.symlink_to(payload.name)
        link.replace(self.root / "..data")


class WebhookRefusing(_Fake):
    """A plain webhook that verifies ``X-Gitscale-Signature-256`` and answers 401 when it does
    not match its current secret."""

    def __init__(self, secret: str) -> None:
        super().__init__()
        self.secret = secret

    def answer(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, str]:
        expected = "sha256=" + hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(headers.get("x-gitscale-signature-256", ""), expected):
            return 401, '{"message": "bad signature"}'
        return 200, ""


def signature(header: str, secret: str, body: bytes) -> bool:
    return header == "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@pytest.mark.parametrize("kind", ["argocd", "webhook", "flux"])
def test_the_send_after_a_rotation_signs_with_the_volume_s_new_secret(  # type: ignore[no-untyped-def]
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """The engine rotated first (the next send is refused: one request, one line), then the
    Secret: the following send, in the same process, carries the new HMAC."""
    variable = {"argocd": "ARGOCD_WEBHOOK_SECRET", "webhook": "HOOK_SECRET",
                "flux": "FLUX_RECEIVER_TOKEN"}[kind]
    volume = Volume(tmp_path / "notify", {variable: OLD})
    monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv(f"{variable}_FILE", str(volume.root / variable))
    receiver = Receiver("gitscale", "flux-system", OLD)
    fake = {"argocd": lambda: FakeArgoCD(OLD), "webhook": lambda: WebhookRefusing(OLD),
            "flux": lambda: FakeFlux(receiver)}[kind]()
    header = {"argocd": "x-hub-signature-256", "webhook": "x-gitscale-signature-256",
              "flux": "x-signature"}[kind]
    logged: list[str] = []

    def log(message: str, *, level: str | None = None) -> None:
        logged.append(message)

    with fake:
        # flux: the webhook-receiver's base URL and the Receiver's name: the hook path is
        # derived from the token, so it follows the rotation too
        target = Target(kind, fake.base if kind != "argocd" else f"{fake.base}/api/webhook",
                        {"env": variable}, repo_url=PUSHED.repo_url if kind == "argocd" else None,
                        receiver=("gitscale", "flux-system") if kind == "flux" else None,
                        where="gitscale.yaml:9")
        assert notify_all([target], PUSHED, log=log) == (target.label,)
        if kind == "flux":
            receiver.token = NEW
        else:
            fake.secret = NEW
        assert notify_all([target], PUSHED, log=log) == ()
        assert len(fake.seen) == 2  # refused once: no retry
        volume.update({variable: NEW})
        assert notify_all([target], PUSHED, log=log) == (target.label,)
    first, refused, rotated = fake.seen
    assert first.status == 200 and rotated.status == 200
    assert refused.status == {"argocd": 400, "webhook": 401, "flux": 404}[kind]
    assert signature(first.headers[header], OLD, first.body)
    assert signature(rotated.headers[header], NEW, rotated.body)  # the new HMAC, no restart
    if kind == "flux":
        assert rotated.path == Receiver("gitscale", "flux-system", NEW).webhook_path
    (line,) = logged
    assert line.startswith(f"notify {target.label} failed: HTTP {refused.status}"), line
    assert OLD not in line and NEW not in line and "/hook/" not in line


class RotatingFlux(FakeFlux):
    """Flux whose Receiver's token is rotated, with the Secret volume and the demand, once it
    has accepted its first request (the test's clock: the loop's second pass comes after)."""

    def __init__(self, receiver: Receiver, rotate: Callable[[], None]) -> None:
        super().__init__(receiver)
        self.rotate = rotate

    def answer(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, str]:
        status, error = super().answer(path, headers, body)
        if status == 200 and not self.seen:  # (appended after this answer)
            self.rotate()
        return status, error


def test_a_running_loop_notifies_with_the_rotated_secret(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """`gitscale run`, one process, two passes that push: the volume is updated between them,
    and the second notification is signed with the new token."""
    volume = Volume(tmp_path / "notify", {"FLUX_RECEIVER_TOKEN": OLD})
    monkeypatch.delenv("FLUX_RECEIVER_TOKEN", raising=False)
    monkeypatch.setenv("FLUX_RECEIVER_TOKEN_FILE", str(volume.root / "FLUX_RECEIVER_TOKEN"))
    receiver = Receiver("gitscale", "flux-system", OLD)
    demand = tmp_path / "demand.yaml"
    demand.write_text("linux: {queued: 3, running: 0}\n")

    def rotate() -> None:
        receiver.token = NEW
        volume.update({"FLUX_RECEIVER_TOKEN": NEW})
        demand.write_text("linux: {queued: 5, running: 0}\n")

    with RotatingFlux(receiver, rotate) as flux:
        checkout = repo(tmp_path, f"""\
notify:
  - flux: {{url: {flux.base}, receiver: {{name: gitscale, namespace: flux-system}},
            token: {{env: FLUX_RECEIVER_TOKEN}}}}
""")
        code, _, err = run(capsys, "run", "--repo", str(checkout), "--demand", str(demand),
                           "--interval", "1s", "--max-passes", "2")
    assert code == 0, err
    assert [s.status for s in flux.seen] == [200, 200], err
    first, second = flux.seen
    assert signature(first.headers["x-signature"], OLD, first.body)
    assert signature(second.headers["x-signature"], NEW, second.body)
    assert json.loads(second.body)["sets"][0]["replicas"] == 5
    assert OLD not in err and NEW not in err
    assert git(checkout.parent / "remote.git", "log", "-1", "--format=%s", "main") == \
        "gitscale: linux 3→5"


def test_a_notify_secret_set_as_variable_and_file_is_refused_naming_both(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """Which one is current cannot be guessed: one line naming both and gitscale.yaml's line,
    no request, never a value; the pass still lands."""
    token_file = tmp_path / "FLUX_RECEIVER_TOKEN"
    token_file.write_text(NEW)
    monkeypatch.setenv("FLUX_RECEIVER_TOKEN", OLD)
    monkeypatch.setenv("FLUX_RECEIVER_TOKEN_FILE", str(token_file))
    receiver = Receiver("gitscale", "flux-system", NEW)
    with FakeFlux(receiver) as flux:
        checkout = repo(tmp_path, f"""\
notify:
  - flux:
      url: {flux.base}
      receiver: {{name: gitscale, namespace: flux-system}}
      token: {{env: FLUX_RECEIVER_TOKEN}}
""")
        code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, err
    assert "pushed" in out and flux.seen == []
    (line,) = [line for line in err.splitlines() if line.strip()]
    config = (checkout / "gitscale.yaml").read_text().splitlines()
    number = next(i for i, text in enumerate(config, 1) if "token: {env:" in text)
    assert (f"notify flux ({flux.base}) failed: gitscale.yaml:{number}: token: "
            "FLUX_RECEIVER_TOKEN_FILE: FLUX_RECEIVER_TOKEN is set too") in line, line
    assert OLD not in out + err and NEW not in out + err
