"""The checks a real API server makes that a controller can trip over.

Names must be DNS-1123 subdomains, label keys and values must be valid (and strings), and a pod's
spec is immutable apart from images, ``activeDeadlineSeconds`` and tolerations. A controller that
passes here would not be rejected by a cluster for these reasons.
"""
from __future__ import annotations

import copy
import re
from typing import Any

from tests.kubeapi.errors import bad_request, invalid
from tests.kubeapi.resources import ResourceType

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def check_name(rt: ResourceType, name: str) -> None:
    if len(name) > 253 or not _SUBDOMAIN.match(name):
        raise invalid(rt, name, f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 '
                      "subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                      "and must start and end with an alphanumeric character")


def _check_qualified_key(rt: ResourceType, name: str, field: str, key: str) -> None:
    prefix, _, local = key.rpartition("/")
    prefix_ok = (not prefix and "/" not in key
                 or len(prefix) <= 253 and bool(_SUBDOMAIN.match(prefix)))
    ok = 0 < len(local) <= 63 and bool(_NAME_PART.match(local)) and prefix_ok
    if not ok:
        raise invalid(rt, name, f'{field}: Invalid value: "{key}": name part must consist of '
                      "alphanumeric characters, '-', '_' or '.', and must start and end with an "
                      "alphanumeric character (with an optional DNS subdomain prefix and '/')")


def check_metadata(rt: ResourceType, meta: dict[str, Any]) -> None:
    name = str(meta.get("name", ""))
    for field in ("labels", "annotations"):
        mapping = meta.get(field)
        if mapping is None:
            continue
        if not isinstance(mapping, dict):
            raise bad_request(f"json: cannot unmarshal {type(mapping).__name__} into Go struct "
                              f"field ObjectMeta.metadata.{field} of type map[string]string")
        for key, value in mapping.items():
            if not isinstance(value, str):
                raise bad_request(f"json: cannot unmarshal {type(value).__name__} into Go struct "
                                  f"field ObjectMeta.metadata.{field} of type string "
                                  f"(key {key!r})")
            _check_qualified_key(rt, name, f"metadata.{field}", key)
            if field == "labels" and (len(value) > 63 or not _LABEL_VALUE.match(value)):
                raise invalid(rt, name, f'metadata.labels: Invalid value: "{value}": a valid '
                              "label must be 63 characters or less, empty, or begin and end with "
                              "an alphanumeric character")


def check_pod_spec(rt: ResourceType, name: str, spec: Any) -> None:
    """What pod validation refuses that a template can get wrong: a container without a
    name, or a name used twice (init containers and containers share one namespace). (A pod
    with no containers is let through: tests make such pods as stand-ins.)"""
    spec = spec if isinstance(spec, dict) else {}
    seen: set[str] = set()
    for field in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(field) or []):
            cname = container.get("name") if isinstance(container, dict) else None
            if not cname:
                raise invalid(rt, name, f"spec.{field}[{i}].name: Required value")
            if cname in seen:
                raise invalid(rt, name, f'spec.{field}[{i}].name: Duplicate value: "{cname}"')
            seen.add(cname)


def _mutable_stripped(spec: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    for key in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"):
        spec.pop(key, None)
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            if isinstance(container, dict):
                container.pop("image", None)
    return spec


def check_pod_update(rt: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> None:
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    if _mutable_stripped(old_spec) != _mutable_stripped(new_spec):
        name = str(old["metadata"]["name"])
        raise invalid(rt, name, "spec: Forbidden: pod updates may not change fields other than "
                      "`spec.containers[*].image`, `spec.initContainers[*].image`, "
                      "`spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to "
                      "existing tolerations) or `spec.terminationGracePeriodSeconds`")


def check_kind(rt: ResourceType, body: dict[str, Any]) -> None:
    if body.get("apiVersion") not in (None, rt.api_version):
        raise bad_request(f"the API version in the data ({body['apiVersion']}) does not match "
                          f"the expected API version ({rt.api_version})")
    if body.get("kind") not in (None, rt.kind):
        raise bad_request(f"the kind in the data ({body['kind']}) does not match the expected "
                          f"kind ({rt.kind})")

