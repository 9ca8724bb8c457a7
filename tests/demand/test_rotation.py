"""Rotated credentials reach the sources' clients that a loop keeps between passes: a token
file rewritten (or swapped as a Kubernetes Secret volume swaps it) is read again at the next
pass, and a token refused (401) is read again at once; fake GitHub and Buildkite APIs on
loopback, one ``Sources`` across passes as `gitscale run` keeps it."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest

from gitscale.config.rotating import Rotating
from gitscale.config.secrets import SecretError
from gitscale.demand.resolve import Sources, read_demand
from gitscale.files import default_cache_dir

from tests.demand.conftest import BK_TOKEN, NEW, OLD
from tests.demand.fake_buildkite import FakeBuildkite, Job
from tests.demand.fake_github import FakeGitHub
from tests.demand.test_buildkite import SOME_JOBS, config_for
from tests.demand.test_github import pair, write_config



def rewrite_unseen(path: Path, text: str) -> None:
    """``text`` in ``path`` in place, its size and times as before: a change the stat cannot
    see (only a refusal makes the file be read again)."""
    before = path.stat()
    assert len(text.encode()) == before.st_size
    with open(path, "r+") as f:
        f.write(text)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def secret_volume(root: Path, key: str, value: str, version: int) -> Path:
    """A Kubernetes Secret volume's layout: ``key`` → ``..data/key``, ``..data`` → a
    timestamped directory; a new version swaps the ``..data`` symlink (atomically)."""
    root.mkdir(exist_ok=True)
    stamp = root / f"..2026_11_21_09_0{version}"
    stamp.mkdir()
    (stamp / key).write_text(value)
    (root / "..data_tmp").symlink_to(stamp.name)
    os.replace(root / "..data_tmp", root / "..data")
    if not (root / key).is_symlink():
        (root / key).symlink_to(f"..data/{key}")
    return root / key


def github_config(root: Path, gh: FakeGitHub, token_file: Path):  # type: ignore[no-untyped-def]
    return write_config(root, [{"name": "linux", "source": {"github": {
        "org": "acme", "labels": ["self-hosted", "linux"], "apiUrl": gh.url,
        "token": {"file": str(token_file)}}}}])


def statuses(gh: FakeGitHub) -> list[int]:
    with gh.lock:
        return [r.status for r in gh.log]


def seen_at_the_next_pass(gh: FakeGitHub, root: Path, config,  # type: ignore[no-untyped-def]
                          rotate: Callable[[], Path],
                          capsys: pytest.CaptureFixture[str]) -> None:
    """One pass with OLD, then GitHub takes NEW only and ``rotate`` puts NEW where the token
    is read from (returning that path): the next pass of the same ``Sources`` uses NEW without
    a single 401 (the file's stat said so), says so once, and neither token is ever shown."""
    said: list[str] = []
    sources = Sources(default_cache_dir(), timeout=5, report=said.append)
    assert pair(read_demand(root, config, None, sources), "linux") == (1, 0)
    gh.tokens = {NEW}
    path = rotate()
    gh.log.clear()
    reading = read_demand(root, config, None, sources)
    assert reading.errors == {} and pair(reading, "linux") == (1, 0)
    assert statuses(gh) and 401 not in statuses(gh)  # the stat said so: not even one 401
    assert {r.authorization for r in gh.log} == {f"Bearer {NEW}"}
    assert said == [f"github token: {path} changed: the new value is used from now on"]
    sources.close()
    out = capsys.readouterr()
    assert OLD not in out.out + out.err and NEW not in out.out + out.err


def test_a_rewritten_token_file_is_used_at_the_next_pass(
        gh: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    token = tmp_path / "secrets" / "github-token"
    token.parent.mkdir()
    token.write_text(OLD + "\n")

    def rotate() -> Path:  # a new file put in its place
        (tmp_path / "secrets" / "next").write_text(NEW + "\n")
        os.replace(tmp_path / "secrets" / "next", token)
        return token

    seen_at_the_next_pass(gh, tmp_path / "repo", github_config(tmp_path / "repo", gh, token),
                          rotate, capsys)


def found_by_the_refusal(gh: FakeGitHub, root: Path, config,  # type: ignore[no-untyped-def]
                         token: Path) -> None:
    """A pass with OLD from ``token``, then GitHub takes NEW only and ``token`` is rewritten in
    place, unseen by its stat: the next pass's first request is refused, the file read again
    and the request sent with NEW — one 401, no error."""
    sources = Sources(default_cache_dir(), timeout=5)
    assert read_demand(root, config, None, sources).errors == {}
    gh.tokens = {NEW}
    rewrite_unseen(token, NEW)
    gh.log.clear()
    reading = read_demand(root, config, None, sources)
    assert reading.errors == {} and pair(reading, "linux") == (1, 0)
    assert statuses(gh)[0] == 401 and statuses(gh).count(401) == 1
    assert set(statuses(gh)[1:]) == {304}  # (the ETags of the first pass: still good)
    sources.close()


def test_a_refused_token_is_read_again_at_once(gh: FakeGitHub, tmp_path: Path) -> None:
    token = tmp_path / "github-token"
    token.write_text(OLD)
    found_by_the_refusal(gh, tmp_path / "repo", github_config(tmp_path / "repo", gh, token),
                         token)


def test_a_token_refused_and_not_rotated_is_an_error_without_it(
        gh: FakeGitHub, tmp_path: Path) -> None:
    token = tmp_path / "github-token"
    token.write_text(OLD)
    config = github_config(tmp_path / "repo", gh, token)
    sources = Sources(default_cache_dir(), timeout=5)
    gh.tokens = {NEW}  # revoked, the file not yet rewritten: refused, sent once only
    reading = read_demand(tmp_path / "repo", config, None, sources)
    assert "401" in reading.errors["linux"] and OLD not in reading.errors["linux"]
    assert statuses(gh) == [401]
    sources.close()


def test_a_secret_volume_swap_is_seen(gh: FakeGitHub, tmp_path: Path) -> None:
    token = secret_volume(tmp_path / "vol", "token", OLD, 1)
    config = github_config(tmp_path / "repo", gh, token)
    sources = Sources(default_cache_dir(), timeout=5)
    assert read_demand(tmp_path / "repo", config, None, sources).errors == {}
    gh.tokens = {NEW}
    secret_volume(tmp_path / "vol", "token", NEW, 2)  # the same size, another directory
    gh.log.clear()
    assert read_demand(tmp_path / "repo", config, None, sources).errors == {}
    assert statuses(gh) and 401 not in statuses(gh)
    sources.close()


def test_buildkite_agent_and_job_ids_tokens_rotate(buildkite: FakeBuildkite, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    agent, api = tmp_path / "agent-token", tmp_path / "api-token"
    agent.write_text(BK_TOKEN)
    api.write_text("bkua_OldApiAccessToken0123456789")
    buildkite.api_token = "bkua_OldApiAccessToken0123456789"
    buildkite.queues["deploy"] = SOME_JOBS
    buildkite.jobs["deploy"] = [Job("s1", "SCHEDULED"), Job("s2", "SCHEDULED"),
                                Job("s3", "SCHEDULED"), Job("r1", "RUNNING")]
    config = config_for(tmp_path / "repo", {"deploy": {
        "queue": "deploy", "apiUrl": buildkite.url, "token": {"file": str(agent)},
        "jobIds": {"token": {"file": str(api)}, "graphqlUrl": buildkite.graphql_url}}})
    sources = Sources(default_cache_dir(), timeout=5)
    first = read_demand(tmp_path / "repo", config, None, sources)
    assert first.errors == {} and first.demands["deploy"].jobs == {"s1", "s2", "s3", "r1"}
    # both rotated; the agent token's file in a way its stat does not show (after a 401)
    buildkite.token, buildkite.api_token = "bkua_NewAgentToken0123456789abc", \
        "bkua_NewApiAccessToken0123456789"
    rewrite_unseen(agent, buildkite.token)
    api.write_text(buildkite.api_token + "\n")
    second = read_demand(tmp_path / "repo", config, None, sources)
    assert second.errors == {} and second.demands["deploy"].jobs == {"s1", "s2", "s3", "r1"}
    sources.close()
    out = capsys.readouterr()
    assert "job ids not used" not in out.err  # the GraphQL API was not refused either
    for secret in (BK_TOKEN, buildkite.token, buildkite.api_token):
        assert secret not in out.out + out.err


def test_an_app_token_refused_is_exchanged_again(app_github: FakeGitHub, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from gitscale.clients import github_app

    monkeypatch.setattr(github_app, "REFUSED_AGE", 0.0)  # (else: not within 30 s of minting)
    repo = app_github.add_repo("acme", "app")
    app_github.add_run(repo, "queued", [("queued", ["self-hosted", "linux"])])
    config = write_config(tmp_path / "repo", [{"name": "linux", "source": {"github": {
        "org": "acme", "labels": ["self-hosted", "linux"], "apiUrl": app_github.url,
        "app": {"appId": "4242", "installationId": "77",
                "privateKey": {"file": str(app_github.key_path)}}}}}])  # type: ignore[attr-defined]
    sources = Sources(default_cache_dir(), timeout=5)
    assert read_demand(tmp_path / "repo", config, None, sources).errors == {}
    assert len(app_github.issued) == 1
    app_github.tokens.clear()  # the installation token revoked
    assert read_demand(tmp_path / "repo", config, None, sources).errors == {}
    assert len(app_github.issued) == 2
    sources.close()


# -- the credential itself ------------------------------------------------------------------------
def test_a_variable_is_read_once_and_never_rotates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROT_TOKEN", OLD)
    token = Rotating({"env": "ROT_TOKEN"}, "github token")
    assert token.get() == OLD and not token.rotates
    monkeypatch.setenv("ROT_TOKEN", NEW)  # (a running process's environment does not change)
    assert token.refresh() is False and token.get() == OLD


def test_the_same_value_rewritten_is_no_change_and_a_file_gone_is_said(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(OLD)
    said: list[str] = []
    clock = iter(range(100)).__next__
    token = Rotating({"file": str(path)}, "github token", report=said.append,
                     clock=lambda: float(clock()))
    assert token.get() == OLD
    path.write_text(OLD + "\n\n")  # another size, the same token
    assert token.get() == OLD and said == [] and token.previous is None
    path.write_text(NEW)
    assert token.get() == NEW and token.previous == OLD and token.changed_at is not None
    assert len(said) == 1 and OLD not in said[0] and NEW not in said[0]
    path.unlink()
    with pytest.raises(SecretError, match="no such file|cannot read") as caught:
        token.get()
    assert NEW not in str(caught.value) and token.last == NEW
