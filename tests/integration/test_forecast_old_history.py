"""A forecast set over a URL whose branch holds no commit in the time the forecast reads.

A pass clones one commit and deepens the clone to the time it needs (``git fetch
--shallow-since``). When the branch's newest commit is older than that time, git selects no
commit and the fetch fails ("the remote end hung up unexpectedly"): every `plan` and
`reconcile` of a quiet config repo (nothing committed for the lookback and a week) failed with
exit 1, and after a rollback by force push to a commit an hour older than the last one a pass
had read (or with a state cache shared by two config repos, the default ~/.cache/gitscale), so
did every pass after it, until the cache was deleted: `run` kept its series in memory and
failed every pass for good. Nothing since that time means nothing to fetch.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import RUNNERSET
from tests.integration import seed
from tests.integration.conftest import GitDaemon, run_cli

CONFIG = """\
runnerSets:
  - name: linux
    manifest: sets/linux.yaml
    source: {file: demand.yaml}
    policy: {minReplicas: 0, maxReplicas: 50, scaleDownDelay: 0s, forecast: {lookback: 14d}}
"""
FILES = {"gitscale.yaml": CONFIG, "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0)}
SEEDED = "2026-01-05T08:00:00Z"


@pytest.fixture
def bare(git_server: GitDaemon, monkeypatch: pytest.MonkeyPatch) -> Path:
    with monkeypatch.context() as dated:
        dated.setenv("GIT_AUTHOR_DATE", SEEDED)
        dated.setenv("GIT_COMMITTER_DATE", SEEDED)
        made = git_server.create(FILES)
    seed.git(made, "config", "uploadpack.allowFilter", "true")  # a partial clone, as a host's
    return made


def demand(tmp_path: Path, queued: int) -> str:
    path = tmp_path / f"demand-{queued}.yaml"
    path.write_text(f"linux: {{queued: {queued}, running: 0}}\n")
    return str(path)


def test_a_quiet_repo_is_planned_and_reconciled(bare: Path, git_server: GitDaemon,
                                                tmp_path: Path) -> None:
    env = {"GITSCALE_CACHE_DIR": ""}
    now = "2026-03-02T09:00:00Z"  # eight weeks after the only commit
    planned = run_cli("plan", "--repo", git_server.url(), "--demand", demand(tmp_path, 3),
                      "--now", now, cwd=tmp_path, env=env)
    assert planned.code == 2, planned
    assert planned.out.startswith("~ linux  0 → 3"), planned
    landed = run_cli("reconcile", "--repo", git_server.url(), "--demand", demand(tmp_path, 3),
                     "--now", now, cwd=tmp_path, env=env)
    assert landed.code == 0 and "and pushed to" in landed.out, landed
    assert seed.message(bare).sets["linux"]["replicas"] == "3"


def test_a_rollback_by_force_push_does_not_wedge_the_next_passes(bare: Path,
                                                                 git_server: GitDaemon,
                                                                 tmp_path: Path) -> None:
    env = {"GITSCALE_CACHE_DIR": str(tmp_path / "cache")}  # the series is kept between runs
    url = git_server.url()
    first = seed.commits(bare)[0]
    for queued, now in ((3, "2026-01-26T09:00:00Z"), (4, "2026-01-26T10:00:00Z")):
        landed = run_cli("reconcile", "--repo", url, "--demand", demand(tmp_path, queued),
                         "--now", now, cwd=tmp_path, env=env)
        assert landed.code == 0 and "and pushed to" in landed.out, landed
    # a person rolls the branch back to the first commit (weeks older than the last one read)
    seed.git(bare, "push", "--quiet", "--force", url, f"{first}:refs/heads/main")

    for queued, now in ((5, "2026-01-26T11:00:00Z"), (6, "2026-01-26T11:05:00Z")):
        again = run_cli("reconcile", "--repo", url, "--demand", demand(tmp_path, queued),
                        "--now", now, cwd=tmp_path, env=env)
        assert again.code == 0 and "and pushed to" in again.out, again
    history = seed.commits(bare)
    assert len(history) == 3 and history[-1] == first
    assert seed.message(bare).sets["linux"] == {**seed.message(bare).sets["linux"],
                                                "previous": "5", "replicas": "6"}
