"""`gitscale simulate` through the CLI, in-process: outputs, history, --set and --policy."""
from __future__ import annotations

import json
import os
import subprocess
from dataclasses import fields
from pathlib import Path

import pytest

from gitscale.simulate.report import Metrics
from tests.helpers import git, run
from tests.simulate.util import config_dir, config_repo

STRATEGIES = ["gitscale", "arc-listener", "arc-hra", "pod-per-job", "oracle"]


@pytest.fixture(scope="module")
def two_sets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return config_dir(tmp_path_factory.mktemp("config"), {
        "linux": "{minReplicas: 0, maxReplicas: 20, scaleDownDelay: 5m}",
        "windows": "{minReplicas: 1, maxReplicas: 5, buffer: 1}"})


def simulate_json(capsys, *argv: str) -> dict:  # type: ignore[no-untyped-def,type-arg]
    code, out, err = run(capsys, "simulate", *argv, "--output", "json")
    assert code == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


def test_json_output(capsys, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)  # no gitscale.yaml: one set on the shipped default preset
    doc = simulate_json(capsys, "--synthetic", "steady", "--seed", "3", "--hours", "1",
                        "--pod-start", "30s", "--sync-delay", "5s", "--interval", "15s")
    assert doc["format_version"] == 1
    trace = doc["trace"]
    assert trace["name"] == "steady (seed 3)" and trace["hours"] == 1
    assert trace["sets"] == ["default"] and 60 <= trace["jobs"] <= 130
    assert trace["start"] == "2026-01-05T08:00:00+00:00"
    assert doc["settings"] == {"interval": 15.0, "sync_delay": 5.0, "sync_poll": None,
                               "pod_start": 30.0, "sample_every": 30.0, "job_memory": True,
                               "report_from": 0.0, "window": 10.0, "reservation": 600.0,
                               "resync": 300.0, "hold": 300.0, "max_total_replicas": None,
                               "scaler_clock_offset": 0.0}
    results = doc["results"]
    assert [r["name"] for r in results] == STRATEGIES
    assert results[0]["policy"] == "preset default"
    every = {f.name for f in fields(Metrics)}
    for row in results:
        assert set(row) == every
        assert row["jobs"] == trace["jobs"]
        assert row["wait_p50"] <= row["wait_p95"] <= row["wait_max"]
        assert row["idle_runner_minutes"] <= row["runner_minutes"]
        assert row["pods_created"] >= trace["jobs"] or row["name"] == "oracle"
    oracle = results[-1]
    assert (oracle["wait_max"], oracle["vs_oracle"], oracle["idle_runner_minutes"]) == (0, 1, 0)
    assert results[3]["wait_max"] == 30  # a pod per job waits its pod start
    gitscale = results[0]
    assert gitscale["commits"] > 0 and gitscale["patch_only_commits"] <= gitscale["commits"]
    assert gitscale["commits_per_hour"] == gitscale["commits"]  # a 1-hour trace
    assert all(r["commits"] is None and r["commits_per_hour"] is None for r in results[1:])


