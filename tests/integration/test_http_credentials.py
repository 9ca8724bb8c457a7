"""Credentials: a token reaches git only through GIT_ASKPASS, never argv, URLs, logs or commits.

The remote is ``git http-backend`` behind HTTP Basic auth (tests/integration/git_http.py): every
request without the right ``x-access-token:<token>`` gets a 401.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.integration import seed
from tests.integration.conftest import CliResult, make_bare, rev, run_cli
from tests.integration.git_http import GitHTTPServer
from tests.integration.seed import NOW


class ArgvWatch:
    """Snapshots every process's argv while the server handles a request (the client is alive)."""

    def __init__(self, secret: str, server_url: str) -> None:
        self.secret = secret.encode()
        self.server_url = server_url.encode()
        self.scans = 0
        self.saw_client = False
        self.leaks: list[str] = []

    def __call__(self) -> None:
        self.scans += 1
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    argv = handle.read()
            except OSError:
                continue
            if self.server_url in argv:
                self.saw_client = True
            if self.secret in argv:
                self.leaks.append(argv.replace(b"\0", b" ").decode(errors="replace"))


def _assert_no_secret(secret: str, *texts: str) -> None:
    for text in texts:
        assert secret not in text, f"the token leaked into:\n{text}"


def _remote(server: GitHTTPServer) -> Path:
    return make_bare(server.project_root, "config.git", seed.FILES)


def _reconcile(server: GitHTTPServer, tmp_path: Path, demand: tuple[int, int],
               env: dict[str, str], url: str | None = None) -> CliResult:
    path = tmp_path / f"demand-{demand[0]}-{demand[1]}.yaml"
    path.write_text(seed.demand_text(demand))
    return run_cli("reconcile", "--repo", url or server.url(), "--demand", str(path),
                   "--now", NOW, cwd=tmp_path, env=env)


def test_token_from_the_environment_pushes_over_authenticated_http(
        http_git_server: GitHTTPServer, tmp_path: Path) -> None:
    server, token = http_git_server, http_git_server.token
    bare = _remote(server)
    original = rev(bare)
    watch = ArgvWatch(token, f"127.0.0.1:{server.port}")
    server.on_request = watch

    result = _reconcile(server, tmp_path, (4, 0), {"GITSCALE_GIT_TOKEN": token})
    assert result.code == 0, result
    assert "pushed" in result.out
    assert seed.commits(bare)[1:] == [original]
    assert seed.runner_set(seed.show(bare, "HEAD", seed.RUNNERS), "linux-x64")["spec"][
        "replicas"] == 4

    # Auth was required and used: an anonymous 401 first, then authenticated fetch and push.
    assert any(" 401 anonymous" in line for line in server.log), server.log
    assert any(line.startswith("GET /config.git/info/refs?service=git-upload-pack ")
               and " 200 user=x-access-token" in line for line in server.log), server.log
    assert any(line.startswith("POST /config.git/git-receive-pack ")
               and " 200 " in line for line in server.log), server.log
    # The URLs the server saw carry no credentials.
    assert all("@" not in line.split(" ")[1] for line in server.log), server.log

    # The token was in no process's argv while git talked to the server.
    assert watch.scans > 0 and watch.saw_client, "the argv scan never saw the git client"
    assert watch.leaks == []

    commit = seed.git(bare, "cat-file", "-p", "HEAD")
    config = (bare / "config").read_text()
    _assert_no_secret(token, result.out, result.err, commit, config, "\n".join(server.log))

    # A token file works the same way, and history reads over the same auth.
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    by_file = _reconcile(server, tmp_path, (6, 1), {"GITSCALE_GIT_TOKEN_FILE": str(token_file)})
    assert by_file.code == 0, by_file
    assert len(seed.commits(bare)) == 3
    history = run_cli("history", "--repo", server.url(), "--output", "json", cwd=tmp_path,
                      env={"GITSCALE_GIT_TOKEN_FILE": str(token_file)})
    assert history.code == 0, history
    assert '"replicas": 7' in history.out
    _assert_no_secret(token, by_file.out, by_file.err, history.out, history.err,
                      seed.git(bare, "log", "--format=%B", "refs/heads/main"))
    assert watch.leaks == []


@pytest.mark.parametrize("env", [{"GITSCALE_GIT_TOKEN": "wrong-token-0123456789"}, {}],
                         ids=["wrong-token", "no-token"])
def test_a_wrong_or_missing_token_fails_clearly(http_git_server: GitHTTPServer, tmp_path: Path,
                                                env: dict[str, str]) -> None:
    server = http_git_server
    bare = _remote(server)
    original = rev(bare)

    result = _reconcile(server, tmp_path, (4, 0), env)
    assert result.code == 1, result
    assert result.err.startswith("error: "), result
    assert "Authentication failed" in result.err or "could not read Username" in result.err, \
        result
    assert f"127.0.0.1:{server.port}/config.git" in result.err, result
    hint = ("refused the token from GITSCALE_GIT_TOKEN (a variable" if env else
            "wants credentials: set GITSCALE_GIT_TOKEN")
    assert hint in result.err, result
    assert "Traceback" not in result.out + result.err
    _assert_no_secret(server.token, result.out, result.err)
    for secret in env.values():
        _assert_no_secret(secret, result.out, result.err)
    assert all(" 200 " not in line for line in server.log), server.log
    assert seed.commits(bare) == [original]


