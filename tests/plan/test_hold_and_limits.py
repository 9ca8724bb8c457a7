"""Holding a set (gitscale.dev/paused) and sharing limits.maxTotalReplicas (issue 11, item 5)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gitscale.core.limits import share, share_ahead
from tests.helpers import RUNNERSET, git, make_repo, run, simple_config

PAUSED = RUNNERSET.replace("metadata:\n  name: {name}\n",
                           "metadata:\n  name: {name}\n  annotations:\n"
                           "    gitscale.dev/paused: \"true\"\n")


def test_paused_set_is_left_alone_and_plan_says_so(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"a": "default", "b": "default"}),
        "sets/a.yaml": PAUSED.format(name="a", replicas=1),
        "sets/b.yaml": RUNNERSET.format(name="b", replicas=1),
        "demand.yaml": "a: {queued: 7, running: 0}\nb: {queued: 2, running: 0}\n",
    })
    before = (checkout / "sets/a.yaml").read_text()
    code, out, _ = run(capsys, "plan", "--repo", str(checkout), "--output", "json")
    assert code == 2
    document = json.loads(out)
    assert [c["set"] for c in document["changes"]] == ["b"]
    assert {"set": "a", "reason": "paused"}.items() <= document["unchanged"][0].items()
    code, out, _ = run(capsys, "plan", "--repo", str(checkout))
    assert any(line.split()[:1] == ["a"] and line.rstrip().endswith(
        'paused: annotation gitscale.dev/paused: "true"; demand 7 (7 queued, 0 running)')
               for line in out.splitlines())
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, err
    assert (checkout / "sets/a.yaml").read_text() == before
    assert "a:" not in git(checkout, "log", "-1", "--format=%s")


@pytest.mark.parametrize(("total", "wants", "fixed", "expected"), [
    pytest.param(20, {"a": (0, 30), "b": (0, 10)}, 0, {"a": 15, "b": 5}, id="proportional"),
    pytest.param(50, {"a": (0, 30), "b": (0, 10)}, 0, {"a": 30, "b": 10}, id="under-cap"),
    pytest.param(10, {"a": (2, 30), "b": (2, 10)}, 0, {"a": 7, "b": 3}, id="mins-kept-first"),
    pytest.param(10, {"a": (0, 5), "b": (0, 5)}, 4, {"a": 3, "b": 3}, id="fixed-counts"),
    pytest.param(3, {"a": (0, 1), "b": (0, 1), "c": (0, 1), "d": (0, 1)}, 0,
                 {"a": 1, "b": 1, "c": 1, "d": 0}, id="remainders-by-name"),
    # 10 of 64 + 36: exactly 6.4 and 3.6; the odd replica goes to the larger remainder (b),
    # not to the larger share nor to the first name
    pytest.param(10, {"a": (0, 64), "b": (0, 36)}, 0, {"a": 6, "b": 4},
                 id="largest-remainder-first"),
    pytest.param(10, {"a": (0, 36), "b": (0, 64)}, 0, {"a": 4, "b": 6},
                 id="largest-remainder-first-mirrored"),
    # held sets (paused, demand unknown) leave less than the minimums: each keeps its minimum
    pytest.param(10, {"a": (3, 3), "b": (3, 3)}, 8, {"a": 3, "b": 3},
                 id="fixed-leaves-less-than-the-minimums"),
    pytest.param(10, {"a": (3, 3), "b": (3, 5)}, 8, {"a": 3, "b": 3},
                 id="fixed-leaves-only-the-minimums"),
])
def test_share(total: int, wants: dict[str, tuple[int, int]], fixed: int,
               expected: dict[str, int]) -> None:
    caps = share(total, wants, fixed)
    assert caps == expected
    assert sum(caps.values()) <= max(total - fixed, sum(lo for lo, _ in wants.values()))


@pytest.mark.parametrize(("total", "wants", "ahead", "fixed", "expected"), [
    pytest.param(30, {"a": (0, 0), "b": (0, 30)}, {"a": 30}, 0, {"a": 0, "b": 30},
                 id="waiting-jobs-before-a-cushion"),
    pytest.param(50, {"a": (0, 0), "b": (0, 30)}, {"a": 30}, 0, {"a": 20, "b": 30},
                 id="the-cushion-gets-what-is-left"),
    pytest.param(40, {"a": (0, 10), "b": (0, 10)}, {"a": 30, "b": 10}, 0,
                 {"a": 25, "b": 15}, id="cushions-share-the-rest-in-proportion"),
    pytest.param(100, {"a": (0, 10), "b": (0, 10)}, {"a": 30, "b": 10}, 0,
                 {"a": 40, "b": 20}, id="under-the-cap-everything"),
    pytest.param(20, {"a": (0, 30), "b": (0, 10)}, {"a": 5}, 0, {"a": 15, "b": 5},
                 id="demand-over-the-cap-leaves-no-cushion"),
    pytest.param(30, {"a": (0, 10), "b": (0, 10)}, {"a": 20}, 5, {"a": 15, "b": 10},
                 id="fixed-counts"),
    pytest.param(20, {"a": (0, 10), "b": (0, 10)}, {"a": 5}, 10, {"a": 5, "b": 5},
                 id="fixed-counts-against-demand-too"),
    pytest.param(10, {"a": (0, 5), "b": (0, 0)}, {"a": 1, "b": 0}, 0, {"a": 6, "b": 0},
                 id="a-cushion-of-one"),
])
def test_share_ahead_serves_demand_first(total: int, wants: dict[str, tuple[int, int]],
                                         ahead: dict[str, int], fixed: int,
                                         expected: dict[str, int]) -> None:
    caps = share_ahead(total, wants, ahead, fixed)
    assert caps == expected
    assert sum(caps.values()) <= total - fixed


def test_a_forecast_set_does_not_take_runners_from_waiting_jobs(tmp_path: Path,
                                                                capsys) -> None:  # type: ignore[no-untyped-def]
    """limits.maxTotalReplicas 30: set a's history says 30 jobs arrive at 09:00, set b has 30
    jobs waiting now. b gets its 30; a's cushion waits for room."""
    from datetime import timedelta

    from tests.record.test_series import START, scaling_commit

    config = "limits: {maxTotalReplicas: 30}\n" + simple_config(
        {"a": "{maxReplicas: 100, forecast: {}}", "b": "{maxReplicas: 100}"})
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": config,
        "sets/a.yaml": RUNNERSET.format(name="a", replicas=0),
        "sets/b.yaml": RUNNERSET.format(name="b", replicas=0),
        "demand.yaml": "a: {queued: 0, running: 0}\nb: {queued: 30, running: 0}\n",
    })
    for day in (0, 7):
        monday = START + timedelta(days=day)
        scaling_commit(checkout, monday + timedelta(hours=8), 0, 0, name="a")
        scaling_commit(checkout, monday + timedelta(hours=9), 30, 0, name="a")
    now = (START + timedelta(days=14, hours=8, minutes=59)).isoformat()

    def planned() -> dict[str, int]:
        code, out, err = run(capsys, "plan", "--repo", str(checkout), "--now", now,
                             "--output", "json")
        assert code == 2, err
        return {c["set"]: c["to"]["replicas"] for c in json.loads(out)["changes"]}

    assert planned().items() >= {"b": 30}.items()
    assert planned().get("a", 0) == 0
    # with room for both, a's cushion is there too
    (checkout / "gitscale.yaml").write_text(config.replace("30}", "60}", 1))
    assert planned() == {"a": 30, "b": 30}


