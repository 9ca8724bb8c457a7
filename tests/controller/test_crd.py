"""The RunnerSet CRD explains itself: `kubectl explain runnerset.spec.github` (and every other
field people set or read) shows what the field is, from the schema's descriptions."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gitscale.controller.crd import crd

# The API server gives these their standard descriptions in the OpenAPI it publishes for a
# CRD (TypeMeta and ObjectMeta), whatever the CRD's schema says.
STANDARD = {"apiVersion", "kind", "metadata"}


def fields(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every named field of a schema, with its path (`kubectl explain`'s); a list's items
    are explained by the list's own description."""
    yield path or "runnerset", node
    for name, child in (node.get("properties") or {}).items():
        if not path and name in STANDARD:
            continue
        yield from fields(child, f"{path}.{name}" if path else name)
    items = node.get("items")
    if isinstance(items, dict):
        for name, child in (items.get("properties") or {}).items():
            yield from fields(child, f"{path}.{name}")


def schema() -> dict[str, Any]:
    (version,) = crd()["spec"]["versions"]
    found: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return found


def test_every_field_has_a_description_for_kubectl_explain() -> None:
    missing = [path for path, node in fields(schema())
               if not str(node.get("description", "")).strip()]
    assert missing == []


def test_the_walk_reaches_the_fields_of_lists_and_of_each_platform() -> None:
    paths = dict(fields(schema()))
    for path in ("runnerset", "spec.github.labels", "spec.buildkite.agentTokenSecret",
                 "spec.template.spec.containers.image", "status.conditions.reason"):
        assert path in paths, path
    assert not STANDARD & set(paths)
