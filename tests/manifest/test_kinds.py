"""The target kinds: one table (``target.KINDS``) says where each kind of object keeps the fields
gitscale owns, and reading, writing, the editor's placement, the state cache's rows and `plan`'s
output all follow it. A kind added to the table (here a test-only one that scales through
``spec.size``) works end to end with nothing else changed: CONTRIBUTING.md, "Adding a target
kind"."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from gitscale.commands.plan import owned
from gitscale.config.load import ObjectRef, load_config
from gitscale.core.model import Demand
from gitscale.demand import DemandReading
from gitscale.manifest.target import (A_JOBS, A_LAST_SCALE_UP, A_PATCH_ID, ANNOTATIONS, KINDS,
                                      LEGACY, REPLICAS_ONLY, SPEC_PATCH, Owned, locate)
from gitscale.plan.cache import StateCache
from gitscale.plan.cache_format import as_located, as_row
from gitscale.plan.engine import compute_plan
from gitscale.repo.git import Git
from gitscale.repo.index import Tree
from tests.helpers import git, make_repo, run, simple_config

NOW = datetime(2026, 11, 21, 9, 0, tzinfo=timezone.utc)
STAMP = "2026-11-21T09:00:00Z"


def manifest(api_version: str, kind: str, replicas: str = "spec.replicas") -> str:
    *parents, key = replicas.split(".")
    lines = [f"apiVersion: {api_version}", f"kind: {kind}", "metadata:", "  name: linux  # ours"]
    for depth, parent in enumerate(parents):
        lines.append("  " * depth + f"{parent}:")
    lines.append("  " * len(parents) + f"{key}: 1")
    return "\n".join(lines + ["  image: runner:1  # theirs", ""])


def get(obj: object, path: tuple[str, ...]) -> object:
    for key in path:
        assert isinstance(obj, dict), path
        obj = obj.get(key)
    return obj


def test_the_table_holds_the_kinds_the_readme_names() -> None:
    assert {kind: owned for kind, owned in KINDS.items()} == {
        ("gitscale.dev/v1alpha1", "RunnerSet"): SPEC_PATCH,
        ("actions.summerwind.dev/v1alpha1", "RunnerDeployment"): LEGACY,
        ("actions.summerwind.dev/v1alpha1", "RunnerSet"): LEGACY,
        ("apps/v1", "Deployment"): REPLICAS_ONLY,
        ("apps/v1", "StatefulSet"): REPLICAS_ONLY,
        ("apps/v1", "ReplicaSet"): REPLICAS_ONLY,
        ("v1", "ReplicationController"): REPLICAS_ONLY,
        ("argoproj.io/v1alpha1", "Rollout"): REPLICAS_ONLY,
    }
    # where the editor puts a missing key: the table's order, within the kind's own fields
    assert SPEC_PATCH.after == {"replicas": (), "patchID": ("replicas",),
                                "effectiveTime": ("patchID", "replicas"),
                                "backlog": ("effectiveTime", "patchID", "replicas"),
                                "annotations": ("namespace", "name")}
    assert LEGACY.after == {"replicas": (), "effectiveTime": ("replicas",),
                            "annotations": ("namespace", "name")}
    assert [o.reaffirms for o in (SPEC_PATCH, LEGACY, REPLICAS_ONLY)] == [True, True, False]


@pytest.mark.parametrize("kind", [pytest.param(k, id=f"{k[0]} {k[1]}") for k in KINDS])
def test_each_kind_is_written_where_the_table_says(tmp_path: Path, kind: tuple[str, str]) -> None:
    """A first write of every kind in the table: the owned values land at its paths (the patch
    ID in the spec or as an annotation, an effective time only where it has one), the cache
    row names the kind and reads back as parsed, and `plan` shows the values from its paths."""
    table = KINDS[kind]
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{maxReplicas: 9}"}),
        "sets/linux.yaml": manifest(*kind, replicas=".".join(table.replicas))})
    reading = DemandReading()
    reading.demands["linux"] = Demand(3, 0)
    cache = StateCache()
    plan = compute_plan(checkout, load_config(checkout), reading, NOW, "base", cache=cache,
                        tree=Tree.read(Git(checkout)))
    [change] = plan.changes
    new = change.new_object
    assert get(new, table.replicas) == 3
    assert get(new, table.patch_id) == ("0" if table.patch_in_annotation else 0)
    assert ("patchID" in new["spec"]) == (not table.patch_in_annotation)
    assert new["spec"].get("effectiveTime") == (STAMP if table.effective_time else None)
    assert get(new, (*ANNOTATIONS, A_JOBS)) == Demand(3, 0).fingerprint
    assert get(new, (*ANNOTATIONS, A_LAST_SCALE_UP)) == STAMP
    assert owned(new) == {"replicas": 3, "patchID": 0,
                          "effectiveTime": STAMP if table.effective_time else None,
                          "backlog": 0 if table.backlog else None}
    assert yaml.safe_load(plan.files["sets/linux.yaml"][1]) == new
    assert "  image: runner:1  # theirs\n" in plan.files["sets/linux.yaml"][1]
    cache.apply(plan.cache_writes)
    [(_, found, parsed)] = plan.cache_writes.looked
    assert parsed and found.owned is table and found.api_version == kind[0]
    assert as_located(as_row(found)) == found


def test_a_row_of_a_kind_gone_from_the_table_is_read_again(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    found = locate("m.yaml", manifest("apps/v1", "Deployment"), ObjectRef())
    row = as_row(found)
    assert row[1:3] == ("apps/v1", "Deployment")
    monkeypatch.delitem(KINDS, ("apps/v1", "Deployment"))
    assert as_located(row) is None


# A kind that scales through `spec.size` and keeps its patch ID as an annotation: one row.
POOL = ("example.dev/v1", "Pool")
POOL_OWNED = Owned(replicas=("spec", "size"), patch_id=(*ANNOTATIONS, A_PATCH_ID))
POOL_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: pools.example.dev}
spec:
  group: example.dev
  names: {kind: Pool, plural: pools}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {type: integer, minimum: 0, maximum: 5}
                image: {type: string}
"""