def test_total_cap_is_shared_and_the_commit_says_so(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    config = "limits: {maxTotalReplicas: 20}\n" + simple_config(
        {"a": "{maxReplicas: 100}", "b": "{maxReplicas: 100}"})
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": config,
        "sets/a.yaml": RUNNERSET.format(name="a", replicas=0),
        "sets/b.yaml": RUNNERSET.format(name="b", replicas=0),
        "demand.yaml": "a: {queued: 30, running: 0}\nb: {queued: 10, running: 0}\n",
    })
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, err
    replicas = {n: yaml.safe_load((checkout / f"sets/{n}.yaml").read_text())["spec"]["replicas"]
                for n in "ab"}
    assert replicas == {"a": 15, "b": 5}
    message = git(checkout, "log", "-1", "--format=%B")
    assert message.count("limits.maxTotalReplicas") == 2


def test_total_cap_below_the_minimums_is_a_config_error(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    config = "limits:\n  maxTotalReplicas: 3\n" + simple_config(
        {"a": "{minReplicas: 2, maxReplicas: 9}", "b": "{minReplicas: 2, maxReplicas: 9}"})
    checkout = make_repo(tmp_path, {"gitscale.yaml": config,
                                    "sets/a.yaml": RUNNERSET.format(name="a", replicas=0),
                                    "sets/b.yaml": RUNNERSET.format(name="b", replicas=0),
                                    "demand.yaml": "a: {queued: 0, running: 0}\n"})
    code, _, err = run(capsys, "plan", "--repo", str(checkout))
    assert code == 1
    assert "gitscale.yaml:2: limits.maxTotalReplicas 3 is less than" in err
    assert "Traceback" not in err


def test_the_sets_serve_scales_count_against_the_total(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The cap is the file's, whoever scales each set: a set `gitscale serve` scales (its
    reservations file says `served: [a]`) keeps what it has in a pass of `plan`/`reconcile`,
    and that counts against limits.maxTotalReplicas, as a paused set's does. (Both were left
    out: b took all 10 beside a's 6.)"""
    config = "limits: {maxTotalReplicas: 10}\n" + simple_config(
        {"a": "{maxReplicas: 100}", "b": "{maxReplicas: 100}"})
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": config,
        "sets/a.yaml": RUNNERSET.format(name="a", replicas=6),
        "sets/b.yaml": RUNNERSET.format(name="b", replicas=0),
        "demand.yaml": "a: {queued: 0, running: 0}\nb: {queued: 10, running: 0}\n",
        ".gitscale/reservations.yaml": "served: [a]\nsets: {}\n",
    })
    code, out, err = run(capsys, "plan", "--repo", str(checkout), "--output", "json")
    assert code == 2, err
    assert {c["set"]: c["to"]["replicas"] for c in json.loads(out)["changes"]} == {"b": 4}
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout))
    assert code == 0, err
    replicas = {n: yaml.safe_load((checkout / f"sets/{n}.yaml").read_text())["spec"]["replicas"]
                for n in "ab"}
    assert replicas == {"a": 6, "b": 4}
    assert "capped at 4 by limits.maxTotalReplicas" in git(checkout, "log", "-1", "--format=%B")


