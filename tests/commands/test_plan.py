"""`plan`: exit codes, text, JSON with RFC 6902 patches that jsonpatch can apply."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonpatch
import pytest
import yaml

from gitscale.config.load import ObjectRef
from gitscale.plan.cache import StateCache
from tests.helpers import RUNNERSET, git, make_repo, run, simple_config

NOW = "2026-11-21T09:00:00Z"


def two_sets(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 1, maxReplicas: 3, buffer: 1}",
                                        "gpu": "default"}),
        "sets/linux.yaml": "# keep me\n" + RUNNERSET.format(name="linux", replicas=1),
        "sets/gpu.yaml": RUNNERSET.format(name="gpu", replicas=0),
        "demand.yaml": "linux: {queued: 2, running: 0}\ngpu: {queued: 0, running: 0}\n",
    })


def test_plan_json_patch_applies_to_old_object(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout = two_sets(tmp_path)
    head = git(checkout, "rev-parse", "HEAD")
    code, out, err = run(capsys, "plan", "--repo", str(checkout), "--now", NOW, "--output", "json")
    assert code == 2, err
    doc = json.loads(out)
    assert doc["format_version"] == 1
    assert doc["base_commit"] == head
    assert doc["now"] == NOW
    by_set = {c["set"]: c for c in doc["changes"]}
    assert set(by_set) == {"linux", "gpu"}  # gpu: first write forces the state
    linux = by_set["linux"]
    assert linux["file"] == "sets/linux.yaml"
    assert linux["from"] == {"replicas": 1, "patchID": None, "effectiveTime": None, "backlog": 0}
    assert linux["to"] == {"replicas": 3, "patchID": 0, "effectiveTime": NOW, "backlog": 0}
    assert linux["reason"] == "first-write"
    assert linux["demand"] == {"queued": 2, "running": 0}
    old = yaml.safe_load((checkout / "sets/linux.yaml").read_text())
    new = jsonpatch.apply_patch(old, linux["patch"])
    assert new["spec"]["replicas"] == 3 and new["spec"]["patchID"] == 0
    assert new["spec"]["template"] == old["spec"]["template"]
    assert {op["path"] for op in linux["patch"]} >= {"/spec/replicas", "/spec/patchID",
                                                     "/spec/effectiveTime"}
    # plan wrote nothing
    assert git(checkout, "status", "--porcelain") == ""
    assert git(checkout, "rev-parse", "HEAD") == head


def test_plan_patch_after_reconcile_changes(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout = two_sets(tmp_path)
    assert run(capsys, "reconcile", "--repo", str(checkout), "--now", NOW)[0] == 0
    demand = tmp_path / "d.yaml"
    demand.write_text("linux: {queued: 0, running: 0}\ngpu: {queued: 4, running: 1}\n")
    code, out, _ = run(capsys, "plan", "--repo", str(checkout), "--demand", str(demand),
                       "--now", "2026-11-21T10:00:00Z", "--output", "json")
    assert code == 2
    doc = json.loads(out)
    for change in doc["changes"]:
        old = yaml.safe_load((checkout / change["file"]).read_text())
        new = jsonpatch.apply_patch(old, change["patch"])
        assert new["spec"]["replicas"] == change["to"]["replicas"]
        assert new["spec"]["patchID"] == change["to"]["patchID"]
    gpu = next(c for c in doc["changes"] if c["set"] == "gpu")
    assert (gpu["from"]["replicas"], gpu["to"]["replicas"]) == (0, 5)
    assert (gpu["from"]["patchID"], gpu["to"]["patchID"]) == (0, 1)


def test_plan_writes_nothing_to_git_and_the_state_cache_learns_the_pass(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, _isolated_cache: Path) -> None:
    """What `plan` does with the state cache: it applies the pass's cache writes (the manifest
    states it read, the answers that wrote nothing) and saves them, as `reconcile` would, so
    the next pass reads and decides less. Nothing goes to git, here or on the remote."""
    checkout = two_sets(tmp_path)
    remote = tmp_path / "remote.git"
    assert run(capsys, "reconcile", "--repo", str(checkout), "--now", NOW)[0] == 0
    (_isolated_cache / "manifest-state.marshal").unlink()  # what that pass taught it
    heads = (git(checkout, "rev-parse", "HEAD"), git(remote, "rev-parse", "main"))
    code, out, err = run(capsys, "plan", "--repo", str(checkout), "--now", NOW)
    assert code == 0 and "Plan: 0 to change, 2 unchanged" in out, out + err
    assert (git(checkout, "rev-parse", "HEAD"), git(remote, "rev-parse", "main")) == heads
    assert git(checkout, "status", "--porcelain") == ""
    cache = StateCache.load(_isolated_cache)
    for name in ("linux", "gpu"):
        blob = git(checkout, "rev-parse", f"HEAD:sets/{name}.yaml")
        assert cache.knows(blob, ObjectRef()), name
    assert sorted(cache.settled) == ["gpu", "linux"]
    # a plan that would write: the manifests it read are learnt, no answer for those sets
    (_isolated_cache / "manifest-state.marshal").unlink()
    demand = tmp_path / "more.yaml"
    demand.write_text("linux: {queued: 2, running: 0}\ngpu: {queued: 3, running: 0}\n")
    code, out, _ = run(capsys, "plan", "--repo", str(checkout), "--demand", str(demand),
                       "--now", NOW)
    assert code == 2 and "~ gpu" in out
    assert (git(checkout, "rev-parse", "HEAD"), git(remote, "rev-parse", "main")) == heads
    cache = StateCache.load(_isolated_cache)
    assert cache.knows(git(checkout, "rev-parse", "HEAD:sets/gpu.yaml"), ObjectRef())
    assert sorted(cache.settled) == ["linux"]


def test_plan_exit_codes_and_text(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout = two_sets(tmp_path)
    code, out, _ = run(capsys, "plan", "--repo", str(checkout), "--now", NOW)
    assert code == 2
    assert "~ linux" in out and "1 → 3" in out
    assert "--- a/sets/linux.yaml" in out and "+  replicas: 3" in out
    assert "Plan: 2 to change" in out
    assert run(capsys, "reconcile", "--repo", str(checkout), "--now", NOW)[0] == 0
    code, out, _ = run(capsys, "plan", "--repo", str(checkout), "--now", NOW)
    assert code == 0, out
    assert "Plan: 0 to change, 2 unchanged" in out


def test_plan_on_bare_repo_url_path(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    two_sets(tmp_path)
    code, out, _ = run(capsys, "plan", "--repo", str(tmp_path / "remote.git"), "--now", NOW,
                       "--output", "json")
    assert code == 2
    assert len(json.loads(out)["changes"]) == 2


def test_what_if_at_nine(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """"What if 40 jobs queue at 9:00?" with a business-hours schedule raising max."""
    policy = ("{minReplicas: 0, maxReplicas: 10, schedules: [{name: day, "
              "start: '2026-11-23T08:00:00Z', duration: 10h, recurrence: 'FREQ=DAILY', "
              "maxReplicas: 50}]}")
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": policy}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=0),
        "demand.yaml": "linux: {queued: 40, running: 0}\n",
    })
    code, out, _ = run(capsys, "plan", "--repo", str(checkout), "--output", "json",
                       "--now", "2026-11-23T09:00:00Z")
    assert json.loads(out)["changes"][0]["to"]["replicas"] == 40
    code, out, _ = run(capsys, "plan", "--repo", str(checkout), "--output", "json",
                       "--now", "2026-11-23T06:00:00Z")
    assert json.loads(out)["changes"][0]["to"]["replicas"] == 10


def _plan_line(out: str, name: str) -> str:
    return next(line for line in out.splitlines() if line[2:].split(" ", 1)[0] == name)



def _held(tmp_path: Path, capsys) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    """linux scaled 1→3 at NOW (scaleDownDelay 10m) and gpu left at 0, and a demand file
    where nothing waits: the set a plan five minutes later holds."""
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 1, maxReplicas: 3, buffer: 1, "
                                                 "scaleDownDelay: 10m}", "gpu": "default"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=1),
        "sets/gpu.yaml": RUNNERSET.format(name="gpu", replicas=0),
        "demand.yaml": "linux: {queued: 2, running: 0}\ngpu: {queued: 0, running: 0}\n",
    })
    assert run(capsys, "reconcile", "--repo", str(checkout), "--now", NOW)[0] == 0  # linux 1→3
    quiet = tmp_path / "quiet.yaml"
    quiet.write_text("linux: {queued: 0, running: 0}\ngpu: {queued: 0, running: 0}\n")
    return checkout, quiet

def test_an_unchanged_set_says_why_when_it_is_held_drained_or_at_max(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    """Text `plan` gives the reason JSON's detail gives, on the line of a set it leaves alone
    for a reason worth saying; a plain unchanged set's line stays short."""
    checkout, quiet = _held(tmp_path, capsys)
    code, out, _ = run(capsys, "plan", "--repo", str(checkout), "--demand", str(quiet),
                       "--now", "2026-11-21T09:05:00Z")
    assert code == 0, out
    assert _plan_line(out, "linux").endswith(
        "unchanged: scale-down held until 2026-11-21 09:10:00 UTC (scaleDownDelay)")
    assert _plan_line(out, "gpu").split() == ["gpu", "0", "unchanged"]

    busy = tmp_path / "busy.yaml"
    busy.write_text("linux: {queued: 7, running: 3}\ngpu: {queued: 0, running: 0}\n")
    assert run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(busy),
               "--now", "2026-11-21T09:20:00Z")[0] == 0
    code, out, _ = run(capsys, "plan", "--repo", str(checkout), "--demand", str(busy),
                       "--now", "2026-11-21T09:20:30Z")
    assert code == 0, out
    assert _plan_line(out, "linux").endswith(
        "unchanged: at max 3; demand 10 (7 queued, 3 running)")

    assert run(capsys, "drain", "--repo", str(checkout), "linux",
               "--now", "2026-11-21T09:30:00Z")[0] == 0
    waiting = tmp_path / "waiting.yaml"
    waiting.write_text("linux: {queued: 8, running: 0}\ngpu: {queued: 0, running: 0}\n")
    code, out, _ = run(capsys, "plan", "--repo", str(checkout), "--demand", str(waiting),
                       "--now", "2026-11-21T09:31:00Z")
    assert code == 0, out
    assert _plan_line(out, "linux").endswith(
        "unchanged: drained: held at 0 until `gitscale drain --resume`; demand 8 (8 queued, "
        "0 running)")
    assert "Plan: 0 to change, 2 unchanged" in out


