"""The commits by people on managed paths (``record.manual``): each change's blob ids before
and after, read back in blocks through one ``cat-file`` each, in a real repository."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gitscale.errors import GitError
from gitscale.record import manual
from gitscale.repo.git import Git
from gitscale.repo.index import cat_blobs
from tests.helpers import git, make_repo


def _commit(checkout: Path, files: dict[str, str | None], subject: str) -> None:
    for path, text in files.items():
        if text is None:
            git(checkout, "rm", "--quiet", path)
        else:
            (checkout / path).parent.mkdir(parents=True, exist_ok=True)
            (checkout / path).write_text(text)
            git(checkout, "add", path)
    git(checkout, "commit", "--quiet", "-m", subject)


def test_changes_carry_the_blobs_before_and_after(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    checkout = make_repo(tmp_path, {"a.yaml": "v: 0\n", "other": "x\n"}, bare_remote=False)
    for n in range(1, 6):
        _commit(checkout, {"a.yaml": f"v: {n}\n", "other": f"{n}\n"}, f"edit {n}")
    _commit(checkout, {"b.yaml": "new\n"}, "add b")  # an addition: not an edit
    _commit(checkout, {"a.yaml": "v: 6\n"}, "edit 6\n\nGitscale-Set: a replicas=6")  # ours
    _commit(checkout, {"a.yaml": None}, "remove a")
    repo = Git(checkout)
    commits = list(manual.iter_manual(repo, ["a.yaml", "b.yaml"]))
    assert [c.subject for c in commits] == ["remove a", *(f"edit {n}" for n in range(5, 0, -1))]
    removal = commits[0].changes
    assert [(c.path, c.after) for c in removal] == [("a.yaml", None)]
    assert removal[0].before == git(checkout, "rev-parse", "HEAD~1:a.yaml")
    assert commits[1].paths == ("a.yaml",)  # "other" was not asked for

    monkeypatch.setattr(manual, "FIRST_BLOCK", 1)
    monkeypatch.setattr(manual, "LAST_BLOCK", 2)
    seen = []
    for commit, blobs in manual.with_blobs(repo, iter(commits), {"a.yaml"}):
        (change,) = commit.changes
        seen.append((blobs.get(change.before or ""), blobs.get(change.after or "")))
    assert seen == [(b"v: 6\n", None), *((b"v: %d\n" % (n - 1), b"v: %d\n" % n)
                                         for n in range(5, 0, -1))]
    assert all(blobs == {} for _, blobs in manual.with_blobs(repo, iter(commits), set()))


def test_cat_blobs_leaves_out_what_git_lacks(tmp_path: Path) -> None:
    checkout = make_repo(tmp_path, {"a": "one\n"}, bare_remote=False)
    repo = Git(checkout)
    blob = git(checkout, "rev-parse", "HEAD:a")
    absent = "0123456789abcdef0123456789abcdef01234567"
    assert cat_blobs(repo, [absent, blob, blob]) == {blob: b"one\n"}
    with pytest.raises(GitError, match="is not a blob"):
        cat_blobs(repo, [git(checkout, "rev-parse", "HEAD^{tree}")])


def test_a_merge_carries_each_parents_blob(tmp_path: Path) -> None:
    """A merge's combined line: the first parent's blob before, the others' apart; a path the
    merge took as one parent had it is not listed (the merged commits are rows of their own)."""
    checkout = make_repo(tmp_path, {"a.yaml": "v: 0\nx: 0\n", "b.yaml": "b: 0\n"},
                         bare_remote=False)
    git(checkout, "checkout", "-q", "-b", "side")
    _commit(checkout, {"a.yaml": "v: 1\nx: 0\n", "b.yaml": "b: 1\n"}, "side")
    git(checkout, "checkout", "-q", "-")
    _commit(checkout, {"a.yaml": "v: 2\nx: 0\n"}, "main")
    subprocess.run(["git", "merge", "-q", "side"], cwd=checkout, capture_output=True)
    _commit(checkout, {"a.yaml": "v: 3\nx: 0\n"}, "merge")
    merge, *_ = manual.iter_manual(Git(checkout), ["a.yaml", "b.yaml"])
    assert merge.subject == "merge" and merge.paths == ("a.yaml",)  # b.yaml: side's as is
    assert merge.changes[0] == manual.Change(
        "a.yaml", git(checkout, "rev-parse", "HEAD^1:a.yaml"), git(checkout, "rev-parse",
                                                                   "HEAD:a.yaml"),
        (git(checkout, "rev-parse", "HEAD^2:a.yaml"),))
