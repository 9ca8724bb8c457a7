"""The ``_FILE`` convention for the credentials gitscale.yaml names ``{env: NAME}``: with only
``NAME_FILE`` set the value is that file's, and it rotates as a ``{file: PATH}`` one does (a
kept ``Sources``, as `gitscale run` keeps it, against a fake GitHub on loopback); both set, or
a ``NAME_FILE`` that cannot be read, is an error naming the variable and the path, never the
value — and `gitscale reconcile` exits 1 without writing."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from gitscale.config.rotating import Rotating
from gitscale.config.secrets import SecretError, read_secret, read_token
from gitscale.redact import forget_held, redact

from tests.demand.fake_github import FakeGitHub
from tests.demand.test_github import write_config
from tests.demand.conftest import NEW, OLD
from tests.demand.test_rotation import found_by_the_refusal, secret_volume, seen_at_the_next_pass
from tests.helpers import RUNNERSET, git, make_repo, run


def env_config(root: Path, gh: FakeGitHub):  # type: ignore[no-untyped-def]
    """A set whose token is ``{env: GITHUB_TOKEN}``, as `gitscale init` writes it."""
    return write_config(root, [{"name": "linux", "source": {"github": {
        "org": "acme", "labels": ["self-hosted", "linux"], "apiUrl": gh.url,
        "token": {"env": "GITHUB_TOKEN"}}}}])


@pytest.fixture
def only_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """``GITHUB_TOKEN_FILE`` pointing at a Secret volume's key (``..data`` swapped on update),
    ``GITHUB_TOKEN`` not set: the in-cluster scaler's pods."""
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    path = secret_volume(tmp_path / "scaler", "github_token", OLD + "\n", 1)
    monkeypatch.setenv("GITHUB_TOKEN_FILE", str(path))
    return path