CACHED = "(the detail as the state cache kept it)"


def _plan_from_the_cache(capsys, checkout: Path, cache_dir: Path, demand: Path, at: str,  # type: ignore[no-untyped-def]
                         again: str) -> tuple[str, dict]:  # type: ignore[type-arg]
    """`plan` at ``at``, which settles every set (nothing to write), then `plan` text and JSON
    at ``again``, a new run that takes each answer from the state cache on disk. The detail
    text in the cache is replaced first: what the notes say comes from the cached values."""
    from gitscale.plan.cache_format import dump_state, load_state

    assert run(capsys, "plan", "--repo", str(checkout), "--demand", str(demand),
               "--now", at)[0] == 0
    state = cache_dir / "manifest-state.marshal"
    stamp, rows, jobs, settled, series = load_state(state.read_bytes())
    assert sorted(settled) == ["gpu", "linux"]
    settled = {name: row[:10] + (CACHED,) + row[11:] for name, row in settled.items()}
    state.write_bytes(dump_state((stamp, rows, jobs, settled, series)) or b"")
    code, text, err = run(capsys, "plan", "--repo", str(checkout), "--demand", str(demand),
                          "--now", again)
    assert code == 0 and err == "", err
    code, out, err = run(capsys, "plan", "--repo", str(checkout), "--demand", str(demand),
                         "--now", again, "--output", "json")
    assert code == 0, err
    linux = {u["set"]: u for u in json.loads(out)["unchanged"]}["linux"]
    assert linux["detail"] == CACHED  # taken from the cache, not decided again
    return text, linux