def test_text_output_has_a_row_per_strategy(capsys, tmp_path: Path,  # type: ignore[no-untyped-def]
                                            monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    doc = simulate_json(capsys, "--synthetic", "burst", "--hours", "2")
    code, out, err = run(capsys, "simulate", "--synthetic", "burst", "--hours", "2")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"trace: burst (seed 1), {doc['trace']['jobs']} jobs over 2 h, " \
                       "1 set(s): default"
    assert lines[1] == "decisions every 10s, sync 10s, pod start 45s"
    header, rows = lines[3], lines[4:]
    assert header.split()[:4] == ["strategy", "wait", "p50", "p95"]
    assert [row.split()[0] for row in rows] == STRATEGIES
    assert rows[0].startswith("gitscale (preset default)")
    for row, result in zip(rows, doc["results"]):
        cells = row.split()
        assert f"{result['wait_p95']:.0f}s" in cells and f"{result['vs_oracle']:.2f}" in cells
    code, out, _ = run(capsys, "simulate", "--synthetic", "burst", "--hours", "2",
                       "--no-baselines", "--sync-poll", "3m")
    assert code == 0 and "GitOps poll 180s" in out.splitlines()[1]
    assert [row.split()[0] for row in out.splitlines()[4:]] == ["gitscale", "oracle"]
    code, out, _ = run(capsys, "simulate", "--synthetic", "burst", "--hours", "2",
                       "--no-baselines", "--scaler-clock-offset", "-1.5")
    assert code == 0 and out.splitlines()[1] == "decisions every 10s, sync 10s, pod start " \
                                                "45s; gitscale's clock -1.5s from the cluster's"


def test_sets_from_the_config_and_set(capsys, two_sets: Path) -> None:  # type: ignore[no-untyped-def]
    both = simulate_json(capsys, "--repo", str(two_sets), "--synthetic", "spiky", "--hours",
                         "1", "--no-baselines")
    assert both["trace"]["sets"] == ["linux", "windows"]
    assert both["results"][0]["policy"] == "gitscale.yaml"
    linux = simulate_json(capsys, "--repo", str(two_sets), "--synthetic", "spiky", "--hours",
                          "1", "--no-baselines", "--set", "linux")
    assert linux["trace"]["sets"] == ["linux"]
    assert linux["trace"]["jobs"] < both["trace"]["jobs"]
    code, _, err = run(capsys, "simulate", "--repo", str(two_sets), "--synthetic", "spiky",
                       "--set", "macos")
    assert (code, err) == (1, "error: --set: unknown runner set 'macos' (known: linux, "
                              "windows)\n")


def test_set_on_a_csv_skips_the_other_sets_rows(capsys, two_sets: Path,  # type: ignore[no-untyped-def]
                                                tmp_path: Path) -> None:
    csv = tmp_path / "jobs.csv"
    csv.write_text("arrival,duration,set\n0,60,linux\n10,60,windows\n20,60\n30,60,windows\n")
    # without --set, a row with no set is on the first set of gitscale.yaml
    doc = simulate_json(capsys, "--repo", str(two_sets), "--trace", str(csv))
    assert (doc["trace"]["jobs"], doc["trace"]["sets"]) == (4, ["linux", "windows"])
    doc = simulate_json(capsys, "--repo", str(two_sets), "--trace", str(csv), "--set",
                        "windows")
    # with --set, a row with no set is on the (first) set chosen
    assert (doc["trace"]["jobs"], doc["trace"]["sets"]) == (3, ["windows"])
    doc = simulate_json(capsys, "--repo", str(two_sets), "--trace", str(csv), "--set", "linux")
    assert (doc["trace"]["jobs"], doc["trace"]["sets"]) == (2, ["linux"])
    only_windows = tmp_path / "windows.csv"
    only_windows.write_text("0,60,windows\n")
    code, out, err = run(capsys, "simulate", "--repo", str(two_sets), "--trace",
                         str(only_windows), "--set", "linux")
    assert (code, out, err) == (1, "", f"error: {only_windows}: holds no jobs of linux\n")


def test_repeated_policy_presets_and_inline(capsys, tmp_path: Path,  # type: ignore[no-untyped-def]
                                            monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    inline = "{minReplicas: 0, maxReplicas: 200, buffer: 2, scaleDownDelay: 5m}"
    doc = simulate_json(capsys, "--synthetic", "steady", "--hours", "1", "--policy", "warm",
                        "--policy", inline, "--policy", "default")
    results = doc["results"]
    assert [(r["name"], r["policy"]) for r in results[:3]] == [
        ("gitscale", "warm"), ("gitscale", inline), ("gitscale", "default")]
    assert [r["name"] for r in results[3:]] == STRATEGIES[1:]
    # the buffer keeps idle runners: more idle minutes, shorter waits than buffer 0
    buffer_0 = simulate_json(capsys, "--synthetic", "steady", "--hours", "1", "--policy",
                             "{maxReplicas: 200, scaleDownDelay: 5m}", "--no-baselines")
    assert results[1]["idle_runner_minutes"] > buffer_0["results"][0]["idle_runner_minutes"]
    assert results[1]["wait_p50"] < buffer_0["results"][0]["wait_p50"]


@pytest.mark.parametrize("policy, message", [
    ("{buffer: -1}", "--policy '{buffer: -1}'"),
    ("{maxReplicas: lots}", "--policy '{maxReplicas: lots}'"),
    ("{minReplicas: 5, maxReplicas: 2}", "minReplicas 5 is greater than maxReplicas 2"),
    ("{scaleDownDelay: soon}", "--policy '{scaleDownDelay: soon}'"),
    ("{noSuchKey: 1}", "--policy '{noSuchKey: 1}'"),
    ("{forecast: {quantile: .nan, lookback: 7d, days: daily}}",
     "forecast.quantile: nan is not a number"),
    ("{buffer: 2", "--policy '{buffer: 2'"),
    ("no-such-preset", "unknown policy preset 'no-such-preset'"),
])
def test_bad_policy_exits_1_naming_policy(capsys, tmp_path: Path, monkeypatch,  # type: ignore[no-untyped-def]
                                          policy: str, message: str) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "simulate", "--synthetic", "steady", "--hours", "1",
                         "--policy", "default", "--policy", policy)
    assert (code, out) == (1, "")
    assert err.startswith("error: --policy") and message in err
    assert "Traceback" not in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("argv, message", [
    ([], "error: simulate: give one of --trace FILE, --synthetic SHAPE or --from-history"),
    (["--synthetic", "steady", "--trace", "x.csv"], "error: simulate: give one of"),
    (["--synthetic", "steady", "--hours", "0"], "error: --hours: 0 is not between 0 and 672"),
    (["--synthetic", "steady", "--hours", "700"], "error: --hours: 700 is not between"),
    (["--synthetic", "steady", "--interval", "0s"], "error: --interval: must be at least 1s"),
    (["--synthetic", "steady", "--sync-poll", "0s"], "error: --sync-poll: must be at least 1s"),
    (["--synthetic", "steady", "--sync-delay", "soon"], "error: --sync-delay: 'soon' is not a"),
    (["--synthetic", "steady", "--pod-start", "-5s"], "error: --pod-start: '-5s' is not a"),
    (["--synthetic", "wavy"], "Invalid value for '--synthetic'"),
    (["--synthetic", "steady", "--scaler-clock-offset", "nan"],
     "error: --scaler-clock-offset: nan is not a number of seconds between -3600 and 3600"),
    (["--synthetic", "steady", "--scaler-clock-offset", "-3601"],
     "error: --scaler-clock-offset: -3601 is not"),
])
def test_bad_options(capsys, tmp_path: Path, monkeypatch, argv: list[str],  # type: ignore[no-untyped-def]
                     message: str) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "simulate", *argv)
    assert (code, out) == (1, "")
    assert message in err and "Traceback" not in err


