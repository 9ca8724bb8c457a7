"""The clone `run` and `serve` keep for months stays small: no reflog, no background gc, and
the commits each shallow fetch leaves behind (loose objects, lines of ``.git/shallow``) are
dropped once they pile up (``clone.tidy``)."""
from __future__ import annotations

from pathlib import Path

import pytest

from gitscale.repo import clone as clonemod
from gitscale.repo import workspace
from gitscale.repo.opening import open_workspace
from tests.helpers import RUNNERSET, git, make_repo, simple_config


def _counts(root: Path) -> dict[str, int]:
    out = git(root, "count-objects", "-v")
    return {k: int(v) for k, v in (line.split(": ") for line in out.splitlines())
            if v.strip().isdigit()}


@pytest.mark.parametrize("sparse", [pytest.param(True, id="run"),
                                    pytest.param(False, id="serve")])
def test_a_kept_clone_does_not_grow_with_the_commits_it_syncs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sparse: bool) -> None:
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "default"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
    })
    monkeypatch.setattr(workspace, "TIDY_EVERY", 5)
    monkeypatch.setattr(clonemod, "TIDY_LOOSE", 40)
    remote = tmp_path / "remote.git"
    peak = {"count": 0, "shallow": 0}
    with open_workspace(f"file://{remote}", None, sparse=sparse, kept=True) as ws:
        gitdir = ws.root / ".git"
        assert git(ws.root, "config", "gc.auto") == "0"  # no gc behind the process's back
        for number in range(60):
            (checkout / "sets" / "linux.yaml").write_text(
                RUNNERSET.format(name="linux", replicas=number + 1))
            git(checkout, "commit", "--quiet", "-am", f"scale {number}")
            git(checkout, "push", "--quiet")
            ws.sync()
            assert ws.base() == git(remote, "rev-parse", "main")
            peak["count"] = max(peak["count"], _counts(ws.root)["count"])
            shallow = gitdir / "shallow"
            lines = len(shallow.read_text().split()) if shallow.exists() else 0
            peak["shallow"] = max(peak["shallow"], lines)
        assert not (gitdir / "logs").exists()  # no reflog holding every commit it saw
        # 60 commits of 3 objects each were fetched: without the tidy, 180 loose objects and
        # 60 shallow lines; with it, never more than a threshold and a look's worth
        assert peak["count"] < 40 + 5 * 3, peak
        assert peak["shallow"] <= 14 + 5, peak
        assert _counts(ws.root)["packs"] <= 1
        git(ws.root, "fsck", "--no-progress")  # and nothing it still needs was dropped
        assert git(ws.root, "show", "HEAD:sets/linux.yaml").count("replicas: 60") == 1
