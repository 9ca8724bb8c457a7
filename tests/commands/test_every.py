"""`plan --every` / `reconcile --every`: how often a cron runs them, which a forecast's cushion
must serve (the jobs that arrive until the next run), and a bad value refused."""
from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from tests.helpers import git, make_repo, run, simple_config
from tests.record.test_series import START, scaling_commit

NOW = START + timedelta(days=14, hours=8, minutes=59)  # 09:00 one lead (1m) ahead


def staggered_repo(tmp_path: Path) -> Path:
    """Two past Mondays: 20 jobs at 09:00, 20 more at 09:03 (3 min apart), gone by 09:30."""
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{maxReplicas: 100, forecast: {jitter: 0s}}"}),
        "sets/linux.yaml": "apiVersion: gitscale.dev/v1alpha1\nkind: RunnerSet\n"
                           "metadata: {name: linux}\nspec: {replicas: 0, patchID: 3, "
                           "platform: github, github: {configURL: 'https://github.com/x', "
                           "credentialsSecret: gh}, template: {spec: {containers: "
                           "[{name: runner, image: 'runner:1'}]}}}\n",
        "demand.yaml": "linux: {queued: 0, running: 0}\n",
    })
    for day in (0, 7):
        monday = START + timedelta(days=day)
        scaling_commit(checkout, monday + timedelta(hours=8), 0, 0)
        scaling_commit(checkout, monday + timedelta(hours=9), 20, 0)
        scaling_commit(checkout, monday + timedelta(hours=9, minutes=3), 0, 40)
        scaling_commit(checkout, monday + timedelta(hours=9, minutes=30), 0, 0)
    git(checkout, "push", "--quiet", "origin", "main")
    return checkout


@pytest.mark.parametrize(("every", "replicas"), [
    pytest.param(None, 20, id="a-minute-sees-the-first-20"),  # reach 1m + 1m - 30s = 90 s
    pytest.param("5m", 40, id="five-minutes-see-both"),  # reach 5m + 1m - 30s = 330 s
])
def test_every_is_the_time_the_cushion_serves(capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              every: str | None, replicas: int) -> None:
    monkeypatch.setenv("GITSCALE_CACHE_DIR", str(tmp_path / "cache"))
    checkout = staggered_repo(tmp_path)
    extra = ["--every", every] if every else []
    code, out, err = run(capsys, "plan", "--repo", str(checkout), "--now", NOW.isoformat(),
                         "--output", "json", *extra)
    assert code == 2, err
    change, = json.loads(out)["changes"]
    assert change["to"]["replicas"] == replicas
    assert change["reason"] == "forecast"


@pytest.mark.parametrize("value", ["soon", "0s", "2h"])
def test_a_bad_every_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("GITSCALE_CACHE_DIR", str(tmp_path / "cache"))
    checkout = staggered_repo(tmp_path)
    head = git(checkout, "rev-parse", "HEAD")
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout), "--every", value)
    assert code == 1 and "--every" in err and "Traceback" not in err, err
    assert git(checkout, "rev-parse", "HEAD") == head  # nothing written
