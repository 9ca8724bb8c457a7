"""After a push, gitscale tells Flux / Argo CD / a plain URL to sync now: the exact request each
engine verifies, and a failing notification that never fails the pass."""
from __future__ import annotations

import hashlib
import hmac
import json
import re
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import RUNNERSET, git, make_repo, run
from tests.notify.engines import Application, FakeArgoCD, FakeFlux, Receiver

TOKEN = "flux-receiver-token-9f2c71"
ARGO_SECRET = "argocd-github-secret-41d0"
HOOK_SECRET = "plain-hook-secret-77aa"
SECRETS = (TOKEN, ARGO_SECRET, HOOK_SECRET)
SETS = """\
runnerSets:
  - name: linux
    manifest: clusters/prod/linux.yaml
    source: {file: demand.yaml}
    policy: {minReplicas: 0, maxReplicas: 20}
"""


def repo(tmp_path: Path, notify: str, demand: int = 3) -> Path:
    return make_repo(tmp_path, {
        "gitscale.yaml": SETS + notify,
        "clusters/prod/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": f"linux: {{queued: {demand}, running: 0}}\n",
    })


@pytest.fixture(autouse=True)
def secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLUX_RECEIVER_TOKEN", TOKEN)
    monkeypatch.setenv("ARGOCD_WEBHOOK_SECRET", ARGO_SECRET)
    monkeypatch.setenv("HOOK_SECRET", HOOK_SECRET)


def pushed_head(checkout: Path) -> str:
    return git(checkout.parent / "remote.git", "rev-parse", "main")