def test_an_unchanged_set_taken_from_the_state_cache_still_says_why(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, _isolated_cache: Path) -> None:
    """The notes of a set whose answer a later CLI run takes from the state cache (held,
    at max, drained) are those of deciding it anew; JSON's ``why`` has them as values."""
    checkout, quiet = _held(tmp_path, capsys)
    text, linux = _plan_from_the_cache(capsys, checkout, _isolated_cache, quiet,
                                       "2026-11-21T09:05:00Z", "2026-11-21T09:06:00Z")
    assert _plan_line(text, "linux").endswith(
        "unchanged: scale-down held until 2026-11-21 09:10:00 UTC (scaleDownDelay)")
    assert _plan_line(text, "gpu").split() == ["gpu", "0", "unchanged"]
    assert linux["why"] == {"held_until": "2026-11-21T09:10:00Z", "capped": None,
                            "drained": False, "reaffirm_at": None}

    busy = tmp_path / "busy.yaml"
    busy.write_text("linux: {queued: 7, running: 3}\ngpu: {queued: 0, running: 0}\n")
    assert run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(busy),
               "--now", "2026-11-21T09:20:00Z")[0] == 0
    text, linux = _plan_from_the_cache(capsys, checkout, _isolated_cache, busy,
                                       "2026-11-21T09:20:30Z", "2026-11-21T09:21:00Z")
    assert _plan_line(text, "linux").endswith(
        "unchanged: at max 3; demand 10 (7 queued, 3 running)")
    assert linux["why"] == {"held_until": None, "capped": {"by": "maxReplicas", "at": 3},
                            "drained": False, "reaffirm_at": None}

    assert run(capsys, "drain", "--repo", str(checkout), "linux",
               "--now", "2026-11-21T09:30:00Z")[0] == 0
    waiting = tmp_path / "waiting.yaml"
    waiting.write_text("linux: {queued: 8, running: 0}\ngpu: {queued: 0, running: 0}\n")
    text, linux = _plan_from_the_cache(capsys, checkout, _isolated_cache, waiting,
                                       "2026-11-21T09:31:00Z", "2026-11-21T09:32:00Z")
    assert _plan_line(text, "linux").endswith(
        "unchanged: drained: held at 0 until `gitscale drain --resume`; demand 8 (8 queued, "
        "0 running)")
    assert linux["why"] == {"held_until": None, "capped": None, "drained": True,
                            "reaffirm_at": None}


