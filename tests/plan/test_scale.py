"""A pass costs what changes: the blob-id cache, sparse clones, streamed history."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import pytest

from gitscale.plan.cache import StateCache
from gitscale.plan.cache_format import as_located, as_row
from gitscale.commands.history_output import ALIGNED, history_lines
from gitscale.config.load import ObjectRef, load_config
from gitscale.demand import DemandReading
from gitscale.errors import ConfigError
from gitscale.core.model import Demand
from gitscale.plan.engine import compute_plan
from gitscale.repo.git import Git
from gitscale.repo.index import Tree
from gitscale.record.history import Entry
from gitscale.manifest.target import locate
from gitscale.repo.opening import open_workspace
from tests.helpers import RUNNERSET, git, make_repo, run, simple_config

NOW = datetime(2026, 11, 21, 9, 0, tzinfo=timezone.utc)


def setup(tmp_path: Path) -> Path:
    return make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{minReplicas: 0, maxReplicas: 20}"}),
        "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=2),
        "demand.yaml": "linux: {queued: 2, running: 0}\n",
    })


def reading() -> DemandReading:
    found = DemandReading()
    found.demands["linux"] = Demand(3, 1)
    return found


def test_a_blob_id_hit_reads_no_file(tmp_path: Path) -> None:
    checkout = setup(tmp_path)
    config = load_config(checkout)
    tree = Tree.read(Git(checkout))
    cache = StateCache()
    first = compute_plan(checkout, config, reading(), NOW, "base", cache=cache, tree=tree)
    assert (cache.hits, cache.misses) == (0, 0) and not cache.rows  # the pass only reads it
    cache.apply(first.cache_writes)
    assert (cache.hits, cache.misses) == (0, 1)
    # The file is gone from disk, but git's index still vouches for its blob: the state comes
    # from the cache; reading the file would have failed with "not found".
    (checkout / "sets/linux.yaml").rename(tmp_path / "elsewhere.yaml")
    again = StateCache()
    again.rows, again.jobs = cache.rows, cache.jobs
    unchanged = compute_plan(checkout, config, DemandReading(), NOW, "base", cache=again,
                             tree=tree)
    again.apply(unchanged.cache_writes)
    assert (again.hits, again.misses) == (1, 0)
    assert first.changes[0].before.replicas == 2
    assert unchanged.unchanged[0][1].replicas == 2
    # Without the index's word (no tree), the file must be read, and it is missing.
    with pytest.raises(ConfigError, match=r"^gitscale\.yaml:3: runner set 'linux': manifest "
                       r"sets/linux\.yaml not found in the config repo$"):
        compute_plan(checkout, config, reading(), NOW, "base", cache=again)


def test_a_file_modified_in_the_checkout_is_read_not_trusted(tmp_path: Path) -> None:
    checkout = setup(tmp_path)
    config = load_config(checkout)
    cache = StateCache()
    compute_plan(checkout, config, reading(), NOW, "base", cache=cache,
                 tree=Tree.read(Git(checkout)))
    path = checkout / "sets/linux.yaml"
    path.write_text(path.read_text().replace("replicas: 2", "replicas: 9"))  # not committed
    tree = Tree.read(Git(checkout))
    assert tree.blob("sets/linux.yaml") is None and "sets/linux.yaml" in tree.modified
    plan = compute_plan(checkout, config, reading(), NOW, "base", cache=cache, tree=tree)
    assert plan.changes[0].before.replicas == 9


def test_a_commit_behind_the_caches_back_is_seen_over_a_url(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                             _isolated_cache: Path) -> None:
    checkout = setup(tmp_path)
    remote = tmp_path / "remote.git"
    code, _, err = run(capsys, "reconcile", "--repo", str(remote), "--now",
                       "2026-11-21T09:00:00Z")
    assert code == 0, err
    # someone else edits the manifest (their own commit, pushed)
    git(checkout, "pull", "--quiet")
    path = checkout / "sets/linux.yaml"
    path.write_text(path.read_text().replace("replicas: 2", "replicas: 7"))
    git(checkout, "commit", "-qam", "by hand")
    git(checkout, "push", "--quiet")
    code, out, err = run(capsys, "plan", "--repo", str(remote), "--output", "json", "--now",
                         "2026-11-21T09:01:00Z")
    assert code == 2, err
    assert json.loads(out)["changes"][0]["from"]["replicas"] == 7


def test_a_sparse_clone_commits_through_the_index(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                  _isolated_cache: Path) -> None:
    checkout = setup(tmp_path)
    remote = tmp_path / "remote.git"
    with open_workspace(str(remote), None, sparse=True) as ws:
        assert (ws.root / "gitscale.yaml").is_file()
        assert not (ws.root / "sets").exists()  # manifests are read from git, not disk
    before = (checkout / "sets/linux.yaml").read_text()
    code, _, err = run(capsys, "reconcile", "--repo", str(remote), "--now",
                       "2026-11-21T09:00:00Z")
    assert code == 0, err
    git(checkout, "pull", "--quiet")
    assert git(checkout, "show", "--name-only", "--format=", "HEAD").split() == \
        ["sets/linux.yaml"]
    after = (checkout / "sets/linux.yaml").read_text()
    changed = [line for line in after.splitlines() if line not in before.splitlines()]
    assert "  patchID: 0" in changed and '    gitscale.dev/jobs: "24c1ea720f1e"' in changed
    assert all(line in after.splitlines() for line in before.splitlines())  # nothing else


def test_cached_rows_are_what_parsing_gives() -> None:
    text = RUNNERSET.format(name="linux", replicas=2).replace(
        "metadata:\n  name: linux\n",
        "metadata:\n  name: linux\n  annotations:\n    gitscale.dev/last-scale-up: "
        "\"2026-11-21T09:00:00.5Z\"\n    gitscale.dev/jobs: abc\n")
    found = locate("x.yaml", text, ObjectRef())
    assert found.current.last_scale_up is not None
    assert as_located(as_row(found)) == found


def test_history_over_a_url_with_since(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                       _isolated_cache: Path) -> None:
    checkout = setup(tmp_path)
    remote = tmp_path / "remote.git"
    demand = checkout / "demand.yaml"
    for hour, queued in ((9, 2), (10, 5), (11, 8)):
        demand.write_text(f"linux: {{queued: {queued}, running: 0}}\n")
        code, _, err = run(capsys, "reconcile", "--repo", str(remote), "--demand", str(demand),
                           "--now", f"2026-11-21T{hour:02d}:00:00Z")
        assert code == 0, err
    url = remote.resolve().as_uri()
    code, out, err = run(capsys, "history", "--repo", url, "--since", "2026-11-21T10:00:00Z",
                         "--output", "json")
    assert code == 0, err
    entries = json.loads(out)
    assert [(e["time"], e["replicas"]) for e in entries] == [
        ("2026-11-21T11:00:00Z", 8), ("2026-11-21T10:00:00Z", 5)]
    code, out, _ = run(capsys, "history", "--repo", url)
    assert len(out.splitlines()) == 4  # header and three rows, newest first
    assert out.splitlines()[1].startswith("2026-11-21T11:00:00Z")


def test_history_shows_the_first_rows_before_reading_the_rest() -> None:
    def entries() -> Iterator[Entry]:
        for number in range(ALIGNED + 1):
            yield Entry(f"{number:040x}", "2026-11-21T09:00:00Z", "linux", 1, 2, number, 1, 0,
                        "scale-up", "")
        raise AssertionError("read past the rows needed for the first lines")

    lines = history_lines(entries())
    assert next(lines).startswith("TIME")
    assert next(lines).startswith("2026-11-21T09:00:00Z")
    with pytest.raises(AssertionError, match="read past"):
        list(lines)


def test_too_many_sets_is_a_clear_error_not_a_long_wait(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                        monkeypatch) -> None:
    import gitscale.config.load

    monkeypatch.setattr(gitscale.config.load, "MAX_SETS", 3)
    checkout = make_repo(tmp_path, {"gitscale.yaml": simple_config(
        {f"s{n}": "{maxReplicas: 2}" for n in range(4)})})
    code, _, err = run(capsys, "plan", "--repo", str(checkout))
    assert code == 1
    assert "gitscale.yaml:1: 4 runner sets: gitscale handles at most 3" in err


@pytest.mark.parametrize(("data", "read"), [  # read: by hand, not left to the schema
    pytest.param({"linux": {"queued": 1, "running": 2}}, True, id="counts"),
    pytest.param({"a-1": {"queued": 0, "running": 0, "jobs": ["x", 7]}}, True, id="jobs"),
    pytest.param({}, True, id="empty"),
    pytest.param({"Linux": {"queued": 1, "running": 2}}, False, id="upper-case-name"),
    pytest.param({"linux\n": {"queued": 1, "running": 2}}, False, id="newline-in-name"),
    pytest.param({"linux": {"queued": True, "running": 2}}, False, id="boolean"),
    pytest.param({"linux": {"queued": 1.0, "running": 2}}, False, id="float"),
    pytest.param({"linux": {"queued": -1, "running": 2}}, False, id="negative"),
    pytest.param({"linux": {"queued": 1, "running": 2, "extra": 1}}, False, id="unknown-key"),
    pytest.param({"linux": {"queued": 1}}, False, id="missing-running"),
    pytest.param({"linux": {"queued": 1, "running": 2, "jobs": [None]}}, False, id="null-job"),
    pytest.param({"linux": {"queued": 1, "running": 2, "jobs": [True]}}, False, id="boolean-job"),
    pytest.param({"x" * 64: {"queued": 1, "running": 2}}, False, id="long-name"),
])
def test_the_hand_check_of_demand_is_never_more_lenient_than_the_schema(
        data: dict, read: bool) -> None:  # type: ignore[type-arg]
    from fastjsonschema import JsonSchemaValueException

    from gitscale.config import schemas
    from gitscale.demand.file import plain_demands

    try:
        schemas.fast_check("DEMAND")(data)
        schema_accepts = True
    except JsonSchemaValueException:  # refused (any other error is the test's own)
        schema_accepts = False
    found = plain_demands(data)
    # what the schema surely accepts is read by hand (stepping aside from all passes the rest)
    assert (found is not None) is read, found
    if found is not None:
        assert schema_accepts
        assert found == {n: Demand(e["queued"], e["running"], frozenset(map(str, e["jobs"]))
                                   if "jobs" in e else None) for n, e in data.items()}