def no_secret_in(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text


def test_flux_receiver_gets_a_signed_request_it_accepts(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Both spellings: the Receiver's full /hook/ URL, and the base URL plus the Receiver's
    name and namespace (gitscale derives the same path the controller publishes)."""
    receiver = Receiver("gitscale", "flux-system", TOKEN)
    with FakeFlux(receiver) as flux:
        checkout = repo(tmp_path, f"""\
notify:
  - flux: {{url: "{flux.base}{receiver.webhook_path}", token: {{env: FLUX_RECEIVER_TOKEN}}}}
  - flux:
      url: {flux.base}
      receiver: {{name: gitscale, namespace: flux-system}}
      token: {{env: FLUX_RECEIVER_TOKEN}}
""")
        code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, err
    assert [s.status for s in flux.seen] == [200, 200], [s.error for s in flux.seen]
    assert flux.reconciled == ["GitRepository/gitscale"] * 2
    head = pushed_head(checkout)
    for seen in flux.seen:
        assert seen.path == receiver.webhook_path
        digest = hmac.new(TOKEN.encode(), seen.body, hashlib.sha256).hexdigest()
        assert seen.headers["x-signature"] == f"sha256={digest}"
        body = json.loads(seen.body)
        assert body["after"] == head and body["branch"] == "main"
        assert body["files"] == ["clusters/prod/linux.yaml"]
        assert body["sets"][0]["name"] == "linux" and body["sets"][0]["replicas"] == 3
    assert f"notified flux ({flux.base}), flux ({flux.base})" in out
    assert receiver.webhook_path not in out + err
    no_secret_in(out, err)


def test_argocd_refreshes_the_applications_of_the_pushed_repo_and_branch(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    apps = [
        Application("https-git", "https://git.example.com/ci/config.git", "main"),
        Application("https-bare", "https://git.example.com/ci/config"),  # HEAD
        Application("scp", "git@git.example.com:ci/config.git", "refs/heads/main"),
        Application("ssh", "ssh://git@git.example.com/ci/config.git", "main"),
        Application("paths", "https://git.example.com/ci/config.git", "main",
                    generate_paths=["/clusters/prod"]),
        Application("other-paths", "https://git.example.com/ci/config.git", "main",
                    generate_paths=["/clusters/staging"]),
        Application("other-branch", "https://git.example.com/ci/config.git", "staging"),
        Application("other-repo", "https://git.example.com/ci/config-two.git", "main"),
    ]
    with FakeArgoCD(ARGO_SECRET, *apps) as argo:
        checkout = repo(tmp_path, f"""\
notify:
  - argocd:
      url: {argo.base}
      secret: {{env: ARGOCD_WEBHOOK_SECRET}}
      repoURL: https://git.example.com/ci/config.git
""")
        base = git(checkout, "rev-parse", "HEAD")
        code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, err
    assert [(s.status, s.error) for s in argo.seen] == [(200, "")]
    seen = argo.seen[0]
    assert seen.path == "/api/webhook"
    assert seen.headers["x-github-event"] == "push"
    assert seen.headers["x-hub-signature-256"] == "sha256=" + hmac.new(
        ARGO_SECRET.encode(), seen.body, hashlib.sha256).hexdigest()
    assert seen.headers["x-hub-signature"] == "sha1=" + hmac.new(
        ARGO_SECRET.encode(), seen.body, hashlib.sha1).hexdigest()
    assert sorted(argo.refreshed) == ["https-bare", "https-git", "paths", "scp", "ssh"]
    event: dict[str, Any] = argo.events[0]
    assert event["ref"] == "refs/heads/main"
    assert (event["before"], event["after"]) == (base, pushed_head(checkout))
    assert event["repository"]["html_url"] == "https://git.example.com/ci/config"
    assert event["repository"]["clone_url"] == "https://git.example.com/ci/config.git"
    assert event["commits"][0]["modified"] == ["clusters/prod/linux.yaml"]
    assert event["commits"][0]["message"] == "gitscale: linux 0→3"
    assert f"notified argocd ({argo.base})" in out
    no_secret_in(out, err)


def test_argocd_with_a_wrong_secret_is_one_line_and_exit_0(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    with FakeArgoCD("the-secret-argo-cd-really-holds",
                    Application("app", "https://git.example.com/ci/config.git")) as argo:
        checkout = repo(tmp_path, f"""\
notify:
  - argocd: {{url: {argo.base}/api/webhook, secret: {{env: ARGOCD_WEBHOOK_SECRET}},
              repoURL: "https://git.example.com/ci/config.git"}}
""")
        code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0 and argo.refreshed == []
    lines = [line for line in err.splitlines() if "notify" in line]
    assert len(lines) == 1, err
    assert f"notify argocd ({argo.base}) failed: HTTP 400" in lines[0]
    # a timestamped line, as run and serve write theirs (gitscale.logline)
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ notify argocd ", lines[0]), lines[0]
    assert "HMAC verification failed" in lines[0] and "poll still applies" in lines[0]
    assert "committed" in out and "pushed" in out
    no_secret_in(out, err)


def test_plain_webhook_gets_small_signed_json(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    with FakeFlux() as hook:  # any path that is not a Receiver's answers 404 …
        hook.answer = lambda path, headers, body: (204, "")  # type: ignore[method-assign]
        checkout = repo(tmp_path, f"""\
notify:
  - webhook: {{url: "{hook.base}/gitscale/pushed?team=ci", secret: {{env: HOOK_SECRET}}}}
  - webhook: {{url: "{hook.base}/unsigned"}}
""")
        code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, err
    signed, unsigned = hook.seen
    assert signed.path == "/gitscale/pushed?team=ci" and unsigned.path == "/unsigned"
    assert signed.headers["content-type"] == "application/json"
    assert signed.headers["x-gitscale-signature-256"] == "sha256=" + hmac.new(
        HOOK_SECRET.encode(), signed.body, hashlib.sha256).hexdigest()
    assert "x-gitscale-signature-256" not in unsigned.headers
    body = json.loads(signed.body)
    assert body["event"] == "push" and body["after"] == pushed_head(checkout)
    assert body["sets"] == [{"name": "linux", "replicas": 3, "previous": 0, "patch": 0,
                             "reason": "first-write"}]
    assert len(signed.body) < 1000
    no_secret_in(out, err)
    # what the README promises a receiver: exactly these keys, no more, no fewer
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    bullet = readme[readme.index("- **webhook**: the same facts"):]
    promised = bullet[bullet.index('`{"event"'):]
    promised = promised[:promised.index("}`") + 1]
    keys = re.findall(r'"(\w+)":', promised)
    assert keys == [*body] + [*body["sets"][0]], promised


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when this returns


@pytest.mark.parametrize("failure", ["refused", "http-500", "timeout", "trickle", "no-secret"])
def test_a_failing_notify_is_one_log_line_and_the_pass_still_succeeds(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch, failure: str) -> None:
    receiver = Receiver("gitscale", "flux-system", TOKEN)
    with FakeFlux(receiver) as flux:
        base = f"http://127.0.0.1:{closed_port()}" if failure == "refused" else flux.base
        if failure == "http-500":
            flux.fail_with = 500
        if failure == "timeout":
            flux.stall = True
        if failure == "trickle":  # (it answers, too slowly: not "no answer")
            flux.trickle = True
        if failure == "no-secret":
            monkeypatch.delenv("FLUX_RECEIVER_TOKEN")
        checkout = repo(tmp_path, f"""\
notify:
  - flux:
      url: {base}
      receiver: {{name: gitscale, namespace: flux-system}}
      token: {{env: FLUX_RECEIVER_TOKEN}}
      timeout: 1s
""")
        code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, err
    assert "committed" in out and "pushed" in out and "notified" not in out
    assert git(checkout.parent / "remote.git", "log", "-1", "--format=%s", "main") == \
        "gitscale: linux 0→3"
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert f"notify flux ({base}) failed: " in lines[0]
    assert {"refused": "cannot connect", "http-500": "HTTP 500", "timeout": "no answer within 1s",
            "trickle": "answer too slow (timed out: the answer from 127.0.0.1:",
            "no-secret": "environment variable FLUX_RECEIVER_TOKEN is not set"}[failure] \
        in lines[0]
    if failure == "no-secret":  # at the line that names it
        config = (checkout / "gitscale.yaml").read_text().splitlines()
        line = next(i for i, text in enumerate(config, 1) if "token: {env:" in text)
        assert f"failed: gitscale.yaml:{line}: token: environment variable" in lines[0]
    assert receiver.webhook_path not in err and "/hook/" not in err
    no_secret_in(out, err)


def test_no_notification_without_a_push(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Not for --no-push, not when nothing was committed; once for the pass that pushed."""
    receiver = Receiver("gitscale", "flux-system", TOKEN)
    with FakeFlux(receiver) as flux:
        checkout = repo(tmp_path, f"""\
notify:
  - flux: {{url: {flux.base}, receiver: {{name: gitscale, namespace: flux-system}},
            token: {{env: FLUX_RECEIVER_TOKEN}}}}
""")
        assert run(capsys, "reconcile", "--repo", str(checkout), "--no-push")[0] == 0
        assert flux.seen == []
        git(checkout, "reset", "--quiet", "--hard", "origin/main")
        assert run(capsys, "reconcile", "--repo", str(checkout))[0] == 0
        assert len(flux.seen) == 1
        code, out, _ = run(capsys, "reconcile", "--repo", str(checkout))
        assert code == 0 and "no change" in out
        assert len(flux.seen) == 1


def test_drain_and_run_notify_too(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    receiver = Receiver("gitscale", "flux-system", TOKEN)
    with FakeFlux(receiver) as flux:
        checkout = repo(tmp_path, f"""\
notify:
  - flux: {{url: {flux.base}, receiver: {{name: gitscale, namespace: flux-system}},
            token: {{env: FLUX_RECEIVER_TOKEN}}}}
""")
        code, _, err = run(capsys, "run", "--repo", str(checkout), "--interval", "1s",
                           "--max-passes", "1")
        assert code == 0, err
        assert len(flux.seen) == 1 and f"notified flux ({flux.base})" in err
        code, out, err = run(capsys, "drain", "linux", "--repo", str(checkout))
        assert code == 0, err
        assert len(flux.seen) == 2 and f"notified flux ({flux.base})" in out
        assert json.loads(flux.seen[1].body)["sets"][0]["reason"] == "drain"
    assert all(s.status == 200 for s in flux.seen)


def test_serve_notifies_after_its_batch_lands(tmp_path: Path,  # type: ignore[no-untyped-def]
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.commands.test_serve import CONFIG, SECRET, Server, job

    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    with FakeArgoCD(ARGO_SECRET, Application("app", "https://git.example.com/ci/config.git")) \
            as argo:
        checkout = make_repo(tmp_path, {
            "gitscale.yaml": CONFIG + f"notify:\n  - argocd: {{url: {argo.base}, secret: "
            "{env: ARGOCD_WEBHOOK_SECRET}, repoURL: 'git@git.example.com:ci/config.git'}\n",
            "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
            "sets/gpu.yaml": RUNNERSET.format(name="gpu", replicas=0),
        })
        server = Server(checkout, window="1s")
        try:
            assert server.post(job(1, "queued", ["self-hosted", "linux"]))[0] == 202
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any(
                    "sets/linux.yaml" in e["commits"][0]["modified"] for e in argo.events):
                time.sleep(0.1)
        finally:
            server.close()
    # serve's start-up commit (its `served:` claim) is pushed and notified too
    assert argo.refreshed == ["app"] * len(argo.events) and 1 <= len(argo.events) <= 2
    event = argo.events[-1]
    assert event["after"] == pushed_head(checkout)
    assert "sets/linux.yaml" in event["commits"][0]["modified"]
    touched = event["commits"][0]["added"] + event["commits"][0]["modified"]
    assert ".gitscale/reservations.yaml" in touched


def test_argocd_without_a_url_to_announce_says_what_to_set(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The checkout's remote is a local path: no web URL for Argo CD to match."""
    with FakeArgoCD(ARGO_SECRET) as argo:
        checkout = repo(tmp_path, f"notify:\n  - argocd: {{url: {argo.base}}}\n")
        code, _, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0 and argo.seen == []
    assert "no repository URL to announce" in err and "repoURL" in err


def test_a_self_signed_certificate_is_verified_unless_the_entry_says_not_to(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """argocd-server in the cluster serves https with its own self-signed certificate:
    refused by default; accepted for the one entry with insecureSkipTLSVerify, while another
    https entry of the same pass, to the same server, is still verified."""
    app = Application("app", "https://git.example.com/ci/config.git")
    with FakeArgoCD(ARGO_SECRET, app, tls=True) as argo:
        assert argo.base.startswith("https://")
        checkout = repo(tmp_path, f"""\
notify:
  - argocd:
      url: {argo.base}
      insecureSkipTLSVerify: true
      secret: {{env: ARGOCD_WEBHOOK_SECRET}}
      repoURL: https://git.example.com/ci/config.git
  - webhook: {{url: "{argo.base}/api/webhook"}}
""")
        code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, err
    assert [(s.path, s.status) for s in argo.seen] == [("/api/webhook", 200)]
    assert argo.refreshed == ["app"] and f"notified argocd ({argo.base})" in out
    (line,) = [line for line in err.splitlines() if line.strip()]
    assert f"notify webhook ({argo.base}) failed: cannot connect" in line
    assert "certificate" in line.lower(), line
    no_secret_in(out, err)


BAD_NOTIFY = [
    pytest.param("  - flux: {url: 'http://flux.example.com', token: {env: T}}\n",
                 ":7:", ["notify[0] flux", "/hook/", "receiver"], id="flux-no-hook-path"),
    pytest.param("  - flux: {url: 'http://h/hook/abc', token: {env: T},\n"
                 "            receiver: {name: a, namespace: b}}\n",
                 ":7:", ["not both"], id="flux-path-and-receiver"),
    pytest.param("  - flux: {url: 'http://h/hook/abc'}\n", ":7:", ["token", "required"],
                 id="flux-no-token"),
    pytest.param("  - argocd: {url: 'https://bot:pw@argocd.example.com'}\n", ":7:",
                 ["notify[0] argocd.url", "URL without credentials"], id="credentials-in-url"),
    pytest.param("  - argocd: {url: 'https://argocd', repoURL: '/srv/git/config'}\n", ":7:",
                 ["repoURL", "not a git URL"], id="argocd-bad-repo-url"),
    pytest.param("  - argocd: {url: 'https://argocd', secret: {env: S}, timout: 2s}\n", ":7:",
                 ["unknown key 'timout'"], id="typo"),
    pytest.param("  - slack: {url: 'https://hooks.example.com'}\n", ":7:",
                 ["unknown key 'slack'", "allowed: argocd, flux, webhook"], id="unknown-kind"),
    pytest.param("  - webhook: {url: 'https://h', timeout: 5m}\n", ":7:",
                 ["notify[0] webhook.timeout"], id="timeout-too-long"),
    pytest.param("  - argocd:\n      url: http://argocd.example.com\n"
                 "      insecureSkipTLSVerify: true\n", ":9:",
                 ["notify[0] argocd.insecureSkipTLSVerify", "https:// url only"],
                 id="insecure-on-http"),
    pytest.param("  - argocd: {url: 'https://argocd', insecureSkipTLSVerify: 'yes'}\n", ":7:",
                 ["insecureSkipTLSVerify"], id="insecure-not-a-boolean"),
]


@pytest.mark.parametrize(("notify", "where", "words"), BAD_NOTIFY)
def test_bad_notify_entries_are_refused_with_file_and_line(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, notify: str, where: str, words: list[str]) -> None:
    checkout = repo(tmp_path, "notify:\n" + notify)
    before = git(checkout, "rev-parse", "HEAD")
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1 and "Traceback" not in out + err
    assert err.startswith(f"error: gitscale.yaml{where}"), err
    for word in words:
        assert word in err, err
    assert git(checkout, "rev-parse", "HEAD") == before
    assert run(capsys, "validate", "--repo", str(checkout))[0] == 1


def test_a_receiver_that_echoes_the_signature_does_not_put_it_in_the_log(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """Argo CD and Flux quote the signature they could not verify in their error answer
    (`{"message": "bad sig sha256=bf84…"}`): the log line shows neither it, whole or cut, nor
    the secret or the Flux hook path."""
    receiver = Receiver("gitscale", "flux-system", TOKEN)
    sent: list[str] = []

    def echo(path: str, headers: dict[str, str], body: bytes) -> tuple[int, str]:
        signatures = [v for k, v in headers.items() if "signature" in k]
        sent.extend(signatures)
        quoted = " ".join(f"bad sig {v} (expected {v[7:27]}…)" for v in signatures)
        return 400, json.dumps({"message": f"{quoted} at {path}"})

    with FakeFlux() as hook:
        hook.answer = echo  # type: ignore[method-assign]
        checkout = repo(tmp_path, f"""\
notify:
  - argocd: {{url: {hook.base}/api/webhook, secret: {{env: ARGOCD_WEBHOOK_SECRET}},
              repoURL: "https://git.example.com/ci/config.git"}}
  - flux: {{url: {hook.base}, receiver: {{name: gitscale, namespace: flux-system}},
            token: {{env: FLUX_RECEIVER_TOKEN}}}}
  - webhook: {{url: "{hook.base}/pushed", secret: {{env: HOOK_SECRET}}}}
""")
        code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, err
    assert len(sent) == 4  # argocd: sha256 and sha1; flux: X-Signature; the plain webhook
    lines = [line for line in err.splitlines() if "notify" in line]
    assert len(lines) == 3, err
    for line in lines:
        assert "failed: HTTP 400: " in line and "bad sig sha" in line and "***" in line, line
    # a 400 is how Argo CD and Flux refuse a signature: which secret signed it, said so
    argocd, flux, hook = lines
    assert "(if the signature did not verify: the secret from {env: ARGOCD_WEBHOOK_SECRET} " \
        "at gitscale.yaml:" in argocd, argocd
    assert "(if the signature did not verify: the token from {env: FLUX_RECEIVER_TOKEN} " \
        "at gitscale.yaml:" in flux, flux
    assert "(if the signature did not verify: the secret from {env: HOOK_SECRET} " in hook, hook
    for signature in sent:
        digest = signature.partition("=")[2]
        assert digest not in err and digest[:20] not in err, err
    assert receiver.webhook_path not in err and "/hook/" not in err
    no_secret_in(out, err)


def test_a_receiver_that_echoes_the_secret_escaped_does_not_put_it_in_the_log(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """A receiver that quotes the secret in a JSON answer quotes it JSON-escaped (a quote, a
    backslash, a letter outside ASCII): the log line masks that form too, not only the secret
    as it is."""
    secret = 'hook-"secret"\\with-é-77aa'
    monkeypatch.setenv("HOOK_SECRET", secret)
    echoed = json.dumps(secret)[1:-1]
    assert echoed != secret

    def echo(path: str, headers: dict[str, str], body: bytes) -> tuple[int, str]:
        return 401, json.dumps({"message": f"secret {secret} does not match"})

    with FakeFlux() as hook:
        hook.answer = echo  # type: ignore[method-assign]
        checkout = repo(tmp_path, f"""\
notify:
  - webhook: {{url: "{hook.base}/pushed", secret: {{env: HOOK_SECRET}}}}
""")
        code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, err
    (line,) = [line for line in err.splitlines() if "notify" in line]
    assert 'failed: HTTP 401: {"message": "secret *** does not match"}' in line, line
    # which credential it refused, where gitscale.yaml declares it
    lines = (checkout / "gitscale.yaml").read_text().splitlines()
    (number,) = [n for n, text in enumerate(lines, 1) if "HOOK_SECRET" in text]
    # (a variable: reading it again gives the refused value until a restart)
    assert (f"(the secret from {{env: HOOK_SECRET}} at gitscale.yaml:{number}: an environment "
            "variable, a new value needs a restart)") in line, line
    for shown in (secret, echoed, "hook-", "77aa"):
        assert shown not in out + err


def test_a_refused_secret_of_a_file_is_said_read_again_with_its_path(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """``{env: HOOK_SECRET}`` read through ``HOOK_SECRET_FILE``: the file is read at each
    notification, so putting a valid secret there is the fix (its path said)."""
    secret_file = tmp_path / "hook-secret"
    secret_file.write_text("not-the-receivers-secret-31\n")
    monkeypatch.delenv("HOOK_SECRET")
    monkeypatch.setenv("HOOK_SECRET_FILE", str(secret_file))
    with FakeFlux() as hook:
        hook.answer = lambda *_: (403, "forbidden")  # type: ignore[method-assign,assignment]
        checkout = repo(tmp_path, f"""\
notify:
  - webhook: {{url: "{hook.base}/pushed", secret: {{env: HOOK_SECRET}}}}
""")
        code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, err
    (line,) = [line for line in err.splitlines() if "notify" in line]
    assert (f"failed: HTTP 403: forbidden (the secret from {{env: HOOK_SECRET}} "
            f"(HOOK_SECRET_FILE={secret_file}) at gitscale.yaml:") in line, line
    assert ", read again for each notification)" in line, line
    assert "not-the-receivers" not in out + err


def test_a_notify_secret_read_through_its_file_variable_rotates_between_passes(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """``{env: FLUX_RECEIVER_TOKEN}`` with only ``FLUX_RECEIVER_TOKEN_FILE`` set: the file's
    token, read at each send, so a `run` loop signs with a rotated one at its next pass."""
    token_file = tmp_path / "notify" / "FLUX_RECEIVER_TOKEN"
    token_file.parent.mkdir()
    token_file.write_text(TOKEN + "\n")
    monkeypatch.delenv("FLUX_RECEIVER_TOKEN")
    monkeypatch.setenv("FLUX_RECEIVER_TOKEN_FILE", str(token_file))
    receiver = Receiver("gitscale", "flux-system", TOKEN)
    with FakeFlux(receiver) as flux:
        checkout = repo(tmp_path, f"""\
notify:
  - flux: {{url: "{flux.base}{receiver.webhook_path}", token: {{env: FLUX_RECEIVER_TOKEN}}}}
""")
        code, _, err = run(capsys, "reconcile", "--repo", str(checkout))
        assert code == 0, err
        rotated = "flux-receiver-token-rotated-5e1b"
        token_file.write_text(rotated + "\n")
        (checkout / "demand.yaml").write_text("linux: {queued: 5, running: 0}\n")
        git(checkout, "commit", "--quiet", "-am", "more demand")
        git(checkout, "push", "--quiet")
        code, _, err = run(capsys, "reconcile", "--repo", str(checkout))
        assert code == 0, err
    first, second = flux.seen
    assert first.status == 200  # the file's token: the Receiver accepted it
    digest = hmac.new(rotated.encode(), second.body, hashlib.sha256).hexdigest()
    assert second.headers["x-signature"] == f"sha256={digest}"  # the rotated one, no restart
    no_secret_in(err)
    assert rotated not in err


def test_the_checkout_is_let_go_before_the_engines_are_told(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Another process's pass waits for this one's hold on the checkout, not for a GitOps
    engine's answer: when the notification arrives, the hold is already free."""
    import fcntl
    import os

    from gitscale.repo.checkout_lock import LOCK

    free: list[bool] = []
    with FakeFlux() as hook:
        checkout = repo(tmp_path, f"""\
notify:
  - webhook: {{url: "{hook.base}/pushed"}}
""")

        def answer(path: str, headers: dict[str, str], body: bytes) -> tuple[int, str]:
            fd = os.open(checkout / ".git" / LOCK, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                free.append(True)
            except BlockingIOError:
                free.append(False)
            finally:
                os.close(fd)
            return 204, ""

        hook.answer = answer  # type: ignore[method-assign]
        code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, err
    assert free == [True] and "pushed" in out
