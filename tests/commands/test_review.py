"""Reviewing a change in CI: a pull request's checkout is a detached HEAD (its merge commit).
`plan`, `validate` and `history` read it as it is; the commands that write still refuse it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import RUNNERSET, git, make_repo, run, simple_config


@pytest.fixture
def review(tmp_path: Path) -> Path:
    """A config repo whose checkout sits detached on a proposed change (max 3 → 8) that no
    branch holds, as actions/checkout leaves a pull request's merge commit."""
    repo = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 3}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 6, running: 0}\n",
    })
    git(repo, "checkout", "--quiet", "--detach")
    config = repo / "gitscale.yaml"
    config.write_text(config.read_text().replace("maxReplicas: 3", "maxReplicas: 8"))
    git(repo, "commit", "--quiet", "-am", "linux: max 8")
    return repo


def test_plan_reads_the_detached_commit(review: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    head = git(review, "rev-parse", "HEAD")
    code, out, err = run(capsys, "plan", "--repo", str(review), "--output", "json")
    assert code == 2, err
    plan = json.loads(out)
    assert plan["base_commit"] == head
    (linux,) = plan["changes"]
    assert linux["to"]["replicas"] == 6  # the change's max (8), not main's (3)
    assert git(review, "status", "--porcelain") == ""  # nothing written
    assert git(review, "rev-parse", "HEAD") == head


def test_validate_and_history_read_it_too(review: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run(capsys, "validate", "--repo", str(review))
    assert code == 0 and "0 problems" in out, err
    code, out, err = run(capsys, "history", "--repo", str(review))
    assert code == 0 and "manual edit of the config" in out and "linux: max 8" in out, err


@pytest.mark.parametrize("argv", [
    pytest.param(["reconcile"], id="reconcile"),
    pytest.param(["reconcile", "--no-push"], id="reconcile-no-push"),
    pytest.param(["drain", "linux"], id="drain"),
])
def test_the_writing_commands_still_refuse_it(review: Path, capsys,  # type: ignore[no-untyped-def]
                                              argv: list[str]) -> None:
    head = git(review, "rev-parse", "HEAD")
    code, _, err = run(capsys, *argv, "--repo", str(review))
    assert code == 1 and "HEAD is detached; check out the branch" in err
    assert git(review, "rev-parse", "HEAD") == head and git(review, "status", "--porcelain") == ""


def test_a_branch_named_on_a_detached_checkout_is_refused(review: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    code, _, err = run(capsys, "plan", "--repo", str(review), "--branch", "main")
    assert code == 1 and "HEAD is detached, not on branch main" in err
    assert "drop --branch" in err