def test_a_set_capped_by_the_global_limit_says_so_in_text_and_json(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": "limits: {maxTotalReplicas: 4}\n" + simple_config(
            {"a": "{maxReplicas: 10}", "b": "{maxReplicas: 10}", "c": "{maxReplicas: 10}"}),
        "sets/a.yaml": RUNNERSET.format(name="a", replicas=0),
        "sets/b.yaml": RUNNERSET.format(name="b", replicas=0),
        "sets/c.yaml": RUNNERSET.format(name="c", replicas=0),
        "demand.yaml": "a: {queued: 6, running: 0}\nb: {queued: 2, running: 0}\n"
                       "c: {queued: 0, running: 0}\n",
    })
    code, out, err = run(capsys, "plan", "--repo", str(checkout), "--now", NOW,
                         "--output", "json")
    assert code == 2, err
    whys = {c["set"]: c["why"] for c in json.loads(out)["changes"]}
    assert whys["a"] == {"held_until": None, "drained": False, "reaffirm_at": None,
                         "capped": {"by": "limits.maxTotalReplicas", "at": 3}}
    assert whys["b"]["capped"] == {"by": "limits.maxTotalReplicas", "at": 1}
    assert whys["c"] == {"held_until": None, "capped": None, "drained": False,
                         "reaffirm_at": None}
    assert run(capsys, "reconcile", "--repo", str(checkout), "--now", NOW)[0] == 0
    code, out, err = run(capsys, "plan", "--repo", str(checkout), "--now", NOW)
    assert code == 0, err
    assert _plan_line(out, "a").endswith(
        "unchanged: capped at 3 by limits.maxTotalReplicas; demand 6 (6 queued, 0 running)")
    assert _plan_line(out, "b").endswith(
        "unchanged: capped at 1 by limits.maxTotalReplicas; demand 2 (2 queued, 0 running)")
    assert _plan_line(out, "c").split() == ["c", "0", "unchanged"]