def test_from_history(capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    checkout = config_repo(tmp_path, {"linux": "{minReplicas: 0, maxReplicas: 10, "
                                                "scaleDownDelay: 0s}"})
    code, _, err = run(capsys, "simulate", "--repo", str(checkout), "--from-history")
    assert (code, err) == (1, "error: --from-history: no scaling commits with demand counts "
                              "found\n")
    # queued + running: 0 → 3 (3 arrive) → 5 (2 more) → 2 (3 complete) → 0 → 0 (patch 0)
    for clock, queued, running in [("09:00:00", 0, 0), ("09:01:00", 3, 0), ("09:02:00", 1, 4),
                                   ("09:03:00", 0, 2), ("09:04:00", 0, 0), ("09:05:00", 0, 0)]:
        demand = tmp_path / "demand.yaml"
        demand.write_text(f"linux: {{queued: {queued}, running: {running}}}\n")
        code, _, err = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand),
                           "--now", f"2026-11-23T{clock}Z")
        assert code == 0, err
    code, out, _ = run(capsys, "history", "--repo", str(checkout), "--output", "json")
    assert len(json.loads(out)) == 6  # every pass wrote: one trailer each
    doc = simulate_json(capsys, "--repo", str(checkout), "--from-history")
    assert doc["trace"]["jobs"] == 5
    assert doc["trace"]["name"] == "history (rebuilt from 6 trailers)"
    assert doc["trace"]["start"] == "2026-11-23T09:00:00+00:00"
    assert doc["trace"]["sets"] == ["linux"]
    # since 09:02:30: 0 → 2 (two open jobs, from the first trailer seen) → 0 → 0
    since = simulate_json(capsys, "--repo", str(checkout), "--from-history", "--since",
                          "2026-11-23T09:02:30Z")
    assert since["trace"]["jobs"] == 2
    assert since["trace"]["name"] == "history (rebuilt from 3 trailers)"
    code, _, err = run(capsys, "simulate", "--repo", str(checkout), "--from-history",
                       "--since", "yesterday")
    assert code == 1 and err.startswith("error: --since: 'yesterday' is not an RFC 3339 time")


