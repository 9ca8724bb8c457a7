"""The state cache: only a speed-up. It can be missing or corrupt, never stale."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gitscale.core.model import NO_WHY, Cap, CapBy, Current, Decision, Demand, Drain, Reason, Why
from gitscale.plan.cache import STATE_FILE, CacheWrites, StateCache
from gitscale.plan.cache_format import STATE_HEADER, _settled_row, dump_state, load_state, \
    why_of, why_row
from gitscale.config.load import ObjectRef
from gitscale.manifest.target import Located, owned_for
from tests.helpers import RUNNERSET, git, make_repo, run, simple_config


def setup(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 20}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=2),
        "demand.yaml": "linux: {queued: 2, running: 0}\n",
    })


def plan_json(capsys, checkout: Path) -> dict:  # type: ignore[no-untyped-def, type-arg]
    code, out, err = run(capsys, "plan", "--repo", str(checkout), "--output", "json",
                         "--now", "2026-11-21T09:00:00Z")
    assert code in (0, 2), err
    return json.loads(out)  # type: ignore[no-any-return]


def test_cache_is_written_and_never_stale(tmp_path: Path, capsys, _isolated_cache: Path) -> None:  # type: ignore[no-untyped-def]
    checkout = setup(tmp_path)
    first = plan_json(capsys, checkout)
    assert first["changes"][0]["from"]["replicas"] == 2
    assert (_isolated_cache / "manifest-state.marshal").is_file()
    # A human edits the manifest: the next pass must see the new value, not the cached one.
    path = checkout / "sets/linux.yaml"
    path.write_text(path.read_text().replace("replicas: 2", "replicas: 7"))
    git(checkout, "commit", "-qam", "by hand")
    again = plan_json(capsys, checkout)
    assert again["changes"][0]["from"]["replicas"] == 7
    # ... and a human edit of gitscale.yaml is seen too.
    config = checkout / "gitscale.yaml"
    config.write_text(config.read_text().replace("maxReplicas: 20", "maxReplicas: 1"))
    git(checkout, "commit", "-qam", "cap")
    capped = plan_json(capsys, checkout)
    assert capped["changes"][0]["to"]["replicas"] == 1


def test_corrupt_cache_is_ignored(tmp_path: Path, capsys, _isolated_cache: Path) -> None:  # type: ignore[no-untyped-def]
    checkout = setup(tmp_path)
    plan_json(capsys, checkout)
    (_isolated_cache / "manifest-state.marshal").write_bytes(b"not a cache")
    assert plan_json(capsys, checkout)["changes"][0]["to"]["replicas"] == 2


def test_a_state_file_of_another_python_or_the_old_pickle_is_only_older(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, _isolated_cache: Path) -> None:
    """marshal's format may change with Python's version: a state file whose first line names
    another is not read (no warning: a cold pass, as after an upgrade), and the next save
    replaces it. The pickle an earlier gitscale kept is removed by the first save."""
    checkout = setup(tmp_path)
    old = _isolated_cache / "manifest-state.pickle"
    old.parent.mkdir(parents=True, exist_ok=True)
    old.write_bytes(b"an earlier gitscale's pickle")
    plan_json(capsys, checkout)
    assert not old.exists()
    state = _isolated_cache / "manifest-state.marshal"
    data = state.read_bytes()
    assert data.startswith(STATE_HEADER)
    other = b"gitscale-state marshal 4 python 3.99\n" + data[len(STATE_HEADER):]
    state.write_bytes(other)
    code, out, err = run(capsys, "plan", "--repo", str(checkout), "--output", "json",
                         "--now", "2026-11-21T09:00:00Z")
    assert code in (0, 2) and "warning" not in err, err
    assert json.loads(out)["changes"][0]["from"]["replicas"] == 2
    assert state.read_bytes() == data  # written again, in this Python's format


def test_the_state_file_holds_what_was_saved(tmp_path: Path) -> None:
    """Saved and loaded again: the same tables, in the same order (the order is the bound's:
    the oldest rows go first), with their types (tuples, frozensets, floats, None)."""
    cache = StateCache(tmp_path / STATE_FILE)
    ref = ObjectRef("RunnerSet", "linux")
    current = Current(2, 7, datetime(2026, 11, 21, 9, tzinfo=timezone.utc), "f00d", False,
                      False, backlog=3)
    owned = owned_for("gitscale.dev/v1alpha1", "RunnerSet")
    assert owned is not None
    writes = CacheWrites()
    for blob in ("b" * 40, "a" * 40):
        writes.looked.append((f"{blob}\0RunnerSet\0linux\0None",
                              Located(0, "gitscale.dev/v1alpha1", "RunnerSet", "linux",
                                      owned, current), True))
    writes.settle("linux", "key", "b" * 40, Demand(1, 2, frozenset({"7", "8"})),
                  datetime(2026, 11, 21, 9, tzinfo=timezone.utc),
                  datetime(2026, 11, 21, 10, tzinfo=timezone.utc),
                  Decision(False, 3, 7, Reason.UNCHANGED, "demand 3"))
    writes.remember_jobs("f00d", frozenset({"7", "8"}))
    cache.apply(writes)
    cache.save()
    again = StateCache.load(tmp_path)
    assert list(again.rows.items()) == list(cache.rows.items())
    assert again.settled == cache.settled and again.jobs == cache.jobs
    assert type(again.settled["linux"][4]) is frozenset
    assert again.settled["linux"][6] == cache.settled["linux"][6] != float("inf")
    assert ref.name == "linux" and again.knows("a" * 40, ref)


def _stored(cache_dir: Path) -> tuple:  # type: ignore[type-arg]
    return load_state((cache_dir / "manifest-state.marshal").read_bytes())  # type: ignore[no-any-return]


def _store(cache_dir: Path, value: object) -> None:
    data = dump_state(value)
    assert data is not None
    (cache_dir / "manifest-state.marshal").write_bytes(data)


@pytest.mark.parametrize("garbage", [
    pytest.param(lambda rows: {key: "garbage" for key in rows}, id="rows-are-strings"),
    pytest.param(lambda rows: {key: row[:5] for key, row in rows.items()}, id="short-rows"),
    pytest.param(lambda rows: "garbage", id="not-a-table"),
])
def test_a_cache_of_the_right_version_holding_garbage_is_one_warning(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, _isolated_cache: Path, garbage) -> None:
    """It loads and has the right stamp, but its rows are not gitscale's: every later run
    crashed (exit 70, a ValueError unpacking a row). Now it is an empty cache and one line."""
    checkout = setup(tmp_path)
    plan_json(capsys, checkout)
    stamp, rows, jobs, settled, series = _stored(_isolated_cache)
    assert rows, "the first plan cached its manifest"
    _store(_isolated_cache, (stamp, garbage(rows), jobs, settled, series))
    for _ in range(2):  # and the run after it (which finds the cache written again) too
        code, out, err = run(capsys, "plan", "--repo", str(checkout), "--output", "json",
                             "--now", "2026-11-21T09:00:00Z")
        assert code in (0, 2), err
        assert json.loads(out)["changes"][0]["from"]["replicas"] == 2
    assert "Traceback" not in err


def test_garbage_is_said_once_then_the_cache_is_good_again(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                           _isolated_cache: Path) -> None:
    checkout = setup(tmp_path)
    plan_json(capsys, checkout)
    stamp, rows, jobs, settled, series = _stored(_isolated_cache)
    _store(_isolated_cache, (stamp, {key: "garbage" for key in rows}, jobs, settled, series))
    code, out, err = run(capsys, "plan", "--repo", str(checkout))
    warnings = [line for line in err.splitlines() if "state cache" in line]
    assert warnings == [f"warning: state cache {_isolated_cache / 'manifest-state.marshal'}: a "
                        "manifest row is not one gitscale writes; starting from an empty one "
                        "(this pass is only slower)"], err
    code, out, err = run(capsys, "plan", "--repo", str(checkout))
    assert "state cache" not in err  # written anew by the pass that warned


def test_a_damaged_state_file_is_one_warning_not_a_crash(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                         _isolated_cache: Path) -> None:
    """marshal is not made for damaged data: bytes flipped in the file took the interpreter
    down (a segmentation fault, every pass until the file was removed). The checksum refuses
    every one of these before marshal reads it."""
    checkout = setup(tmp_path)
    plan_json(capsys, checkout)
    path = _isolated_cache / "manifest-state.marshal"
    good = path.read_bytes()
    body = len(STATE_HEADER) + 9
    for at in range(body, len(good), max(1, (len(good) - body) // 40)):
        damaged = bytearray(good)
        damaged[at] ^= 0xFF
        with pytest.raises(ValueError, match="checksum"):
            load_state(bytes(damaged))
    path.write_bytes(good[:body] + bytes(b ^ 0x5A for b in good[body:]))
    code, out, err = run(capsys, "plan", "--repo", str(checkout), "--output", "json",
                         "--now", "2026-11-21T09:00:00Z")
    assert code in (0, 2) and json.loads(out)["changes"][0]["from"]["replicas"] == 2, err
    assert f"state cache {path}: cannot be read (ValueError)" in err


@pytest.mark.parametrize(("field", "value"), [
    pytest.param(4, "three", id="replicas-a-string"),
    pytest.param(6, "yesterday", id="last-scale-up-not-a-time"),
    pytest.param(1, ["gitscale.dev/v1alpha1"], id="api-version-unhashable"),
    pytest.param(8, "no", id="drained-not-a-bool"),
])
def test_a_row_with_fields_gitscale_never_writes_is_read_again(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, _isolated_cache: Path, field: int, value: object) -> None:
    """A row of the right shape whose fields are wrong: that manifest is read from git again."""
    checkout = setup(tmp_path)
    plan_json(capsys, checkout)
    stamp, rows, jobs, settled, series = _stored(_isolated_cache)
    bad = {key: row[:field] + (value,) + row[field + 1:] for key, row in rows.items()}
    _store(_isolated_cache, (stamp, bad, jobs, settled, {}))
    assert plan_json(capsys, checkout)["changes"][0]["from"]["replicas"] == 2


def test_settled_decisions_gitscale_never_wrote_are_dropped(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                            _isolated_cache: Path) -> None:
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 20}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=2),
        "demand.yaml": "linux: {queued: 2, running: 0}\n",
    })
    assert run(capsys, "reconcile", "--repo", str(checkout))[0] == 0  # its first write
    plan_json(capsys, checkout)  # nothing to write: settled
    stamp, rows, jobs, settled, series = _stored(_isolated_cache)
    assert settled, "the pass that wrote nothing settled the set"
    _store(_isolated_cache, (stamp, rows, jobs, {n: r[:7] + ("two",) + r[8:]
                                                 for n, r in settled.items()}, series))
    code, out, err = run(capsys, "plan", "--repo", str(checkout), "--output", "json",
                         "--now", "2026-11-21T09:00:00Z")
    assert code == 0 and json.loads(out)["changes"] == [], err
    assert "settled decision is not one gitscale writes" in err


def located(cache: StateCache, path: str, text: str, ref: ObjectRef) -> Located:
    """One lookup as a pass makes it, and what it learnt applied at once."""
    writes = CacheWrites()
    found = cache.located(path, text, ref, writes)
    cache.apply(writes)
    return found


def test_hits_and_misses() -> None:
    cache = StateCache()
    text = RUNNERSET.format(name="linux", replicas=2)
    ref = ObjectRef()
    assert located(cache, "a.yaml", text, ref).current.replicas == 2
    assert located(cache, "b.yaml", text, ref).current.replicas == 2
    assert (cache.hits, cache.misses) == (1, 1)
    assert located(cache, "a.yaml", text.replace("replicas: 2", "replicas: 3"),
                   ref).current.replicas == 3
    assert cache.misses == 2
    # a different object reference is a different entry
    located(cache, "a.yaml", text, ObjectRef(kind="RunnerSet"))
    assert cache.misses == 3


def test_a_lookup_changes_the_cache_only_when_applied() -> None:
    cache = StateCache()
    text = RUNNERSET.format(name="linux", replicas=2)
    writes = CacheWrites()
    cache.located("a.yaml", text, ObjectRef(), writes)
    cache.located("a.yaml", text, ObjectRef(), writes)  # not known yet: parsed again
    assert not cache.rows and not cache.dirty and (cache.hits, cache.misses) == (0, 0)
    assert [parsed for _, _, parsed in writes.looked] == [True, True]
    cache.apply(writes)
    assert len(cache.rows) == 1 and cache.dirty and cache.misses == 2


def test_bad_manifest_errors_every_time(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    checkout = setup(tmp_path)
    path = checkout / "sets/linux.yaml"
    path.write_text(path.read_text().replace("replicas: 2", "replicas: -2"))
    git(checkout, "commit", "-qam", "bad")
    for _ in range(2):
        code, _, err = run(capsys, "plan", "--repo", str(checkout))
        assert code == 1 and "sets/linux.yaml:6" in err


def test_memory_stays_bounded_in_a_long_running_loop(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`run` and `serve` keep one cache for months; each write makes a new text to remember."""
    import gitscale.plan.cache

    monkeypatch.setattr(gitscale.plan.cache, "LIMIT", 3)
    cache = StateCache()
    ref = ObjectRef()
    steady = RUNNERSET.format(name="steady", replicas=1)
    for replicas in range(10):
        located(cache, "steady.yaml", steady, ref)  # read on every pass, never changed
        located(cache, "busy.yaml", RUNNERSET.format(name="busy", replicas=replicas), ref)
    assert len(cache.entries) == 3
    assert cache.misses == 11  # the unchanged manifest was parsed once: it stays in the cache