def test_a_serve_batch_counts_the_sets_it_does_not_serve(tmp_path: Path) -> None:
    """The other side: `gitscale serve` plans only the sets it serves, and the polled set's
    6 replicas count against the total of 10 (the 10 queued jobs got all 10)."""
    from datetime import datetime, timedelta, timezone

    from gitscale.core.reservations import Action
    from gitscale.plan.cache import StateCache
    from gitscale.webhooks.batch import batch_plan
    from gitscale.webhooks.delivery import JobEvent

    now = datetime(2026, 11, 27, 9, 0, tzinfo=timezone.utc)
    root = tmp_path / "config"
    (root / "sets").mkdir(parents=True)
    (root / "gitscale.yaml").write_text(
        "limits: {maxTotalReplicas: 10}\nrunnerSets:\n"
        "  - name: linux\n    manifest: sets/linux.yaml\n"
        "    source: {github: {org: octo-org, labels: [self-hosted, linux]}}\n"
        "    policy: {maxReplicas: 100}\n"
        "  - name: batch\n    manifest: sets/batch.yaml\n    source: {file: demand.yaml}\n"
        "    policy: {maxReplicas: 100}\n")
    (root / "sets/linux.yaml").write_text(RUNNERSET.format(name="linux", replicas=0))
    (root / "sets/batch.yaml").write_text(RUNNERSET.format(name="batch", replicas=6))
    events = [JobEvent(job, Action.QUEUED, ("self-hosted", "linux"), "octo-org/app",
                       "octo-org", now) for job in range(1, 11)]
    plan = batch_plan(root, "base", "gitscale.yaml", events, now, timedelta(minutes=10),
                      ".gitscale/reservations.yaml", StateCache.load(tmp_path / "cache"))
    assert {c.name: c.decision.replicas for c in plan.changes} == {"linux": 4}