def test_from_history_replays_commits_of_one_second_in_the_order_they_were_made(
        capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """0 → 3 then 3 → 1 in one second (a pinned --now; two passes that raced), then 1 → 2: 3
    arrive, 2 complete, 1 arrives: 4 jobs. Replayed newest first within the second (git's
    order, kept by a stable sort on time), it was 1 arriving, then 2, then 1 completing: 3."""
    checkout = config_repo(tmp_path, {"linux": "{minReplicas: 0, maxReplicas: 10, "
                                                "scaleDownDelay: 0s}"})
    for clock, queued in [("09:00:00", 3), ("09:00:00", 1), ("09:01:00", 2)]:
        demand = tmp_path / "demand.yaml"
        demand.write_text(f"linux: {{queued: {queued}, running: 0}}\n")
        code, _, err = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand),
                           "--now", f"2026-11-23T{clock}Z")
        assert code == 0, err
    assert git(checkout, "log", "-3", "--format=%cI %s") == "\n".join([
        "2026-11-23T09:01:00+00:00 gitscale: linux 1→2",
        "2026-11-23T09:00:00+00:00 gitscale: linux 3→1",
        "2026-11-23T09:00:00+00:00 gitscale: linux 0→3"])
    doc = simulate_json(capsys, "--repo", str(checkout), "--from-history", "--no-baselines")
    assert doc["trace"]["jobs"] == 4


def test_from_history_until_leaves_out_a_commit_from_a_clock_years_ahead(  # type: ignore[no-untyped-def]
        capsys, tmp_path: Path) -> None:
    """One scaling commit made on a box whose clock ran years ahead made the span too long,
    and --since, the only way out the error named, could not leave it out."""
    checkout = config_repo(tmp_path, {"linux": "{minReplicas: 0, maxReplicas: 10}"})
    for clock, queued in [("09:00:00", 0), ("09:01:00", 3)]:
        demand = tmp_path / "demand.yaml"
        demand.write_text(f"linux: {{queued: {queued}, running: 0}}\n")
        code, _, err = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand),
                           "--now", f"2026-11-23T{clock}Z")
        assert code == 0, err
    message = ("gitscale: linux 0→2\n\nGitscale-Set: linux replicas=2 previous=0 patch=3 "
               "queued=2 running=0 reason=scale-up\n")
    subprocess.run(["git", "commit", "--quiet", "--allow-empty", "-m", message], cwd=checkout,
                   check=True, env={**os.environ, "GIT_COMMITTER_DATE": "2031-01-01T00:00:00Z"})
    code, _, err = run(capsys, "simulate", "--repo", str(checkout), "--from-history")
    assert code == 1 and "to 2031-01-01T00:00:00+00:00); a replay covers at most 366 days: " \
        "give --since or --until" in err, err
    doc = simulate_json(capsys, "--repo", str(checkout), "--from-history", "--until",
                        "2026-12-01T00:00:00Z")
    assert doc["trace"]["name"] == "history (rebuilt from 2 trailers)"
    assert doc["trace"]["jobs"] == 3
    code, _, err = run(capsys, "simulate", "--repo", str(checkout), "--from-history", "--since",
                       "2026-12-01T00:00:00Z", "--until", "2026-11-01T00:00:00Z")
    assert (code, err) == (1, "error: --since: 2026-12-01T00:00:00Z is after --until "
                              "2026-11-01T00:00:00Z\n")