def test_a_long_running_process_keeps_fewer_entries_than_a_cli(tmp_path: Path) -> None:
    """`run` and `serve` load the cache with LOOP_LIMIT: what passes wrote before the last few
    thousand commits is dropped, in memory and in the file they save (a CLI keeps LIMIT:
    config repos may share its directory). The bound still grows with the config."""
    from gitscale.plan.cache import LIMIT, LOOP_LIMIT

    assert LOOP_LIMIT < LIMIT
    ref = ObjectRef()
    cli = StateCache(tmp_path / STATE_FILE)
    for replicas in range(40):
        located(cli, "busy.yaml", RUNNERSET.format(name="busy", replicas=replicas), ref)
    cli.save()
    loop = StateCache.load(tmp_path, limit=10)  # the CLI's 40 entries, cut to the loop's 10
    assert len(loop.entries) == 10
    for replicas in range(40, 100):
        located(loop, "busy.yaml", RUNNERSET.format(name="busy", replicas=replicas), ref)
    assert len(loop.entries) == 10 and len(loop.objects) <= 10
    loop.floor = 15  # a config of 15 sets: twice as many kept
    located(loop, "busy.yaml", RUNNERSET.format(name="busy", replicas=100), ref)
    assert len(loop.entries) == 11
    loop.save()
    assert len(StateCache.load(tmp_path).entries) == 11