def test_plan_set_shows_only_the_sets_named_and_exits_on_them(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys) -> None:
    checkout = two_sets(tmp_path)
    assert run(capsys, "reconcile", "--repo", str(checkout), "--now", NOW)[0] == 0
    more = tmp_path / "more.yaml"
    more.write_text("linux: {queued: 2, running: 0}\ngpu: {queued: 2, running: 0}\n")
    later = "2026-11-21T09:01:00Z"
    code, out, _ = run(capsys, "plan", "--repo", str(checkout), "--demand", str(more),
                       "--now", later, "--set", "linux")
    assert code == 0, out  # gpu's change is pending, but only linux is shown
    assert "gpu" not in out and "sets/gpu.yaml" not in out
    assert "Plan: 0 to change, 1 unchanged" in out
    code, out, _ = run(capsys, "plan", "--repo", str(checkout), "--demand", str(more),
                       "--now", later, "--set", "gpu", "--set", "linux", "--output", "json")
    assert code == 2
    doc = json.loads(out)
    assert [c["set"] for c in doc["changes"]] == ["gpu"]
    assert [u["set"] for u in doc["unchanged"]] == ["linux"]
    code, out, err = run(capsys, "plan", "--repo", str(checkout), "--set", "gpx")
    assert code == 1 and out == ""
    assert "no runner set named 'gpx' (known: linux, gpu)" in err


@pytest.mark.skipif(shutil.which("kubeconform") is not None,
                    reason="the in-process checker's words (kubeconform says its own)")
def test_a_change_reconcile_would_refuse_is_shown_and_exits_1(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                              _isolated_cache: Path) -> None:
    """A manifest that fails schema validation: the change is shown, each problem is said at
    its line, and the exit is 1, not 2 ("changes pending": a change that cannot land); the
    state cache learns nothing, as from the reconcile that would refuse it."""
    manifest = RUNNERSET.format(name="linux", replicas=1).replace(
        "  platform: github\n", "  platform: github\n  repicas: 3\n")
    checkout = make_repo(tmp_path, {"gitscale.yaml": simple_config({"linux": "default"}),
                                    "sets/linux.yaml": manifest,
                                    "demand.yaml": "linux: {queued: 3, running: 0}\n"})
    code, out, err = run(capsys, "plan", "--repo", str(checkout), "--now", NOW)
    assert code == 1, out + err
    assert "~ linux" in out and "+++ b/sets/linux.yaml" in out
    assert err == ("error: sets/linux.yaml:8: spec: unknown field 'repicas': did you mean "
                   "'replicas'? (reconcile refuses to commit this file until then)\n")
    assert not (_isolated_cache / "manifest-state.marshal").exists()
    assert run(capsys, "reconcile", "--repo", str(checkout), "--now", NOW)[0] == 1
