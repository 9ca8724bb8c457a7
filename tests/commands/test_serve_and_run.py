"""`gitscale serve` and `run`/`reconcile` on one config repo: the sets serve scales are listed in
its reservations file (``served:``), and `run`, `reconcile` and `plan` leave them alone. They
wrote against each other: each pass of one undid the other's replicas."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.helpers import RUNNERSET, git, make_repo, run
from tests.commands.test_serve import SECRET, Server

CONFIG = """\
runnerSets:
  - name: linux
    manifest: sets/linux.yaml
    source: {github: {org: octo-org, labels: [self-hosted, linux], token: {env: GH_TOKEN}}}
    policy: {minReplicas: 0, maxReplicas: 20}
  - name: batch
    manifest: sets/batch.yaml
    source: {file: demand.yaml}
    policy: {minReplicas: 0, maxReplicas: 20}
"""


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config repo whose github set `linux` is served by webhooks (serve ran once)."""
    monkeypatch.setenv("TEST_WEBHOOK_SECRET", SECRET)
    repo = make_repo(tmp_path, {
        "gitscale.yaml": CONFIG, "demand.yaml": "batch: {queued: 0, running: 0}\n",
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "sets/batch.yaml": RUNNERSET.format(name="batch", replicas=0)})
    Server(repo, window="1s").close()
    git(repo, "pull", "-q")
    state = yaml.safe_load((repo / ".gitscale/reservations.yaml").read_text())
    assert state["served"] == ["linux"]
    (tmp_path / "what-if.yaml").write_text("linux: {queued: 5, running: 0}\n"
                                           "batch: {queued: 3, running: 0}\n")
    return repo


def replicas(repo: Path, name: str) -> int:
    remote = repo.parent / "remote.git"
    return int(yaml.safe_load(git(remote, "show", f"main:sets/{name}.yaml"))["spec"]["replicas"])


def test_reconcile_and_plan_leave_the_served_sets_to_serve(served: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    what_if = str(served.parent / "what-if.yaml")
    code, out, _ = run(capsys, "plan", "--repo", str(served), "--demand", what_if)
    assert code == 2
    assert "= linux  served by webhooks (`gitscale serve`, .gitscale/reservations.yaml)" in out
    assert "1 left to `gitscale serve`" in out and "b/sets/linux.yaml" not in out
    code, out, _ = run(capsys, "plan", "--repo", str(served), "--demand", what_if,
                       "--output", "json")
    assert [c["set"] for c in json.loads(out)["changes"]] == ["batch"]
    assert [s["set"] for s in json.loads(out)["left"]] == ["linux"]
    code, out, _ = run(capsys, "reconcile", "--repo", str(served), "--demand", what_if)
    assert code == 0, out
    assert (replicas(served, "linux"), replicas(served, "batch")) == (0, 3)
    code, _, err = run(capsys, "run", "--repo", str(served), "--demand", what_if,
                       "--max-passes", "1")
    assert code == 0 and "linux: served by webhooks" in err
    assert replicas(served, "linux") == 0


def test_a_pass_on_a_url_reads_the_served_sets_too(served: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """Over a URL a pass works on a sparse clone (top-level files only): `.gitscale/` must be
    checked out with the config, or the served sets would be scaled against serve."""
    what_if = str(served.parent / "what-if.yaml")
    remote = str(served.parent / "remote.git")
    code, out, _ = run(capsys, "plan", "--repo", remote, "--demand", what_if)
    assert code == 2 and "1 left to `gitscale serve`" in out
    code, out, _ = run(capsys, "reconcile", "--repo", remote, "--demand", what_if)
    assert code == 0, out
    assert (replicas(served, "linux"), replicas(served, "batch")) == (0, 3)


def test_deleting_the_reservations_file_hands_the_sets_back(served: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    git(served, "rm", "-q", ".gitscale/reservations.yaml")
    git(served, "commit", "-qm", "stop serving linux by webhooks")
    git(served, "push", "-q")
    code, _, _ = run(capsys, "reconcile", "--repo", str(served), "--demand",
                     str(served.parent / "what-if.yaml"))
    assert code == 0
    assert (replicas(served, "linux"), replicas(served, "batch")) == (5, 3)


@pytest.mark.parametrize("state_file", ["state.yaml", ".gitscale/deep/r.yaml", ".gitscale/r.json"])
def test_serve_keeps_its_state_where_run_looks(served: Path, capsys, state_file: str) -> None:  # type: ignore[no-untyped-def]
    code, _, err = run(capsys, "serve", "--repo", str(served), "--listen", "127.0.0.1:0",
                       "--secret-env", "TEST_WEBHOOK_SECRET", "--state-file", state_file)
    assert code == 1 and err.startswith("error: --state-file:") and ".gitscale/" in err, err


def test_a_broken_claim_is_an_error_and_nothing_is_written(served: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    (served / ".gitscale/reservations.yaml").write_text("served: linux\n")
    git(served, "commit", "-qam", "by hand")
    git(served, "push", "-q")
    before = git(served.parent / "remote.git", "rev-parse", "main")
    code, _, err = run(capsys, "reconcile", "--repo", str(served), "--demand",
                       str(served.parent / "what-if.yaml"))
    assert code == 1 and "error: .gitscale/reservations.yaml:1: `served` must be" in err, err
    assert "Traceback" not in err
    assert git(served.parent / "remote.git", "rev-parse", "main") == before