def _state(cache: StateCache) -> tuple[object, ...]:
    return (dict(cache.rows), list(cache.rows), dict(cache.objects), dict(cache.settled),
            dict(cache.decisions), dict(cache.jobs), cache.hits, cache.misses, cache.floor,
            cache.dirty)


def test_a_pass_only_reads_the_cache_and_a_failed_pass_teaches_it_nothing(
        tmp_path: Path) -> None:
    """Decide, then write: ``compute_plan`` leaves the cache as it found it, whether it
    succeeds or fails; what it learnt is a value (``Plan.cache_writes``) applied once."""
    from datetime import datetime, timezone

    from gitscale.config.load import load_config
    from gitscale.core.model import Demand
    from gitscale.demand import DemandReading
    from gitscale.errors import ManifestError
    from gitscale.plan.engine import compute_plan
    from gitscale.repo.git import Git
    from gitscale.repo.index import Tree

    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"a": "{maxReplicas: 9}", "b": "{maxReplicas: 9}"}),
        "sets/a.yaml": RUNNERSET.format(name="a", replicas=1),
        "sets/b.yaml": RUNNERSET.format(name="b", replicas=1)})
    config = load_config(checkout)
    now = datetime(2026, 11, 21, 9, 0, tzinfo=timezone.utc)
    reading = DemandReading()
    reading.demands.update({"a": Demand(0, 1, frozenset({"j1"})), "b": Demand(0, 0)})
    cache = StateCache()
    first = compute_plan(checkout, config, reading, now, "base", cache=cache,
                         tree=Tree.read(Git(checkout)))
    assert _state(cache) == _state(StateCache())
    cache.apply(first.cache_writes)
    assert cache.misses == 2 and len(cache.rows) == 4  # the two read, the two written
    assert list(cache.jobs.values()) == [frozenset({"j1"})]
    # the next pass, on the written texts: all from the cache, one set settled
    for path, (_, new) in first.files.items():
        (checkout / path).write_text(new)
    git(checkout, "commit", "-qam", "pass")
    tree = Tree.read(Git(checkout))
    before = _state(cache)
    second = compute_plan(checkout, config, reading, now, "base", cache=cache, tree=tree)
    assert not second.changes and _state(cache) == before
    cache.apply(second.cache_writes)
    assert (cache.hits, cache.misses) == (2, 2) and sorted(cache.settled) == ["a", "b"]
    # a pass that fails on its second manifest: nothing of what it read is kept
    (checkout / "sets/b.yaml").write_text("kind: RunnerSet\n")
    (checkout / "sets/a.yaml").write_text(RUNNERSET.format(name="a", replicas=4))
    before = _state(cache)
    with pytest.raises(ManifestError):
        compute_plan(checkout, config, reading, now, "base", cache=cache,
                     tree=Tree.read(Git(checkout)))
    assert _state(cache) == before


