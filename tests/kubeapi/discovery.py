"""Discovery documents (``/api``, ``/apis``, ``/api/v1``, ``/apis/{g}/{v}``, ``/version``).

Enough for ``kubernetes.dynamic.DynamicClient`` and ``kubectl api-resources`` to find the
served kinds; the typed clients (``CoreV1Api``, ``CustomObjectsApi``) never ask for them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.kubeapi.server import KubeAPIServer

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def _resource_list(server: KubeAPIServer, group: str, version: str) -> dict[str, Any] | None:
    resources: list[dict[str, Any]] = []
    for rt in server.registry.all():
        if (rt.group, rt.version) != (group, version):
            continue
        resources.append({"name": rt.plural, "singularName": rt.singular,
                          "namespaced": rt.namespaced, "kind": rt.kind, "verbs": VERBS})
        if rt.has_status:
            resources.append({"name": f"{rt.plural}/status", "singularName": "",
                              "namespaced": rt.namespaced, "kind": rt.kind,
                              "verbs": ["get", "patch", "update"]})
    if not resources:
        return None
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version, "resources": resources}


def document(server: KubeAPIServer, path: str) -> dict[str, Any] | None:
    """The discovery document at ``path``, or None when ``path`` is not a discovery path."""
    parts = [p for p in path.split("/") if p]
    groups = server.registry.group_versions()
    if parts == ["version"]:
        return {"major": "1", "minor": "34", "gitVersion": "v1.34.0+gitscale-kubeapi",
                "platform": "linux/amd64"}
    if parts == ["api"]:
        return {"kind": "APIVersions", "versions": groups.get("", ["v1"]),
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                "serverAddress": server.address}]}
    if parts == ["apis"]:
        return {"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [_group(g, v) for g, v in groups.items() if g]}
    if len(parts) == 2 and parts[0] == "api":
        return _resource_list(server, "", parts[1])
    if len(parts) == 2 and parts[0] == "apis" and parts[1] in groups:
        return {"kind": "APIGroup", "apiVersion": "v1", **_group(parts[1], groups[parts[1]])}
    if len(parts) == 3 and parts[0] == "apis":
        return _resource_list(server, parts[1], parts[2])
    return None
