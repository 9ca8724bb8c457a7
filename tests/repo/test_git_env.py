"""The caller's GIT_* variables (a git hook, `git rebase -x`) must not steer gitscale's git, and a
clone takes nothing from the machine's git templates."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import RUNNERSET, git, make_repo, run, simple_config

FILES = {
    "gitscale.yaml": simple_config({"linux": "default"}),
    "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=2),
    "demand.yaml": "linux: {queued: 5, running: 0}\n",
}


@pytest.mark.parametrize("variable", ["GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE",
                                      "GIT_OBJECT_DIRECTORY"])
def test_inherited_git_variables_do_not_steer_our_git(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     variable: str) -> None:
    checkout = make_repo(tmp_path / "a", FILES)
    other = make_repo(tmp_path / "b", {"README": "another repository\n"}, bare_remote=False)
    other_head = git(other, "rev-parse", "HEAD")
    value = {"GIT_DIR": other / ".git", "GIT_WORK_TREE": other,
             "GIT_INDEX_FILE": other / ".git" / "index",
             "GIT_OBJECT_DIRECTORY": other / ".git" / "objects"}[variable]
    monkeypatch.setenv(variable, str(value))
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout), "--no-push")
    monkeypatch.delenv(variable)
    assert code == 0, out + err
    assert "linux 2→5" in git(checkout, "log", "-1", "--format=%s")
    assert "replicas: 5" in git(checkout, "show", "HEAD:sets/linux.yaml")
    assert not git(checkout, "status", "--porcelain")
    assert git(other, "rev-parse", "HEAD") == other_head  # nothing landed in the other repo
    assert not git(other, "status", "--porcelain")


def test_a_clone_takes_no_hooks_from_git_templates(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """--no-verify skips pre-commit hooks, not post-commit ones: a template's hook would run."""
    make_repo(tmp_path, FILES)
    template = tmp_path / "template"
    (template / "hooks").mkdir(parents=True)
    marker = tmp_path / "hook-ran"
    hook = template / "hooks" / "post-commit"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    # configuration given on the command line is kept (CI uses it for credentials)
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "init.templateDir")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", str(template))
    code, out, err = run(capsys, "reconcile", "--repo", str(tmp_path / "remote.git"))
    assert code == 0, out + err
    assert "linux 2→5" in git(tmp_path / "remote.git", "log", "-1", "--format=%s")
    assert not marker.exists()