def _decided(current: Current, demand: Demand, cap: int | None = None) -> Decision:
    from gitscale.core.decide import decide
    from gitscale.core.policy import Policy

    policy = Policy(0, 10, 0, scale_down_delay=timedelta(minutes=10))
    return decide(current, demand, policy, WHEN, cap)


WHEN = datetime(2026, 11, 23, 9, 30, tzinfo=timezone.utc)
UP = WHEN - timedelta(minutes=4)


@pytest.mark.parametrize("decision", [
    pytest.param(_decided(Current(5, 3, UP, "x"), Demand(0, 0)), id="held"),
    pytest.param(Decision(False, 5, 3, Reason.UNCHANGED, "held", why=Why(held_until=datetime(
        2026, 11, 23, 11, 36, 0, 5, tzinfo=timezone(timedelta(hours=2))))),
        id="held-until-a-time-with-an-offset-and-microseconds"),
    pytest.param(_decided(Current(10, 3, None, Demand(12, 3).fingerprint), Demand(12, 3)),
                 id="at-max"),
    pytest.param(_decided(Current(6, 3, None, Demand(9, 0).fingerprint), Demand(9, 0), 6),
                 id="capped-by-the-global-limit"),
    pytest.param(_decided(Current(0, 0, None, "x", drained=True), Demand(8, 0)), id="drained"),
    pytest.param(Decision(False, 4, 9, Reason.UNCHANGED, "not drained",
                          why=Why(drain=Drain.NOT_DRAINED)), id="not-drained"),
])
def test_a_settled_decision_keeps_its_why_across_runs(tmp_path: Path,
                                                      decision: Decision) -> None:
    """What held or capped a settled set survives the cache on disk, so a later CLI run that
    takes the answer from it (not deciding again) still explains the set."""
    assert not decision.write and decision.why != Why()
    demand = Demand(0, 1)
    writes = CacheWrites()
    writes.settle("linux", "digest", "blob", demand, WHEN, WHEN + timedelta(hours=1), decision)
    cache = StateCache.load(tmp_path)
    cache.apply(writes)
    cache.save()
    again = StateCache.load(tmp_path, warn=pytest.fail)
    assert not again.decisions  # a new process: the decision is built from its row
    found = again.settled_decision("linux", "digest", "blob", demand,
                                   (WHEN + timedelta(minutes=1)).timestamp(), CacheWrites())
    assert found == decision
    assert found is not None and found.why.held_until == decision.why.held_until
    if found.why.held_until is not None:  # the same instant, and the same offset
        assert found.why.held_until.utcoffset() == decision.why.held_until.utcoffset()  # type: ignore[union-attr]