def test_only_the_file_variable_set_is_read_and_a_volume_swap_is_used_at_the_next_pass(
        gh: FakeGitHub, tmp_path: Path, only_file: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    def rotate() -> Path:  # the Secret updated: the volume's ..data symlink swapped
        secret_volume(tmp_path / "scaler", "github_token", NEW + "\n", 2)
        return only_file

    seen_at_the_next_pass(gh, tmp_path / "repo", env_config(tmp_path / "repo", gh), rotate,
                          capsys)


def test_a_rewrite_the_stat_misses_is_found_by_the_401_and_sent_again(
        gh: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    token = tmp_path / "github-token"
    token.write_text(OLD)
    monkeypatch.setenv("GITHUB_TOKEN_FILE", str(token))
    found_by_the_refusal(gh, tmp_path / "repo", env_config(tmp_path / "repo", gh), token)


def test_the_variable_itself_still_never_rotates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROT_TOKEN_FILE", raising=False)
    monkeypatch.setenv("ROT_TOKEN", OLD)
    assert not Rotating({"env": "ROT_TOKEN"}, "github token").rotates


def test_an_empty_variable_beside_its_file_counts_as_unset(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Docker's images count it so, and a CI secret that does not exist expands to ""."""
    (tmp_path / "token").write_text(OLD)
    monkeypatch.setenv("GITHUB_TOKEN", "")
    monkeypatch.setenv("GITHUB_TOKEN_FILE", str(tmp_path / "token"))
    assert read_token({"env": "GITHUB_TOKEN"}, "github token") == OLD
    token = Rotating({"env": "GITHUB_TOKEN"}, "github token")
    assert token.rotates and token.get() == OLD


def test_a_value_read_through_the_file_variable_is_masked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Held when read; and the documented variables' _FILE content is masked before any read
    (a server hook may echo a token this process never used)."""
    forget_held()
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.delenv("MY_TOKEN", raising=False)
    (tmp_path / "documented").write_text(OLD + "\n")
    (tmp_path / "mine").write_text(NEW + "\n")
    monkeypatch.setenv("GITHUB_TOKEN_FILE", str(tmp_path / "documented"))
    monkeypatch.setenv("MY_TOKEN_FILE", str(tmp_path / "mine"))
    assert redact(f"remote: {OLD}") == "remote: ***"
    assert redact(f"remote: {NEW}") == f"remote: {NEW}"  # not documented, not read yet
    assert read_secret({"env": "MY_TOKEN"}, "github token") == NEW
    assert redact(f"remote: {NEW}") == "remote: ***"
    forget_held()


def test_a_missing_key_of_a_mounted_secret_names_the_secret(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-cluster scaler's volumes are optional: before its Secret (or the key) exists
    the file is missing, and the error says which Secret and key (init's layout)."""
    path = "/var/run/secrets/gitscale/notify/FLUX_RECEIVER_TOKEN"
    assert not Path(path).exists()
    monkeypatch.setenv("FLUX_RECEIVER_TOKEN_FILE", path)
    with pytest.raises(SecretError) as error:
        read_secret({"env": "FLUX_RECEIVER_TOKEN"}, "notify token")
    assert str(error.value).endswith(f'cannot read FLUX_RECEIVER_TOKEN_FILE={path}: No such '
                                     'file or directory (the key "FLUX_RECEIVER_TOKEN" of '
                                     'Secret gitscale-notify?)')


# -- errors: named, never shown ---------------------------------------------------------------
def _empty(path: Path) -> None:
    path.write_text("\n")


def _unreadable(path: Path) -> None:
    path.write_text(OLD)
    path.chmod(0)


@pytest.mark.parametrize(("make", "problem"), [
    pytest.param(None, "cannot read GITHUB_TOKEN_FILE={path}: No such file or directory", id="missing"),
    pytest.param(_empty, "GITHUB_TOKEN_FILE={path} is empty", id="empty"),
    pytest.param(_unreadable, "cannot read GITHUB_TOKEN_FILE={path}: PermissionError",
                 id="unreadable"),
    pytest.param(lambda p: os.mkfifo(p), "GITHUB_TOKEN_FILE={path}: is not a regular file (a "
                 "FIFO)", id="fifo"),
    pytest.param(lambda p: p.mkdir(), "cannot read GITHUB_TOKEN_FILE={path}: Is a directory",
                 id="directory"),
    pytest.param("both", "GITHUB_TOKEN_FILE: GITHUB_TOKEN is set too: set one of the two "
                 "(GITHUB_TOKEN_FILE names a file holding GITHUB_TOKEN's value)", id="both-set"),
])
def test_reconcile_names_the_variable_and_the_path_exits_1_and_writes_nothing(
        gh: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], make: object, problem: str) -> None:
    if os.geteuid() == 0 and make is _unreadable:
        pytest.skip("root reads a file of mode 0")
    path = tmp_path / "secrets" / "github_token"
    path.parent.mkdir()
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    if make == "both":
        path.write_text(OLD)
        monkeypatch.setenv("GITHUB_TOKEN", NEW)
    elif callable(make):
        make(path)
    monkeypatch.setenv("GITHUB_TOKEN_FILE", str(path))
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": ("runnerSets:\n  - name: linux\n    manifest: sets/linux.yaml\n"
                          "    source: {github: {org: acme, labels: [self-hosted, linux], "
                          f"apiUrl: '{gh.url}', token: {{env: GITHUB_TOKEN}}}}}}\n"
                          "    policy: {minReplicas: 0, maxReplicas: 10}\n"),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=1)})
    before = git(tmp_path / "remote.git", "rev-parse", "main")
    try:
        code, out, err = run(capsys, "reconcile", "--repo", str(checkout))
    finally:
        if make is _unreadable:
            path.chmod(0o600)
    assert code == 1, err
    assert problem.format(path=path) in err and "gitscale.yaml:4" in err, err
    assert "Traceback" not in err and OLD not in out + err and NEW not in out + err
    assert gh.log == []  # no request without a credential to send
    assert git(tmp_path / "remote.git", "rev-parse", "main") == before


def test_both_set_refuses_a_rotating_credential_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text(OLD)
    monkeypatch.setenv("GITHUB_TOKEN", NEW)
    monkeypatch.setenv("GITHUB_TOKEN_FILE", str(tmp_path / "token"))
    with pytest.raises(SecretError, match="GITHUB_TOKEN is set too") as caught:
        Rotating({"env": "GITHUB_TOKEN"}, "github token").get()
    assert OLD not in str(caught.value) and NEW not in str(caught.value)
