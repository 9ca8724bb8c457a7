"""The state cache: only a speed-up. It can be missing or corrupt, never stale."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitscale.plan.cache import CacheWrites, StateCache
from gitscale.config.load import ObjectRef
from gitscale.manifest.target import Located
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
    assert (_isolated_cache / "manifest-state.pickle").is_file()
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
    (_isolated_cache / "manifest-state.pickle").write_bytes(b"not a pickle")
    assert plan_json(capsys, checkout)["changes"][0]["to"]["replicas"] == 2


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