WRITTEN = RUNNERSET.replace("  replicas: {replicas}\n", "  replicas: {replicas}\n  patchID: 1\n")


@pytest.mark.parametrize(("policy", "total", "expected"), [
    # the delay held a's 10 idle runners beside b's 10 jobs: 15 were written (a 10, b 5)
    pytest.param("{maxReplicas: 100, scaleDownDelay: 10m}", 10, {"a": (0, 0), "b": (10, 1)},
                 id="delay"),
    pytest.param("{maxReplicas: 100, scaleDownDelay: 10m}", 14, {"a": (4, 0), "b": (10, 1)},
                 id="the-delay-keeps-what-is-left"),
    # maxStepDown 2 instead: 14 were written (a 8, b 6)
    pytest.param("{maxReplicas: 100, scaleDownDelay: 0s, maxStepDown: 2}", 10,
                 {"a": (0, 0), "b": (10, 1)}, id="step-down"),
    pytest.param("{maxReplicas: 100, scaleDownDelay: 10m}", 20, {"a": (10, 2), "b": (10, 1)},
                 id="held-counts-fit"),
])
def test_the_total_cap_cuts_held_runners_with_patch_0(
        tmp_path: Path, capsys, policy: str, total: int,  # type: ignore[no-untyped-def]
        expected: dict[str, tuple[int, int]]) -> None:
    """a scales up to 10 for 10 jobs; 2 minutes later they are done and b has 10 queued.
    Under limits.maxTotalReplicas the two never have more than the total written: a's idle
    runners, which the delay or the step limit would keep, go with patch 0 (on patch > 0 the
    controller removes none)."""
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": f"limits: {{maxTotalReplicas: {total}}}\n" + simple_config(
            {"a": policy, "b": "{maxReplicas: 100, scaleDownDelay: 10m}"}),
        "sets/a.yaml": WRITTEN.format(name="a", replicas=0),
        "sets/b.yaml": WRITTEN.format(name="b", replicas=0),
        "demand.yaml": "a: {queued: 10, running: 0}\nb: {queued: 0, running: 0}\n",
    })
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout), "--now",
                       "2026-11-27T09:00:00Z")
    assert code == 0, err
    (checkout / "demand.yaml").write_text("a: {queued: 0, running: 0}\n"
                                          "b: {queued: 10, running: 0}\n")
    git(checkout, "commit", "--quiet", "-am", "demand moves to b")
    git(checkout, "push", "--quiet")
    code, out, err = run(capsys, "plan", "--repo", str(checkout), "--now",
                         "2026-11-27T09:02:00Z", "--output", "json")
    assert code == 2, err
    planned = {c["set"]: c["to"]["replicas"] for c in json.loads(out)["changes"]}
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout), "--now",
                       "2026-11-27T09:02:00Z")
    assert code == 0, err
    specs = {n: yaml.safe_load((checkout / f"sets/{n}.yaml").read_text())["spec"] for n in "ab"}
    assert {n: (s["replicas"], s["patchID"]) for n, s in specs.items()} == expected
    assert planned.items() <= {n: r for n, (r, _) in expected.items()}.items()
    assert sum(s["replicas"] for s in specs.values()) <= total
    message = git(checkout, "log", "-1", "--format=%B")
    if expected["a"][1] == 0:
        assert f"capped at {expected['a'][0]} by limits.maxTotalReplicas: below what the " \
               "scale-down delay held" in message or "step-down limit (-2) kept" in message
        assert "patch 0 so idle runners go now" in message
    else:
        assert "limits.maxTotalReplicas" not in message