def test_a_kind_added_to_the_table_works_end_to_end(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                    monkeypatch, _isolated_cache: Path) -> None:
    monkeypatch.setitem(KINDS, POOL, POOL_OWNED)
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{maxReplicas: 9}"}),
        "sets/linux.yaml": manifest(*POOL, replicas="spec.size"),
        "crds/pool.yaml": POOL_CRD})
    demand = tmp_path / "demand.yaml"
    # validation reads the kind's CRD from the repo: 7 is more than its schema allows
    demand.write_text("linux: {queued: 7, running: 0}\n")
    code, _, err = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand),
                       "--now", STAMP)
    # at the line of the value in the edited file (the one `size:` line of the manifest)
    (number,) = [n for n, line in enumerate((checkout / "sets/linux.yaml").read_text()
                                             .splitlines(), 1) if line.strip().startswith("size:")]
    assert code == 1, err
    assert f"sets/linux.yaml:{number}: spec.size: 7 is greater than the maximum of 5" in err
    assert git(checkout, "status", "--porcelain") == ""
    demand.write_text("linux: {queued: 3, running: 0}\n")
    code, out, err = run(capsys, "plan", "--repo", str(checkout), "--demand", str(demand),
                         "--now", STAMP, "--output", "json")
    assert code == 2, err
    [change] = json.loads(out)["changes"]
    assert (change["from"], change["to"]) == (
        {"replicas": 1, "patchID": None, "effectiveTime": None, "backlog": None},
        {"replicas": 3, "patchID": 0, "effectiveTime": None, "backlog": None})
    code, out, err = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand),
                         "--now", STAMP)
    assert code == 0 and "committed" in out, out + err
    fingerprint = Demand(3, 0).fingerprint
    assert (checkout / "sets/linux.yaml").read_text() == f"""\
apiVersion: example.dev/v1
kind: Pool
metadata:
  name: linux  # ours
  annotations:
    gitscale.dev/patch-id: "0"
    gitscale.dev/jobs: "{fingerprint}"
    gitscale.dev/last-scale-up: "{STAMP}"
spec:
  size: 3
  image: runner:1  # theirs
"""
    # the next pass: the state comes from the cache (its row names the kind), nothing to write
    cache = StateCache.load(_isolated_cache)
    assert any(row[1:3] == POOL for row in cache.rows.values())
    code, out, _ = run(capsys, "reconcile", "--repo", str(checkout), "--demand", str(demand),
                       "--now", "2026-11-21T09:05:00Z")
    assert code == 0 and "no change" in out
    assert "linux" in StateCache.load(_isolated_cache).settled


@pytest.mark.parametrize("kind", [pytest.param(k, id=f"{k[0]} {k[1]}") for k in KINDS])
def test_an_absent_replicas_is_what_the_kinds_controller_runs(tmp_path: Path,
                                                              kind: tuple[str, str]) -> None:
    """Without ``replicas`` a Deployment (any apps/v1 kind, a Rollout, an actions-runner-
    controller RunnerDeployment) runs 1, a gitscale RunnerSet none: a first write of 1 is a
    scale-up only for the RunnerSet (a scale-up stamps the last scale-up, which holds the next
    scale-down for scaleDownDelay), and the commit says 1→1 or ?→1 accordingly."""
    table = KINDS[kind]
    text = manifest(*kind, replicas=".".join(table.replicas)).replace(
        f"  {table.replicas[-1]}: 1\n", "  other: 1\n")
    assert "replicas: 1" not in text and "size: 1" not in text
    checkout = make_repo(tmp_path, {
        "gitscale.yaml": simple_config({"linux": "{maxReplicas: 9}"}),
        "sets/linux.yaml": text})
    reading = DemandReading()
    reading.demands["linux"] = Demand(1, 0)
    plan = compute_plan(checkout, load_config(checkout), reading, NOW, "base",
                        tree=Tree.read(Git(checkout)))
    [change] = plan.changes
    assert get(change.new_object, table.replicas) == 1
    stamped = get(change.new_object, (*ANNOTATIONS, A_LAST_SCALE_UP))
    runs_none = kind == ("gitscale.dev/v1alpha1", "RunnerSet")
    assert table.unset == (None if runs_none else 1)
    assert stamped == (STAMP if runs_none else None)
    assert change.before.replicas == (None if runs_none else 1)
