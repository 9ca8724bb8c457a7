"""A forecast set renamed, end to end through the CLI on a real git repo: two Mondays of a
09:00 burst scaled by `reconcile` under the name ``linux``, the set renamed ``linux-x64`` (same
manifest, same object), then `plan` on the third Monday. Without ``previousNames`` the forecast
is reactive and says which name to declare; with ``previousNames: [linux]`` it keeps the
runners ready from the old name's commits, and `history --set linux-x64` shows them under the
name each commit gives."""
from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.helpers import RUNNERSET, git, make_repo, run
from tests.record.test_series import START

POLICY = "    policy: {maxReplicas: 50, forecast: {lookback: 14d}}\n"


def config(name: str, previous: str = "") -> str:
    return (f"runnerSets:\n  - name: {name}\n{previous}    manifest: sets/linux.yaml\n"
            "    object: {kind: RunnerSet, name: linux}\n    source: {file: demand.yaml}\n"
            + POLICY)


def reconcile(capsys: pytest.CaptureFixture[str], checkout: Path, when: datetime, name: str,
              queued: int) -> None:
    demand = checkout.parent / "demand.yaml"
    demand.write_text(f"{name}: {{queued: {queued}, running: 0}}\n")
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout), "--now", when.isoformat(),
                       "--demand", str(demand))
    assert code == 0, err


def plan(capsys: pytest.CaptureFixture[str], checkout: Path, when: datetime,
         name: str) -> dict[str, object]:
    demand = checkout.parent / "demand.yaml"
    demand.write_text(f"{name}: {{queued: 0, running: 2}}\n")  # as the last pass left it
    code, out, err = run(capsys, "plan", "--repo", str(checkout), "--now", when.isoformat(),
                         "--demand", str(demand), "--output", "json")
    assert code in (0, 2), err
    found: dict[str, object] = json.loads(out)
    return found


def test_a_renamed_forecast_set_keeps_its_history(capsys: pytest.CaptureFixture[str],
                                                  tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITSCALE_CACHE_DIR", str(tmp_path / "cache"))
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": config("linux"),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 0, running: 0}\n",
    })
    for day in (0, 7):  # two Mondays: 39 jobs arrive at 09:00 (1 queued before), gone by 09:20
        monday = START + timedelta(days=day)
        reconcile(capsys, checkout, monday + timedelta(hours=8), "linux", 1)
        reconcile(capsys, checkout, monday + timedelta(hours=9), "linux", 40)
        reconcile(capsys, checkout, monday + timedelta(hours=9, minutes=20), "linux", 0)

    # the rename, as a person commits it: the name, the demand file's entry; not declared
    (checkout / "gitscale.yaml").write_text(config("linux-x64"))
    (checkout / "demand.yaml").write_text("linux-x64: {queued: 0, running: 0}\n")
    git(checkout, "commit", "--quiet", "-am", "rename linux to linux-x64")
    git(checkout, "push", "--quiet", "origin", "main")
    reconcile(capsys, checkout, START + timedelta(days=13), "linux-x64", 2)
    now = START + timedelta(days=14, hours=8, minutes=59)  # 09:00 one lead (1m) ahead

    undeclared = plan(capsys, checkout, now, "linux-x64")
    # reactive: the count stays 2 (a quiet-reset to patch 0, as for any set), and it says why
    change, = undeclared["changes"]  # type: ignore[misc]
    assert (change["reason"], change["to"]["replicas"]) == ("quiet-reset", 2)
    assert ("forecast: 1.4d of history, needs 14d: reactive until then; the history read names "
            "a set gitscale.yaml no longer has, whose commits end before this set's begin: "
            "linux: if it was this set's name, add `previousNames: [linux]` to the set"
            ) in change["detail"]

    (checkout / "gitscale.yaml").write_text(config("linux-x64", "    previousNames: [linux]\n"))
    git(checkout, "commit", "--quiet", "-am", "gitscale.yaml: linux-x64 was linux")
    git(checkout, "push", "--quiet", "origin", "main")
    declared = plan(capsys, checkout, now, "linux-x64")
    change, = declared["changes"]  # type: ignore[misc]
    assert (change["set"], change["reason"], change["to"]["replicas"]) == \
        ("linux-x64", "forecast", 41)
    assert "q0.9 of the jobs that arrived within 90s" in change["detail"]
    assert "on the last 2 Mondays (39, 39)" in change["detail"]

    code, out, err = run(capsys, "history", "--repo", str(checkout), "--set", "linux-x64",
                         "--output", "json")
    assert code == 0 and err == "", err
    rows = json.loads(out)
    scaling = [(row["set"], row["replicas"]) for row in rows if row["reason"] != "manual"]
    # newest first, each under the name its commit gives (the history as it was written)
    assert scaling == [("linux-x64", 2), ("linux", 0), ("linux", 40), ("linux", 1),
                       ("linux", 0), ("linux", 40), ("linux", 1)]

    # over a URL (commit messages only; the names from the branch's gitscale.yaml): the same
    code, out, _ = run(capsys, "history", "--repo", f"file://{tmp_path / 'remote.git'}",
                       "--set", "linux-x64", "--output", "json")
    assert code == 0 and [(row["set"], row["replicas"]) for row in json.loads(out)] == scaling

    code, out, err = run(capsys, "history", "--repo", str(checkout), "--set", "linux")
    assert code == 0
    # its own commits only (the config's edits, `*`, are rows of no set: not under --set)
    assert {line.split()[2] for line in out.splitlines()[1:]} == {"linux"}, out
    assert err == ("history: 'linux' is a previous name of set 'linux-x64' (its previousNames "
                   "in gitscale.yaml): showing the scaling commits that name 'linux'; --set "
                   "linux-x64 shows them with those since the rename\n")