@pytest.mark.parametrize(("field", "value"), [
    pytest.param(12, "maxCars", id="capped-by-what-gitscale-never-writes"),
    pytest.param(13, "6", id="cap-a-string"),
    pytest.param(12, None, id="a-cap-without-what-capped-it"),
    pytest.param(14, "half", id="drain-not-a-drain"),
    pytest.param(11, 1763888160.0, id="held-until-not-a-text"),
])
def test_a_settled_why_gitscale_never_wrote_is_dropped(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, _isolated_cache: Path, field: int, value: object) -> None:
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 2}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=2),
        "demand.yaml": "linux: {queued: 5, running: 0}\n",
    })
    assert run(capsys, "reconcile", "--repo", str(checkout))[0] == 0  # its first write
    plan_json(capsys, checkout)  # nothing to write (at max): settled, capped
    stamp, rows, jobs, settled, series = _stored(_isolated_cache)
    assert [r[12:14] for r in settled.values()] == [("maxReplicas", 2)]
    _store(_isolated_cache, (stamp, rows, jobs, {n: r[:field] + (value,) + r[field + 1:]
                                                 for n, r in settled.items()}, series))
    code, out, err = run(capsys, "plan", "--repo", str(checkout), "--output", "json",
                         "--now", "2026-11-21T09:00:00Z")
    assert code == 0 and json.loads(out)["changes"] == [], err
    assert "settled decision is not one gitscale writes" in err
    assert json.loads(out)["unchanged"][0]["why"]["capped"] == {"by": "maxReplicas", "at": 2}


