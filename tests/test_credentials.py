"""Credentials never reach output: not from a repo URL (scp-style, a ?token= query), not from
git's error output, not from a server that echoes the token back in its error message."""
from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Iterator

import pytest

from gitscale.redact import (
    HELD,
    SECRET_ENV,
    SECRET_FILE_ENV,
    SECRET_FILES,
    hold,
    known_secrets,
    redact,
    secret_forms,
)
from tests.commands.test_serve import repo
from tests.demand.conftest import GH_TOKEN, app_github
from tests.demand.fake_github import FakeGitHub
from tests.demand.test_reconcile_github import config_repo
from tests.helpers import RUNNERSET, git, make_repo, run, simple_config

__all__ = ["app_github", "repo"]  # fixtures, shared


@pytest.mark.parametrize("url", [
    "user:SECRETpw@github.example:config.git",
    "https://github.example/o/config.git?token=SECRETq",
    "https://github.example/o/config.git?x=1&access_token=SECRETq",
    "https://github.example/o/config.git?private_token=SECRETq#main",
    # a blank before the scheme (a variable's stray space): refused all the same, not handed
    # to git's argv (where `ps` shows it) for git to refuse as "protocol ' https'"
    " https://SECRETuser@github.example/o/config.git",
    "\thttps://x-access-token:SECRETpw@github.example/o/config.git",
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
    # the scheme is not what the mask looks for ("://" is): a word glued before it, or an
    # unusual scheme, still has its user info masked
    ("x1https://u:pw1234@h/r git+ssh://t1234@h:r", "x1https://***@h/r git+ssh://***@h:r"),
    ("a ://u:pw1234@h", "a ://***@h"),
    # tokens known by their shape, never read by this process (a token pasted into the wrong
    # place): GitHub's classic and fine-grained, Buildkite's API token, a JWT; near misses kept
    ("--output ghp_" + "A1b2" * 9 + " is not one of", "--output *** is not one of"),
    ("x github_pat_" + "11AB_cd" * 12 + ".", "x ***."),
    ("bkua_" + "0f" * 20 + ", ghs_" + "Zz9" * 12, "***, ***"),
    ("Bearer eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOjEyMzR9.c2lnbmF0dXJlLXBhcnQ", "Bearer ***"),
    ("branch ghp_short, commit 1f0c3a9e4b, tag eyJ.eyJ.x", "branch ghp_short, commit 1f0c3a9e4b, tag eyJ.eyJ.x"),
    # ... and escaped as a URL, a form or a repr shows them: glued to a %XX or a \n escape,
    # where no word boundary is (they were left whole)
    ("GET /?q=Bearer%20ghp_" + "A1b2" * 9, "GET /?q=Bearer%20***"),
    ("x-access-token%3Abkua_" + "0f" * 20 + "@h", "x-access-token%3A***@h"),
    ("header 'Bearer\\nghs_" + "Zz9" * 12 + "'", "header 'Bearer\\n***'"),
    ("a=1%2CeyJhbGciOiJSUzI1NiJ9.eyJpc3MiOjEyMzR9.c2lnbmF0dXJlLXBhcnQ", "a=1%2C***"),
    # a set, repo or word that merely starts like one is kept
    ("set weighs_gpu, repo acme/ghs_tools, highs_" + "x" * 8, "set weighs_gpu, repo acme/ghs_tools, highs_" + "x" * 8),
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


# -- a token never travels to another origin, and is never echoed from gitscale.yaml ------------
def test_a_next_page_on_another_host_gets_no_token(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The auditor's case: GitHub's ``Link: rel="next"`` pointing at another host was
    followed with ``Authorization: Bearer $GITHUB_TOKEN``."""
    monkeypatch.setenv("GH_TOKEN", GH_TOKEN)
    with FakeGitHub(token=GH_TOKEN) as api, FakeGitHub(token=GH_TOKEN, host="127.0.0.2") as other:
        api.add_repo("acme", "app")
        other.add_repo("acme", "app")
        api.fail("body", match="/orgs/acme/repos", body=json.dumps(
            [api.repo_object("acme/app")]).encode(), headers={
            "Link": f'<{other.url}/orgs/acme/repos?page=2>; rel="next"'})
        checkout = config_repo(tmp_path, api)
        before = git(tmp_path / "remote.git", "rev-parse", "main")
        code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
        assert code == 1, out + err
        assert (f"GET {api.url}/orgs/acme/repos?per_page=100&type=all: its next page is on "
                f"another origin ({other.url}): not followed, nothing is sent there") in err
        assert other.log == []
        assert git(tmp_path / "remote.git", "rev-parse", "main") == before
        assert GH_TOKEN not in out + err


SECRET_SOURCE = ("runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
                 "    source:\n      github:\n        org: acme\n        labels: [linux]\n"
                 "        token: {written}\n    policy: default\n")
SECRET_NOTIFY = ("runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
                 "    source: {{file: demand.yaml}}\n    policy: default\nnotify:\n"
                 "  - webhook:\n      url: https://hooks.example/gitscale\n"
                 "      secret: {written}\n")
INLINE = "ghp_SECRETinline0123456789"


@pytest.mark.parametrize(("config", "written", "where", "said"), [
    pytest.param(SECRET_SOURCE, INLINE, "gitscale.yaml:8: runner set 'linux' source.github.token",
                 "never inline", id="a-string"),
    pytest.param(SECRET_SOURCE, f"[{INLINE}]", "gitscale.yaml:8: runner set 'linux' "
                 "source.github.token", "never inline", id="a-list"),
    pytest.param(SECRET_SOURCE, f"{{env: {INLINE.replace('_', '-')}}}", "gitscale.yaml:8: "
                 "runner set 'linux' source.github.token.env",
                 "not the name of an environment variable", id="a-token-as-env-name"),
    pytest.param(SECRET_SOURCE, f"{{env: {INLINE}}}", "gitscale.yaml:8: runner set 'linux' "
                 "source.github.token.env", "a token, not the name of the environment variable",
                 id="a-token-where-the-name-belongs"),
    pytest.param(SECRET_SOURCE, "{env: github_pat_11ABSECRETinline}", "gitscale.yaml:8: runner "
                 "set 'linux' source.github.token.env", "revoke the token",
                 id="a-fine-grained-token-where-the-name-belongs"),
    pytest.param(SECRET_SOURCE, f"{{value: {INLINE}}}", "gitscale.yaml:8: runner set 'linux' "
                 "source.github.token", "one of the two, no other key", id="another-key"),
    pytest.param(SECRET_SOURCE, f"{{env: A, file: {INLINE}}}", "gitscale.yaml:8: runner set "
                 "'linux' source.github.token", "one of the two, no other key", id="both"),
    pytest.param(SECRET_NOTIFY, INLINE, "gitscale.yaml:9: notify[0] webhook.secret",
                 "never inline", id="notify"),
])
def test_a_secret_written_inline_is_refused_and_not_echoed(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                           config: str, written: str,
                                                           where: str, said: str) -> None:
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": config.format(written=written),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=2),
        "demand.yaml": "linux: {queued: 1, running: 0}\n"})
    for command in ("validate", "plan", "reconcile"):
        code, out, err = run(capsys, command, "--repo", str(checkout))
        assert code == 1, (command, out, err)
        assert f"error: {where}: " in err and said in err and "(the value is not shown)" in err, err
        assert "SECRETinline" not in out + err


def test_every_escaped_form_of_a_secret_is_masked() -> None:
    """An exception that quotes a header quotes it escaped: ``'Bearer ghp_a\\nb'``,
    ``b'ghp_\\xc3\\xa9'``. Each form is masked, not only the secret as it is."""
    secret = "ghp_SECRETpart1\nSECRETpart2é\udcff"
    for text in (repr(f"Bearer {secret}"), ascii(secret), repr(secret.encode("utf-8",
                                                                              "surrogateescape")),
                 json.dumps({"authorization": secret}), f"one line: {secret.splitlines()[0]}"):
        masked = redact(f"header value {text} is invalid", [secret])
        assert "SECRETpart" not in masked, masked
        assert "***" in masked
    assert redact("a word like ab", ["ab"]) == "a word like ab"  # too short to be a secret


@pytest.mark.parametrize("echoed", [
    pytest.param("https://hook.example/?t=SECRET%2Fpart1%2Bpart2%3D%3D", id="percent-encoded"),
    pytest.param("https://hook.example/?t=SECRET%2fpart1%2bpart2%3d%3d", id="lowercase-hex"),
    pytest.param("token=SECRET%2Fpart1%2Bpart2%3D%3D&x=1 sent as a form", id="form"),
])
def test_a_secret_echoed_percent_encoded_is_masked(echoed: str) -> None:
    """A server that puts a secret in a URL or a form it echoes shows it percent-encoded
    (a base64 App token or webhook secret has ``/``, ``+`` and ``=``)."""
    secret = "SECRET/part1+part2=="
    masked = redact(f"HTTP 400: {echoed}", [secret])
    assert "part1" not in masked and "***" in masked, masked


@pytest.fixture
def no_secret_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*SECRET_ENV, SECRET_FILE_ENV, *SECRET_FILES):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_secret_variables")
def test_the_registry_keeps_the_most_recently_held_secrets() -> None:
    """A long-running process re-reads rotated secrets (a Secret, a file) and mints an App
    token an hour: the registry keeps the ``HELD`` most recent values, the oldest held goes
    first, and a value held again (a secret in use is read again each pass) counts as new."""
    values = [f"rotated-secret-{i:04d}" for i in range(HELD + 50)]
    hold(values[0])
    for value in values[1:HELD]:
        hold(value)
    hold(values[0])  # read again: now the most recent
    for value in values[HELD:]:
        hold(value)
    known = known_secrets()
    assert len(known) == HELD
    assert values[0] in known and values[-1] in known
    assert values[1] not in known and values[50] not in known and values[51] in known
    said = redact(" ".join(values))
    assert values[1] in said  # forgotten: no longer masked
    for value in (values[0], *values[51:]):
        assert value not in said
    assert secret_forms.cache_info().maxsize is not None
    assert secret_forms.cache_info().maxsize >= HELD + len(SECRET_ENV) + 1
    redact("twice")
    before = secret_forms.cache_info().hits
    redact("twice")  # every form asked for again is in the cache: none computed twice
    info = secret_forms.cache_info()
    assert info.hits - before == HELD and info.currsize <= info.maxsize


@pytest.mark.usefixtures("no_secret_variables")
def test_secrets_held_from_many_threads_stay_bounded() -> None:
    """``hold`` is called from worker threads (the controller's, ``serve``'s): its eviction
    stays whole under contention."""
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(400):
                hold(f"thread-{n}-secret-{i:04d}")
                if i % 50 == 0:
                    known_secrets()
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    known = known_secrets()
    assert errors == [] and len(known) == HELD
    assert known <= {f"thread-{n}-secret-{i:04d}" for n in range(8) for i in range(400)}


# -- found by the end-to-end audit (2026-11): sentinels in every credential input ----------------
def test_a_github_apps_jwt_is_masked_as_its_tokens_are(app_github: FakeGitHub,  # type: ignore[no-untyped-def]
                                                       tmp_path: Path) -> None:
    """The App's JWT is a credential (signed with its private key, valid up to 10 minutes: it
    mints installation tokens of every repository the App may read). Only the App client's own
    errors masked it: a crash report or a `run` log line quoting the request's headers (a
    bug's exception text) showed it whole, where the installation tokens it bought showed
    ``***``. It is held, as they are, from when it is signed."""
    from gitscale import crash
    from tests.demand.fake_github import populate_org
    from tests.demand.test_github import app_source, read, write_config

    populate_org(app_github, "acme", 1)
    config = write_config(tmp_path / "repo", [
        {"name": "linux", "source": app_source(app_github, app_github.key_path)}])  # type: ignore[attr-defined]
    assert read(tmp_path / "repo", config).errors == {}
    sent = {(r.authorization or "").removeprefix("Bearer ") for r in app_github.log}
    jwts = {s for s in sent if s.startswith("eyJ") and s.count(".") == 2}
    tokens = {t["token"] for t in app_github.issued}
    assert jwts and tokens
    for secret in (*jwts, *tokens):
        said = crash.summary(RuntimeError(f"headers={{'Authorization': 'Bearer {secret}'}}"))
        assert secret not in said and "'Bearer ***'" in said, said


@pytest.mark.parametrize("argv", [
    pytest.param(["plan", "--output", "ghp_SENTINELusage0123456789"], id="a-choice"),
    pytest.param(["plan", "ghp_SENTINELusage0123456789"], id="an-extra-argument"),
    pytest.param(["controller", "--health-port", "https://u:pw-SENTINEL@h/x"], id="a-url"),
])
def test_a_usage_error_does_not_echo_a_secret(capsys, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                              argv: list[str]) -> None:
    """click's own errors (a value not among the choices, an extra argument) quote what was
    given: a token pasted into the wrong option, or an unquoted variable that split into an
    extra argument, was echoed whole into a CI log, where gitscale's own errors mask it. They
    pass through ``redact`` as those do."""
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_SENTINELusage0123456789")
    code, out, err = run(capsys, *argv)
    assert code == 1 and "Error: " in err and "***" in err, err
    assert "SENTINEL" not in out + err
    assert f"Try 'gitscale {argv[0]} --help' for help." in err  # click's usage, kept


def test_a_log_line_masks_a_secret_whatever_brought_it(  # type: ignore[no-untyped-def]
        repo: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """``run``'s and ``serve``'s log lines were masked only where each was formed: a delivery
    id (sent by whoever posts to `serve`) equal to the webhook secret (a script that sends it
    there by mistake) was logged as it came. Every log line passes through ``redact``."""
    from tests.commands.test_serve import SECRET, Server, job

    server = Server(repo, window="1s")
    try:
        status, _ = server.post(job(1, "queued", ["self-hosted", "linux"]), signature=None,
                                delivery=SECRET)
        assert status == 401
    finally:
        server.close()
    err = capfd.readouterr().err
    assert "rejected webhook delivery ***: 401 missing X-Hub-Signature-256" in err, err
    assert SECRET not in err
