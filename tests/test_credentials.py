"""Credentials never reach output: not from a repo URL (scp-style, a ?token= query), not from
git's error output, not from a server that echoes the token back in its error message."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from gitscale.redact import redact
from tests.demand.conftest import GH_TOKEN
from tests.demand.fake_github import FakeGitHub
from tests.demand.test_reconcile_github import config_repo
from tests.helpers import RUNNERSET, git, make_repo, run, simple_config


@pytest.mark.parametrize("url", [
    "user:SECRETpw@github.example:config.git",
    "https://github.example/o/config.git?token=SECRETq",
    "https://github.example/o/config.git?x=1&access_token=SECRETq",
    "https://github.example/o/config.git?private_token=SECRETq#main",
])
def test_a_repo_url_with_credentials_is_refused_and_not_echoed(capsys, url: str) -> None:  # type: ignore[no-untyped-def]
    for command in ("plan", "reconcile"):
        code, out, err = run(capsys, command, "--repo", url)
        assert code == 1 and "has credentials in it" in err, err
        assert "SECRET" not in out + err


def test_a_token_in_the_remote_url_of_a_checkout_is_not_in_git_errors(tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                      capsys) -> None:
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "default"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=2),
        "demand.yaml": "linux: {queued: 5, running: 0}\n",
    })
    git(checkout, "remote", "set-url", "origin",
        "http://127.0.0.1:9/config.git?private_token=SECRETq")
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 1 and "git fetch" in err, err
    assert "private_token=***" in err and "SECRETq" not in out + err


@pytest.mark.parametrize(("text", "want"), [
    ("fatal: 'u:pw1234@host:repo.git' does not appear", "fatal: 'u:***@host:repo.git' does"),
    ("see https://x:pw1234@h/r and https://tok1234@h/r", "see https://***@h/r and https://***@h/r"),
    ("GET https://h/r?page=2&per_page=100", "GET https://h/r?page=2&per_page=100"),
    ("GET https://h/r?page=2&api_key=k1234&sig=s1234", "GET https://h/r?page=2&api_key=***&sig=***"),
    ("a time 10:30:00@noon: no credentials", "a time 10:30:00@noon: no credentials"),
])
def test_redact(text: str, want: str) -> None:
    assert redact(text).startswith(want)


@pytest.fixture
def echoing(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    """A GitHub (or a proxy in front of one) that repeats the credential in its error."""
    monkeypatch.setenv("GH_TOKEN", GH_TOKEN)
    with FakeGitHub(token=GH_TOKEN) as fake:
        fake.add_repo("acme", "app")
        fake.fail("body", status=401, body=json.dumps(
            {"message": f"Bad credentials: Authorization: Bearer {GH_TOKEN}"}).encode())
        yield fake


@pytest.mark.parametrize("command", [["plan"], ["reconcile"], ["run", "--max-passes", "1"]])
def test_a_token_echoed_by_the_server_is_masked(tmp_path: Path, capsys, echoing: FakeGitHub,  # type: ignore[no-untyped-def]
                                                command: list[str]) -> None:
    checkout = config_repo(tmp_path, echoing)
    code, out, err = run(capsys, *command, "--repo", str(checkout))
    assert code == 1, out + err
    assert "answered 401: Bad credentials: Authorization: ***" in out + err, out + err
    assert GH_TOKEN not in out + err


HOOKED = "hooked-secret-7f3e9a1c55"
GITHUB_SOURCE = """\
runnerSets:
  - name: linux
    manifest: sets/linux.yaml
    source: {github: {org: acme, labels: [self-hosted], token: {file: TOKEN_PATH}}}
    policy: default
"""


@pytest.mark.parametrize("where", [
    "GITHUB_TOKEN", "BUILDKITE_AGENT_TOKEN", "GITHUB_WEBHOOK_SECRET", "GITSCALE_GIT_TOKEN",
    "GITSCALE_GIT_TOKEN_FILE", "notify-env", "notify-file", "source-file",
])
def test_a_secret_echoed_by_a_server_hook_is_masked(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    where: str) -> None:
    """The remote's pre-receive hook prints a secret gitscale holds (a hook run with the
    pusher's environment, a misconfigured server): the refusal shows the hook's line, masked,
    whether or not the pass itself read that secret."""
    secret_file = tmp_path / "secret"
    secret_file.write_text(HOOKED + "\n")
    config = simple_config({"linux": "default"})
    if where.isupper() and where.endswith("_FILE"):
        monkeypatch.setenv(where, str(secret_file))
    elif where.isupper():
        monkeypatch.setenv(where, HOOKED)
    elif where.startswith("notify"):
        ref = "{env: MY_HOOK_SECRET}" if where == "notify-env" else f"{{file: {secret_file}}}"
        monkeypatch.setenv("MY_HOOK_SECRET", HOOKED)
        config += f"notify:\n  - webhook: {{url: 'http://127.0.0.1:9/pushed', secret: {ref}}}\n"
    else:  # a GitHub source whose token is not read: --demand replaces every source
        config = GITHUB_SOURCE.replace("TOKEN_PATH", str(secret_file))
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": config,
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=2),
        "demand.yaml": "linux: {queued: 5, running: 0}\n",
    })
    hook = tmp_path / "remote.git" / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\necho 'checking the push with {HOOKED}'\nexit 1\n")
    hook.chmod(0o755)
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout),
                         "--demand", str(checkout / "demand.yaml"))
    assert code == 1, out + err
    assert "the remote refused the push" in err and "remote: checking the push with ***" in err
    assert HOOKED not in out + err
    from gitscale import crash

    assert HOOKED not in crash.summary(ValueError(f"a bug quoting {HOOKED}"))


def test_a_secret_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    """Read as a regular file of bounded size (a FIFO without a writer waited forever)."""
    import os

    from gitscale.config.secrets import SecretError, read_secret, hold_named, SecretRef

    fifo = tmp_path / "token"
    os.mkfifo(fifo)
    with pytest.raises(SecretError, match=r"token: .*token: is not a regular file \(a FIFO\)"):
        read_secret({"file": str(fifo)}, "token")
    hold_named([SecretRef("file", str(fifo))])  # held for masking when it can be: no wait
