"""The RunnerSet's bounds are one set of values: what the scaler may write, the CRD accepts,
the manifest reader reads back and the controller acts on."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gitscale.controller import crd as resource
from gitscale.config.load import ObjectRef
from gitscale.controller.errors import InvalidRunnerSet
from gitscale.controller.observe import parse_runnerset
from gitscale.controller.platforms import kind_of
from gitscale.core.model import next_patch_id
from gitscale.errors import ManifestError
from gitscale.manifest.target import SPEC_PATCH, owned_for, read_target
from gitscale.config.schemas import POLICY
from gitscale.manifest.crd_schemas import SchemaValidator
from tests.helpers import RUNNERSET


def crd_spec() -> dict[str, Any]:
    version = resource.crd()["spec"]["versions"][0]
    props: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return props["properties"]  # type: ignore[no-any-return]


def test_the_crds_bounds_are_the_scalers() -> None:
    spec = crd_spec()
    assert POLICY["properties"]["maxReplicas"]["maximum"] == spec["replicas"]["maximum"]
    assert next_patch_id(spec["patchID"]["maximum"]) == 1
    assert next_patch_id(spec["patchID"]["maximum"] - 1) == spec["patchID"]["maximum"]
    crd = resource.crd()["spec"]
    assert owned_for(f"{crd['group']}/{crd['versions'][0]['name']}", crd["names"]["kind"]) \
        == SPEC_PATCH


def manifest(**spec: int) -> str:
    obj = yaml.safe_load(RUNNERSET.format(name="linux", replicas=0))
    obj["spec"].update(spec)
    obj["spec"]["github"]["credentialsSecret"] = "github-app"
    return yaml.safe_dump(obj)


def everyone_accepts(text: str) -> list[str]:
    """Who refuses the manifest: the CRD's schema, the scaler's reader, the controller."""
    refused = []
    obj = yaml.safe_load(text)
    if SchemaValidator().check(obj):
        refused.append("crd")
    try:
        read_target("sets/linux.yaml", text, ObjectRef())
    except ManifestError:
        refused.append("scaler")
    try:
        parse_runnerset(obj, kind_of)
    except InvalidRunnerSet:
        refused.append("controller")
    return refused


@pytest.mark.parametrize("field", ["replicas", "patchID"])
def test_the_bound_is_accepted_by_all_and_one_past_it_by_none(field: str) -> None:
    bound = crd_spec()[field]["maximum"]
    assert everyone_accepts(manifest(**{field: bound})) == []
    assert everyone_accepts(manifest(**{field: bound + 1})) == ["crd", "scaler", "controller"]


def test_the_policy_schema_refuses_more_replicas_than_the_crd_allows() -> None:
    bound = crd_spec()["replicas"]["maximum"]
    jsonschema.validate({"maxReplicas": bound}, POLICY)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"maxReplicas": bound + 1}, POLICY)


def test_the_demo_runs_the_runner_images_init_pins() -> None:
    """The embedded demo is the first RunnerSet people read: it names the same pinned images."""
    from gitscale.runnerset_api import BUILDKITE_AGENT_IMAGE, GITHUB_RUNNER_IMAGE

    prod = Path(__file__).resolve().parents[1] / "gitscale" / "data" / "demo" / "clusters" / "prod"
    images = {line.split("image:", 1)[1].strip() for path in prod.glob("*.yaml")
              for line in path.read_text().splitlines() if "image:" in line}
    assert images == {GITHUB_RUNNER_IMAGE, BUILDKITE_AGENT_IMAGE}
