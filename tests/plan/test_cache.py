"""The state cache: only a speed-up. It can be missing or corrupt, never stale."""
from __future__ import annotations

import json
from pathlib import Path

from gitscale.plan.cache import StateCache
from gitscale.config.load import ObjectRef
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


def test_hits_and_misses() -> None:
    cache = StateCache()
    text = RUNNERSET.format(name="linux", replicas=2)
    ref = ObjectRef()
    assert cache.located("a.yaml", text, ref).current.replicas == 2
    assert cache.located("b.yaml", text, ref).current.replicas == 2
    assert (cache.hits, cache.misses) == (1, 1)
    assert cache.located("a.yaml", text.replace("replicas: 2", "replicas: 3"),
                         ref).current.replicas == 3
    assert cache.misses == 2
    # a different object reference is a different entry
    cache.located("a.yaml", text, ObjectRef(kind="RunnerSet"))
    assert cache.misses == 3


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
        cache.located("steady.yaml", steady, ref)  # read on every pass, never changed
        cache.located("busy.yaml", RUNNERSET.format(name="busy", replicas=replicas), ref)
    assert len(cache.entries) == 3
    assert cache.misses == 11  # the unchanged manifest was parsed once: it stays in the cache