def test_a_refused_token_file_is_named_with_its_path(http_git_server: GitHTTPServer,
                                                     tmp_path: Path) -> None:
    token_file = tmp_path / "git-token"
    token_file.write_text("wrong-token-0123456789\n")
    result = _reconcile(http_git_server, tmp_path, (4, 0),
                        {"GITSCALE_GIT_TOKEN_FILE": str(token_file)})
    assert result.code == 1, result
    assert (f"hint: the server refused the token from GITSCALE_GIT_TOKEN_FILE={token_file} "
            "(read again for each git command): wrong, expired, or without Contents: Read and "
            "write on this repo") in result.err, result
    _assert_no_secret("wrong-token-0123456789", result.out, result.err)


@pytest.mark.parametrize("command", ["reconcile", "history", "plan"])
def test_a_url_with_credentials_is_refused_before_any_request(
        http_git_server: GitHTTPServer, tmp_path: Path, command: str) -> None:
    server, token = http_git_server, http_git_server.token
    bare = _remote(server)
    original = rev(bare)
    url = f"http://x-access-token:{token}@127.0.0.1:{server.port}/config.git"
    demand = tmp_path / "demand.yaml"
    demand.write_text(seed.demand_text((4, 0)))
    args = ["--repo", url] + (["--demand", str(demand)] if command != "history" else [])

    result = run_cli(command, *args, cwd=tmp_path)
    assert result.code == 1, result
    assert "credentials" in result.err and "GITSCALE_GIT_TOKEN" in result.err, result
    assert "Traceback" not in result.out + result.err
    _assert_no_secret(token, result.out, result.err)
    assert server.log == [], "nothing may be sent to a URL that carries credentials"
    assert seed.commits(bare) == [original]


def test_nothing_is_left_in_the_temporary_directory(http_git_server: GitHTTPServer,
                                                    tmp_path: Path) -> None:
    """Neither the scratch clone nor the askpass helper outlives the process (a loop running
    every minute must not fill /tmp)."""
    server = http_git_server
    bare = _remote(server)
    scratch = tmp_path / "tmpdir"
    scratch.mkdir()
    env = {"GITSCALE_GIT_TOKEN": server.token, "TMPDIR": str(scratch)}
    ok = _reconcile(server, tmp_path, (4, 0), env)
    assert ok.code == 0, ok
    failed = _reconcile(server, tmp_path, (5, 0), {**env, "GITSCALE_GIT_TOKEN": "wrong-0123456"})
    assert failed.code == 1, failed
    assert len(seed.commits(bare)) == 2
    assert sorted(p.name for p in scratch.iterdir()) == []


@pytest.mark.parametrize("command", ["reconcile", "history"])
@pytest.mark.parametrize(("make", "problem"), [
    pytest.param(lambda path: None, "no such file", id="missing"),
    pytest.param(lambda path: path.write_text("\n"), "is empty", id="empty"),
    pytest.param(lambda path: path.mkdir(), "is a directory, not a file", id="directory"),
    # a FIFO nobody writes to hung `cat` (and the check) for good
    pytest.param(lambda path: os.mkfifo(path), "is not a regular file (a FIFO); gitscale reads "
                 "only regular files", id="fifo"),
])
def test_a_token_file_that_is_not_there_is_named_before_any_request(
        http_git_server: GitHTTPServer, tmp_path: Path, command: str, make: Any,
        problem: str) -> None:
    """A token file that is not there, empty, a folder or a FIFO: said as such, not as git's
    "Authentication failed" with a hint that the server refused the token."""
    server = http_git_server
    bare = _remote(server)
    original = rev(bare)
    token_file = tmp_path / "secret" / "token"
    token_file.parent.mkdir()
    make(token_file)
    env = {"GITSCALE_GIT_TOKEN_FILE": str(token_file)}
    if command == "reconcile":
        result = _reconcile(server, tmp_path, (4, 0), env)
    else:
        result = run_cli("history", "--repo", server.url(), cwd=tmp_path, env=env)
    assert result.code == 1, result
    assert result.err == f"error: GITSCALE_GIT_TOKEN_FILE={token_file}: {problem}\n", result
    assert "Traceback" not in result.out + result.err and "refused" not in result.err
    assert server.log == [], "nothing is asked of the server without a token to give it"
    assert seed.commits(bare) == [original]


