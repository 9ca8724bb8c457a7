"""A one-shot pass over a URL or a bare repository starts its clone before its modules are
imported (``opening.begin``): the pass gets the same workspace, says the same errors at the
same point, and a clone no pass took is stopped and removed."""
from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

import pytest

from gitscale.errors import GitError
from gitscale.repo.opening import begin, open_workspace
from tests.helpers import git, run


@pytest.fixture
def temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """TMPDIR of its own, to see what the clones leave there."""
    path = tmp_path / "tmp"
    path.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    return path


def _left(temp: Path) -> list[str]:
    return sorted(p.name for p in temp.iterdir() if p.name.startswith("gitscale-"))


@pytest.mark.parametrize("url", [pytest.param(False, id="bare path"),
                                 pytest.param(True, id="file URL")])
def test_the_clone_begun_early_is_the_workspace_of_the_pass(remote: Path, temp: Path,
                                                           url: bool) -> None:
    repo = remote.as_uri() if url else str(remote)
    with begin(repo, None, sparse=True) as begun:
        assert begun is not None and begun.clone is not None and begun.scratch is not None
        assert begun.blobless is url  # a URL is cloned without blobs, as open_workspace does
        with open_workspace(repo, None, sparse=True, begun=begun) as ws:
            assert ws.mode == "clone" and ws.root == begun.scratch / "repo"
            assert ws.git.head() == git(remote, "rev-parse", "main")
            # a partial clone (no blobs, checked out by the pass), or the top-level files
            assert ws.git.promisor == ("origin" if url else None)
            assert (ws.root / "gitscale.yaml").is_file() is not url
            assert not (ws.root / "sets").exists()
        assert _left(temp) == []  # removed by the pass, as its own clone is
    assert begun.clone.proc.returncode == 0
    assert _left(temp) == []


def test_a_clone_no_pass_took_is_stopped_and_removed(remote: Path, temp: Path) -> None:
    with begin(str(remote), None, sparse=True) as begun:
        assert begun is not None and begun.clone is not None
        assert len(_left(temp)) == 1
    assert begun.clone.proc.returncode is not None  # ended (killed, or done) and reaped
    assert _left(temp) == []


def test_a_begun_clone_of_another_repo_is_not_taken(remote: Path, temp: Path,
                                                   tmp_path: Path) -> None:
    other = tmp_path / "other.git"
    git(tmp_path, "clone", "--quiet", "--bare", str(remote), str(other))
    git(tmp_path / "config", "commit", "--quiet", "--allow-empty", "-m", "newer")
    git(tmp_path / "config", "push", "--quiet", "origin", "main")
    with begin(str(other), None, sparse=True) as begun:
        with open_workspace(str(remote), None, sparse=True, begun=begun) as ws:
            assert ws.git.head() == git(remote, "rev-parse", "main")  # its own clone
            assert ws.git.head() != git(other, "rev-parse", "main")
    assert _left(temp) == []


def test_a_failed_clone_says_what_the_pass_would_have_said(tmp_path: Path, temp: Path) -> None:
    missing = (tmp_path / "gone.git").as_uri()

    def failure(begun: bool) -> str:
        with begin(missing, None, sparse=True) if begun else _nothing() as started:
            assert (started is not None) is begun
            with pytest.raises(GitError) as caught:
                with open_workspace(missing, None, sparse=True, begun=started):
                    pass
        return re.sub(r"gitscale-clone\.[^/ ]+", "CLONE", str(caught.value))

    early, late = failure(True), failure(False)
    assert "git clone" in early and "gone.git" in early
    assert early == late
    assert _left(temp) == []


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_a_checkout_is_not_cloned_and_asked_once_whether_it_is_bare(
        remote: Path, tmp_path: Path, temp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = tmp_path / "trace.json"
    config = tmp_path / "gitconfig"
    config.write_text(f"[trace2]\n\teventTarget = {events}\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    checkout = tmp_path / "config"
    with begin(str(checkout), None, sparse=True) as begun:
        assert begun is not None and begun.clone is None and not begun.bare
        with open_workspace(str(checkout), None, sparse=True, begun=begun) as ws:
            assert ws.mode == "checkout" and ws.root == checkout
    asked = [e for e in map(json.loads, events.read_text().splitlines())
             if e["event"] == "start" and "--is-bare-repository" in e["argv"]]
    assert len(asked) == 1
    assert _left(temp) == []


def test_nothing_is_begun_where_the_pass_refuses_to_clone(remote: Path, tmp_path: Path,
                                                          temp: Path) -> None:
    with begin(str(remote), None, push=False, sparse=True) as begun:  # --no-push
        assert begun is None
    with begin(str(tmp_path / "nowhere"), None, sparse=True) as begun:
        assert begun is None
    with begin("https://user:secret@example.invalid/x.git", None, sparse=True) as begun:
        assert begun is None  # (credentials in a URL: refused by the pass, never handed to git)
    assert _left(temp) == []


def test_a_pass_refused_before_its_clone_leaves_no_clone(remote: Path, temp: Path,
                                                         capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run(capsys, "reconcile", "--repo", str(remote), "--now", "yesterday")
    assert code == 1 and "--now" in err and "Traceback" not in err
    assert _left(temp) == []
    code, out, err = run(capsys, "plan", "--repo", str(remote), "--every", "soon")
    assert code == 1 and "--every" in err
    assert _left(temp) == []
    assert os.listdir(temp) == []
