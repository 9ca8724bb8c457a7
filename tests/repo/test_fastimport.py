"""A commit without the index (gitscale.repo.fastimport) is the commit `git commit` makes."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gitscale.repo.git import Git
from gitscale.repo.fastimport import commit_files, stripspace
from gitscale.repo.index import stage_files
from tests.helpers import git

BASE = {"sets/a.yaml": "replicas: 1\n", "sets/b c/\"q\" é.yaml": "replicas: 2\n",
        "run.sh": "#!/bin/sh\n", "top.yaml": "x: 1\n"}
DATE = "2026-11-21T09:00:00Z"
MESSAGE = "gitscale: a 1→3  \n\n\n- a: demand 3   \n\nGitscale-Set: a replicas=3\n\n\n"


@pytest.fixture
def global_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Our own global git config (and none of the machine's), to add settings to."""
    config = tmp_path / "gitconfig"
    config.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("GITSCALE_AUTHOR", raising=False)
    return config


def _repo(root: Path) -> Path:
    root.mkdir()
    git(root, "init", "--quiet", "--initial-branch=main")
    for rel, text in BASE.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "run.sh").chmod(0o755)
    git(root, "add", "--all")
    git(root, "-c", "user.name=Human", "-c", "user.email=h@example.com", "commit", "-qm", "base")
    return root


def _twins(tmp_path: Path) -> tuple[Git, Git]:
    one = _repo(tmp_path / "one")
    two = tmp_path / "two"
    shutil.copytree(one, two)
    return Git(one), Git(two)


EDITS = {"sets/a.yaml": ("100644", b"replicas: 3\n"),
         "sets/b c/\"q\" é.yaml": ("100644", b"replicas: 4\n"),
         "run.sh": ("100755", b"#!/bin/sh\necho hi\n"),
         "new/file.yaml": ("100644", b"made: here\n")}


def test_the_same_commit_as_git_commit(tmp_path: Path, global_config: Path) -> None:
    fast, slow = _twins(tmp_path)
    parent = fast.head()
    sha = commit_files(fast, EDITS, MESSAGE, parent=parent, branch="main", date=DATE)
    stage_files(slow, {path: data for path, (_, data) in EDITS.items()},
                {path: mode for path, (mode, _) in EDITS.items()})
    expected = slow.commit(MESSAGE, [], DATE)
    # the same tree, parent, author, committer, dates and cleaned-up message: the same id
    assert sha == expected == fast.head()
    assert fast.out("cat-file", "-p", "HEAD") == slow.out("cat-file", "-p", "HEAD")
    assert "100755 blob" in fast.out("ls-tree", "HEAD", "run.sh")  # the mode as given
    assert fast.out("log", "-1", "--format=%an <%ae>") == \
        "gitscale <gitscale@users.noreply.gitscale.dev>"


def test_the_clock_and_identity_of_a_commit_made_now(tmp_path: Path, global_config: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITSCALE_AUTHOR", "Scaler Bot <scaler@example.com>")
    monkeypatch.setenv("TZ", "Europe/Berlin")
    fast, slow = _twins(tmp_path)
    sha = commit_files(fast, EDITS, MESSAGE, parent=fast.head(), branch="main")
    stage_files(slow, {path: data for path, (_, data) in EDITS.items()})
    slow.commit(MESSAGE, [])
    assert sha is not None
    fields = "%an|%ae|%cn|%ce|%ai"
    made, reference = (g.out("log", "-1", f"--format={fields}").split("|") for g in (fast, slow))
    assert made[:4] == reference[:4] == ["Scaler Bot", "scaler@example.com"] * 2
    assert made[4][-5:] == reference[4][-5:] in ("+0100", "+0200")  # the local offset
    assert fast.out("log", "-1", "--format=%B") == slow.out("log", "-1", "--format=%B")


@pytest.mark.parametrize("setting", ["commit.gpgSign=true", "core.hooksPath=/nowhere",
                                     "commit.cleanup=verbatim", "i18n.commitEncoding=latin1"])
def test_declines_when_git_commit_would_do_more(tmp_path: Path, global_config: Path,
                                                setting: str) -> None:
    repo = Git(_repo(tmp_path / "repo"))
    key, value = setting.split("=")
    git(tmp_path, "config", "--file", str(global_config), key, value)
    before = repo.head()
    assert commit_files(repo, EDITS, MESSAGE, parent=before, branch="main", date=DATE) is None
    assert repo.head() == before


@pytest.mark.parametrize("author, declined", [
    ("Scaler Bot <bot@example.com>", False),
    ("Bot. <bot@example.com>", True),  # git 2.39 drops the dot
    ("'Bot' <bot@example.com>", True),  # git would strip the quotes
    ("Bot <bot@example.com;>", True),
])
def test_an_identity_git_would_rewrite_is_left_to_git(tmp_path: Path, global_config: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      author: str, declined: bool) -> None:
    monkeypatch.setenv("GITSCALE_AUTHOR", author)
    fast, slow = _twins(tmp_path)
    before = fast.head()
    result = commit_files(fast, EDITS, MESSAGE, parent=before, branch="main", date=DATE)
    stage_files(slow, {path: data for path, (_, data) in EDITS.items()},
                {path: mode for path, (mode, _) in EDITS.items()})
    expected = slow.commit(MESSAGE, [], DATE)
    if declined:
        assert result is None and fast.head() == before
    else:
        assert result == expected


@pytest.mark.parametrize("raw, kept", [
    ("a\n\n\nb\n", "a\n\nb\n"),
    ("\n\n  a  \t\nb", "  a\nb\n"),
    ("a\r\n\r\nb\n\n\n", "a\n\nb\n"),
    ("   \n\n", ""),
], ids=["blank-runs", "leading-and-trailing", "crlf", "only-blank"])
def test_stripspace(raw: str, kept: str) -> None:
    assert stripspace(raw) == kept