def test_a_url_or_a_bare_repo_is_read_through_a_clone(capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """`--repo URL` said "gitscale.yaml: not found in the config repo (run `gitscale init`?)":
    simulate looked for the file in a folder of that name, where every other command clones."""
    checkout = config_repo(tmp_path, {"linux": "{minReplicas: 0, maxReplicas: 10}"})
    (checkout / "policies").mkdir()
    (checkout / "policies/roomy.yaml").write_text("minReplicas: 2\nmaxReplicas: 30\n")
    git(checkout, "add", "policies")
    git(checkout, "commit", "-qm", "a preset of our own")
    git(checkout, "push", "-q")
    for clock, queued in [("09:00:00", 0), ("09:01:00", 3), ("09:02:00", 0)]:
        demand = tmp_path / "demand.yaml"
        demand.write_text(f"linux: {{queued: {queued}, running: 0}}\n")
        code, _, err = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand),
                           "--now", f"2026-11-23T{clock}Z")
        assert code == 0, err
    remote = tmp_path / "remote.git"
    for repo in (str(remote), remote.as_uri()):
        doc = simulate_json(capsys, "--repo", repo, "--from-history", "--policy", "roomy")
        assert doc["trace"]["jobs"] == 3 and doc["trace"]["sets"] == ["linux"], repo
        doc = simulate_json(capsys, "--repo", repo, "--synthetic", "spiky", "--hours", "1",
                            "--no-baselines")
        assert doc["trace"]["sets"] == ["linux"], repo
    code, _, err = run(capsys, "simulate", "--repo", str(remote), "--synthetic", "spiky",
                       "--set", "gpu")
    assert code == 1 and "unknown runner set 'gpu' (known: linux)" in err


def test_jobs_never_started_are_said(capsys, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    argv = ("--synthetic", "spiky", "--hours", "0.5", "--policy", "{maxReplicas: 0}",
            "--no-baselines")
    doc = simulate_json(capsys, *argv)
    gitscale, oracle = doc["results"]
    assert gitscale["never_started"] == doc["trace"]["jobs"] > 0 and oracle["never_started"] == 0
    code, out, _ = run(capsys, "simulate", *argv)
    assert code == 0
    assert out.splitlines()[-1] == (f"jobs never started (no runner by the end of the drain "
                                    f"tail): gitscale {gitscale['never_started']}; their wait "
                                    "counts until then")
    # every job runs when some runner can take it: nothing to say
    code, out, _ = run(capsys, "simulate", "--synthetic", "spiky", "--hours", "0.5")
    assert code == 0 and "never started" not in out


def test_weekly_with_a_forecast_policy_reported_from_day_8(capsys, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                           monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    doc = simulate_json(capsys, "--synthetic", "weekly", "--seed", "4", "--hours", "192",
                        "--report-from", "2026-01-12T00:00:00Z", "--no-baselines", "--policy",
                        "{maxReplicas: 200, scaleDownDelay: 5m}", "--policy",
                        "{maxReplicas: 200, scaleDownDelay: 5m, forecast: {lookback: 7d}}")
    assert doc["trace"]["hours"] == 192 and doc["trace"]["start"] == "2026-01-05T00:00:00+00:00"
    assert doc["settings"]["report_from"] == 7 * 86400
    reactive, forecast, oracle = doc["results"]
    assert reactive["jobs"] == forecast["jobs"] == oracle["jobs"] < 160  # day 8's jobs only
    assert forecast["wait_p95"] < reactive["wait_p95"]
    assert forecast["commits_per_hour"] == round(forecast["commits"] / 24, 1)


def test_report_from_outside_the_trace_is_refused(capsys, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                  monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "simulate", "--synthetic", "steady", "--hours", "1",
                       "--report-from", "2h")
    assert code == 1 and "--report-from" in err and "not within the trace" in err


def test_limits_max_total_replicas_of_the_config_is_simulated(capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """simulate decides as a pass does, under gitscale.yaml's limits.maxTotalReplicas too (it
    was left out: 4 jobs of 10 minutes on each of two sets all started within a minute under a
    total of 2; with it, two run at a time, so the last start 20 minutes later)."""
    root = config_dir(tmp_path / "config", {"linux": "{maxReplicas: 20}",
                                            "windows": "{maxReplicas: 20}"})
    (root / "gitscale.yaml").write_text("limits: {maxTotalReplicas: 2}\n"
                                        + (root / "gitscale.yaml").read_text())
    csv = tmp_path / "jobs.csv"
    csv.write_text("".join(f"0,10m,{name}\n" for name in ("linux", "windows") for _ in range(4)))
    doc = simulate_json(capsys, "--repo", str(root), "--trace", str(csv), "--no-baselines")
    assert doc["settings"]["max_total_replicas"] == 2
    gitscale = doc["results"][0]
    # two at a time: the last two start once three runs of 10 minutes have ended (each slot
    # refilled a decision, a sync and a pod start later), not within a minute
    assert 3 * 600 < gitscale["wait_max"] < 4 * 600
    assert gitscale["wait_p50"] > 600