def test_a_settled_held_until_that_is_not_a_time_is_decided_again(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, _isolated_cache: Path) -> None:
    """A row of the right types whose time cannot be read: no answer from it, no crash."""
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 2}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=2),
        "demand.yaml": "linux: {queued: 5, running: 0}\n",
    })
    assert run(capsys, "reconcile", "--repo", str(checkout))[0] == 0
    plan_json(capsys, checkout)
    stamp, rows, jobs, settled, series = _stored(_isolated_cache)
    _store(_isolated_cache, (stamp, rows, jobs, {n: r[:11] + ("yesterday",) + r[12:]
                                                 for n, r in settled.items()}, series))
    code, out, err = run(capsys, "plan", "--repo", str(checkout), "--output", "json",
                         "--now", "2026-11-21T09:00:00Z")
    assert code == 0 and err == "", err
    unchanged = json.loads(out)["unchanged"][0]
    assert unchanged["why"] == {"held_until": None, "drained": False, "reaffirm_at": None,
                                "capped": {"by": "maxReplicas", "at": 2}}
    assert _stored(_isolated_cache)[3]["linux"][11] is None  # decided again, and kept right


@pytest.mark.parametrize("why", [
    pytest.param(Why(), id="nothing held it"),
    pytest.param(Why(held_until=datetime(2026, 11, 27, 9, 10, tzinfo=timezone.utc)),
                 id="held"),
    pytest.param(Why(cap=Cap(CapBy.MAX_REPLICAS, 9)), id="capped"),
    pytest.param(Why(drain=Drain.DRAINED), id="drained"),
    pytest.param(Why(held_until=datetime(2026, 11, 27, 9, 10, tzinfo=timezone.utc),
                     cap=Cap(CapBy.MAX_TOTAL_REPLICAS, 3), drain=Drain.NOT_DRAINED), id="all"),
])
def test_a_settled_decisions_why_reads_back_as_it_was_kept(why: Why) -> None:
    row = ("key", "blob", 1, 2, None, 0.0, 60.0, 3, 4, Reason.UNCHANGED.value, "",
           *why_row(why))
    assert _settled_row(row)
    assert why_of(row) == why
    if why == Why():  # the empty one is shared, not built for each of ten thousand sets
        assert why_of(row) is NO_WHY
