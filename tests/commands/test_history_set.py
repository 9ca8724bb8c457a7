"""`gitscale history --set NAME` alike in a checkout and over a URL: a name nobody knows is an
error naming the known names, and the config it is checked against is read by gitscale's own
loader (a broken one is an error at its line)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.helpers import git, run
from tests.one_set import reconcile, setup


def _scaled(tmp_path: Path, capsys) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    """The one-set repo after one scaling commit (linux 1→3), its remote serving filters."""
    checkout, remote = setup(tmp_path)
    reconcile(capsys, checkout, tmp_path, 2, 0, "2026-11-21T09:00:00Z")
    subprocess.run(["git", "config", "uploadpack.allowFilter", "true"], cwd=remote, check=True)
    return checkout, remote


def _push_config(checkout: Path, text: str, subject: str) -> None:
    (checkout / "gitscale.yaml").write_text(text)
    git(checkout, "commit", "-qam", subject)
    git(checkout, "push", "-q")


def _where(checkout: Path, remote: Path) -> list[str]:
    return [str(checkout), remote.resolve().as_uri()]


def test_a_typo_is_an_error_in_a_checkout_after_a_config_edit_too(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """A hand edit of gitscale.yaml (a row of set `*`) was listed under any `--set` in a
    checkout, so `--set linx` showed it, exit 0, and never said the name was a typo; over a URL
    the same command was an error. A config edit is a row of no set: `--set` shows the set's
    own rows (the README's "narrow it"), the edit is shown without `--set`."""
    checkout, remote = _scaled(tmp_path, capsys)
    config = (checkout / "gitscale.yaml").read_text()
    _push_config(checkout, config.replace("maxReplicas: 3", "maxReplicas: 4"), "max 4")
    said = ("error: --set: no scaling commit names set 'linx', and gitscale.yaml has no such "
            "set: did you mean 'linux'? (sets in the scaling commits: linux; in gitscale.yaml: "
            "linux)\n")
    for where in _where(checkout, remote):
        # (the error alone: no empty table, no `[]`, before it)
        code, out, err = run(capsys, "history", "--repo", where, "--set", "linx")
        assert (code, out, err) == (1, "", said), where
        code, out, err = run(capsys, "history", "--repo", where, "--set", "linx",
                             "--output", "json")
        assert (code, out, err) == (1, "", said), where

    code, out, err = run(capsys, "history", "--repo", str(checkout), "--set", "linux",
                         "--output", "json")
    assert code == 0 and [(r["set"], r["reason"]) for r in json.loads(out)] == [
        ("linux", "first-write")], (out, err)
    code, out, err = run(capsys, "history", "--repo", str(checkout), "--output", "json")
    assert code == 0 and [(r["set"], r["reason"]) for r in json.loads(out)] == [
        (None, "manual"), ("linux", "first-write")], (out, err)


def test_the_known_names_are_said_closest_first(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A previous name counts as known, and the names are listed with the nearest first."""
    checkout, remote = _scaled(tmp_path, capsys)
    config = (checkout / "gitscale.yaml").read_text()
    _push_config(checkout, config.replace("name: linux", "name: arm64\n"
                                          "    previousNames: [linux]")
                 + config.replace("runnerSets:\n", "").replace("linux", "linux-x64"),
                 "rename linux, add linux-x64")
    (checkout / "sets/linux-x64.yaml").write_text((checkout / "sets/linux.yaml").read_text())
    git(checkout, "add", "sets")
    git(checkout, "commit", "-qm", "linux-x64's manifest")
    git(checkout, "push", "-q")
    said = ("error: --set: no scaling commit names set 'linux-x46', and gitscale.yaml has no "
            "such set: did you mean 'linux-x64'? (sets in the scaling commits: linux; in "
            "gitscale.yaml: linux-x64, arm64 (previously linux))\n")
    for where in _where(checkout, remote):
        code, out, err = run(capsys, "history", "--repo", where, "--set", "linux-x46")
        assert (code, out, err) == (1, "", said), where
        code, out, err = run(capsys, "history", "--repo", where, "--set", "linux")
        assert code == 0 and out.count(" linux ") == 1, (where, out, err)


def test_a_typo_with_a_chart_is_the_same_error(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """With --chart the typo was `no scaling commits of set 'linx' to draw`: no known names."""
    pytest.importorskip("matplotlib")
    checkout, remote = _scaled(tmp_path, capsys)
    for where in _where(checkout, remote):
        code, _, err = run(capsys, "history", "--repo", where, "--set", "linx", "--chart",
                           str(tmp_path / "c.svg"))
        assert code == 1 and err.startswith(
            "error: --set: no scaling commit names set 'linx'"), (where, err)
    assert not (tmp_path / "c.svg").exists()


BROKEN = [  # (what is replaced in the config, by what, the error)
    pytest.param("manifest: sets/linux.yaml", "manifest: [sets/linux.yaml",
                 "gitscale.yaml:4: not valid YAML", id="yaml-syntax"),
    pytest.param("name: linux", "name: linux\n    previousNames: [linux]",
                 "gitscale.yaml:3: runner set 'linux': previousNames: 'linux' is the set's own "
                 "name", id="previous-own-name"),
    pytest.param("name: linux", "name: linux\n    previousNames: [7]",
                 "gitscale.yaml:3: runner set 'linux' previousNames.0: 7 is not of type "
                 "string", id="previous-not-a-name"),
    pytest.param("manifest: sets/linux.yaml", "manifest: ../linux.yaml",
                 "gitscale.yaml:3: '../linux.yaml' must be a path inside the config repo",
                 id="manifest-outside"),
    pytest.param("minReplicas: 1,", "minReplicas: 1.0,",
                 "gitscale.yaml:5: runner set 'linux' policy.minReplicas: 1.0 is not an integer",
                 id="policy"),
]


@pytest.mark.parametrize(("old", "new", "said"), BROKEN)
def test_a_broken_config_is_an_error_at_its_line_in_both_modes(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, old: str, new: str, said: str) -> None:
    """Over a URL the branch's gitscale.yaml was read with plain yaml.safe_load: a YAML error
    was ignored (a table as if all was well) and previousNames were taken unchecked; in a
    checkout a config that failed to load was ignored too. Both read it as a pass does:
    `gitscale.yaml:LINE: …`, exit 1, nothing on stdout."""
    checkout, remote = _scaled(tmp_path, capsys)
    config = (checkout / "gitscale.yaml").read_text()
    assert old in config
    _push_config(checkout, config.replace(old, new, 1), "broken")
    for where in _where(checkout, remote):
        code, out, err = run(capsys, "history", "--repo", where, "--set", "linux")
        assert (code, out) == (1, ""), (where, out, err)
        assert err.startswith(f"error: {said}") and err.count("\n") == 1, (where, err)
    # without --set the config is not needed: the scaling rows show (as before)
    code, out, err = run(capsys, "history", "--repo", remote.resolve().as_uri())
    assert code == 0 and out.count(" linux ") == 1, (out, err)


def test_a_missing_config_is_said_in_both_modes(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout, remote = _scaled(tmp_path, capsys)
    for where in _where(checkout, remote):
        code, out, err = run(capsys, "history", "--repo", where, "--set", "linux",
                             "--config", "other.yaml")
        assert (code, out, err) == (1, "", "error: other.yaml: not found in the config repo "
                                    "(run `gitscale init`?)\n"), where


def test_a_preset_of_the_config_repo_is_read_over_a_url(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A clone of commit messages has no policies/ folder on disk: the branch's preset is
    read from the commit, as a checkout reads it from its file."""
    checkout, remote = _scaled(tmp_path, capsys)
    (checkout / "policies").mkdir()
    (checkout / "policies/team.yaml").write_text("minReplicas: 1\nmaxReplicas: 3\n")
    config = (checkout / "gitscale.yaml").read_text()
    (checkout / "gitscale.yaml").write_text(config.replace(
        "policy: {minReplicas: 1, maxReplicas: 3, buffer: 1, scaleDownDelay: 0s}",
        "policy: team"))
    git(checkout, "add", "--all")
    git(checkout, "commit", "-qm", "a preset of our own")
    git(checkout, "push", "-q")
    for where in _where(checkout, remote):
        code, out, err = run(capsys, "history", "--repo", where, "--set", "linux")
        assert code == 0 and out.count(" linux ") == 1, (where, out, err)
    (checkout / "policies/team.yaml").write_text("minReplicas: 1\nmaxReplicas: three\n")
    git(checkout, "commit", "-qam", "a broken preset")
    git(checkout, "push", "-q")
    for where in _where(checkout, remote):
        code, out, err = run(capsys, "history", "--repo", where, "--set", "linux")
        assert (code, out) == (1, "") and err.startswith(
            "error: policies/team.yaml:2: "), (where, err)


def test_a_config_path_is_read_alike_in_both_modes(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Over a URL the branch's config was asked of git as `HEAD:<--config>`: `./gitscale.yaml`
    (which a checkout, and `plan` over a URL, read) was "not found", and a folder's listing
    was parsed as the config (`'tree HEAD:sets\\n…' is not of type object`), a symlink's
    target as its text."""
    checkout, remote = _scaled(tmp_path, capsys)
    (checkout / "link.yaml").symlink_to("gitscale.yaml")
    git(checkout, "add", "link.yaml")
    git(checkout, "commit", "-qm", "a link")
    git(checkout, "push", "-q")
    for where in _where(checkout, remote):
        code, out, err = run(capsys, "history", "--repo", where, "--set", "linux",
                             "--config", "./gitscale.yaml")
        assert code == 0 and out.count(" linux ") == 1, (where, out, err)
        code, out, err = run(capsys, "history", "--repo", where, "--set", "linux",
                             "--config", "sets")
        assert (code, out, err) == (1, "", "error: sets: is a directory, not a config file "
                                    "(--config names the file in the config repo, such as "
                                    "gitscale.yaml)\n"), where
        code, out, err = run(capsys, "history", "--repo", where, "--set", "linux",
                             "--config", "link.yaml")
        assert (code, out, err) == (1, "", "error: link.yaml: 'link.yaml' goes through a "
                                    "symlink (link.yaml); gitscale edits only regular files "
                                    "inside the config repo\n"), where