@pytest.mark.parametrize("command", ["reconcile", "history"])
def test_a_token_file_missing_from_the_scalers_secret_names_the_secret(
        http_git_server: GitHTTPServer, tmp_path: Path, command: str) -> None:
    """Where `init --run-in cluster` mounts the Secret gitscale-git, a missing file is its key
    `token` missing (``files.mounted_secret_hint``, as for every credential file); a file
    anywhere else is not blamed on that Secret (above)."""
    server = http_git_server
    bare = _remote(server)
    original = rev(bare)
    token_file = "/var/run/secrets/gitscale/git/token"
    assert not Path(token_file).exists()
    env = {"GITSCALE_GIT_TOKEN_FILE": token_file}
    if command == "reconcile":
        result = _reconcile(server, tmp_path, (4, 0), env)
    else:
        result = run_cli("history", "--repo", server.url(), cwd=tmp_path, env=env)
    assert result.code == 1, result
    assert result.err == (f"error: GITSCALE_GIT_TOKEN_FILE={token_file}: no such file (the key "
                          '"token" of Secret gitscale-git?)\n'), result
    assert server.log == []
    assert seed.commits(bare) == [original]


@pytest.mark.parametrize(("via", "broken"), [
    pytest.param("env", lambda token: token[:12] + "\n" + token[12:], id="env-newline"),
    pytest.param("file", lambda token: token[:12] + "\n" + token[12:] + "\n", id="file-newline"),
    pytest.param("env", lambda token: token[:12] + " " + token[12:], id="env-space"),
    pytest.param("file", lambda token: "\n" + token + "\n", id="file-leading-newline"),
])
def test_a_token_broken_by_a_paste_is_refused_before_any_request(
        http_git_server: GitHTTPServer, tmp_path: Path, via: str, broken: Any) -> None:
    """git sends the token up to its first line break: one with a newline inside was sent cut,
    and the error blamed the server ("the server refused the token…"). Refused before git
    talks to the server, as a GitHub or Buildkite token is; the token is never shown."""
    server = http_git_server
    bare = _remote(server)
    original = rev(bare)
    value = broken(server.token)
    if via == "env":
        env, label = {"GITSCALE_GIT_TOKEN": value}, "GITSCALE_GIT_TOKEN"
    else:
        token_file = tmp_path / "token"
        token_file.write_text(value)
        env, label = {"GITSCALE_GIT_TOKEN_FILE": str(token_file)}, \
            f"GITSCALE_GIT_TOKEN_FILE={token_file}"
    problem = "contains whitespace" if " " in value else "contains a newline"
    for result in (_reconcile(server, tmp_path, (4, 0), env),
                   run_cli("history", "--repo", server.url(), cwd=tmp_path, env=env)):
        assert result.code == 1, result
        assert result.err == (f"error: {label}: the token {problem} (a token is one line of "
                              "visible ASCII; git would send it cut or broken, and the server "
                              "refuse it)\n"), result
        _assert_no_secret(server.token[:12], result.out, result.err)
        _assert_no_secret(server.token[12:], result.out, result.err)
    assert server.log == [], "nothing is sent with a broken token"
    assert seed.commits(bare) == [original]


def test_a_token_file_ending_in_a_windows_line_break_is_taken(
        http_git_server: GitHTTPServer, tmp_path: Path) -> None:
    """git reads the token up to the first CR or LF: a file saved with CRLF works as it is."""
    server = http_git_server
    bare = _remote(server)
    token_file = tmp_path / "token"
    token_file.write_bytes(server.token.encode() + b"\r\n")
    result = _reconcile(server, tmp_path, (4, 0), {"GITSCALE_GIT_TOKEN_FILE": str(token_file)})
    assert result.code == 0, result
    assert len(seed.commits(bare)) == 2


def test_the_git_token_and_its_file_both_set_are_refused_before_any_request(
        http_git_server: GitHTTPServer, tmp_path: Path) -> None:
    """The ``_FILE`` rule of every credential variable: the file no longer wins silently over
    a variable set beside it (which of the two is current cannot be guessed)."""
    server = http_git_server
    bare = _remote(server)
    original = rev(bare)
    token_file = tmp_path / "token"
    token_file.write_text(server.token)
    env = {"GITSCALE_GIT_TOKEN_FILE": str(token_file), "GITSCALE_GIT_TOKEN": "stale-0123456789"}
    result = _reconcile(server, tmp_path, (4, 0), env)
    assert result.code == 1, result
    assert result.err == ("error: GITSCALE_GIT_TOKEN_FILE: GITSCALE_GIT_TOKEN is set too: set "
                          "one of the two (GITSCALE_GIT_TOKEN_FILE names a file holding "
                          "GITSCALE_GIT_TOKEN's value)\n"), result
    _assert_no_secret(server.token, result.out, result.err)
    _assert_no_secret("stale-0123456789", result.out, result.err)
    assert server.log == [] and seed.commits(bare) == [original]
    # an empty variable beside the file counts as unset: the file's token pushes
    result = _reconcile(server, tmp_path, (4, 0), {**env, "GITSCALE_GIT_TOKEN": ""})
    assert result.code == 0, result
    assert len(seed.commits(bare)) == 2
