"""The kinds the fake API server knows: one frozen ``ResourceType`` per (group, version, plural).

Only what changes the server's behaviour is described here: the URL shape (namespaced or not),
whether ``/status`` is a subresource (and so whether the main endpoint ignores ``.status``),
which field selectors a real API server accepts for the kind, and whether an update without
``metadata.resourceVersion`` is allowed (custom resources refuse it, as the real server does).
"""
from __future__ import annotations

from dataclasses import dataclass

#: Every kind supports these two field selectors.
COMMON_FIELDS = ("metadata.name", "metadata.namespace")

POD_FIELDS = ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
              "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP",
              "status.nominatedNodeName")
EVENT_FIELDS = ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                "involvedObject.uid", "involvedObject.apiVersion",
                "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
                "reportingComponent", "source", "type")


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    has_status: bool = False
    field_selectors: tuple[str, ...] = ()
    allow_unconditional_update: bool = True
    #: pods answer DELETE with the object; most other kinds with a Status
    return_deleted_object: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """``pods`` for core kinds, ``runnersets.gitscale.dev`` otherwise (as kubectl says)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def singular(self) -> str:
        return self.kind.lower()

    def supports_field(self, field: str) -> bool:
        return field in COMMON_FIELDS or field in self.field_selectors

    def collection_path(self, namespace: str | None) -> str:
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace is not None:
            return f"{root}/namespaces/{namespace}/{self.plural}"
        return f"{root}/{self.plural}"


def custom_resource(group: str, version: str, plural: str, *, kind: str | None = None,
                    namespaced: bool = True, has_status: bool = True,
                    selectable_fields: tuple[str, ...] = ()) -> ResourceType:
    """A custom resource as the apiextensions server serves it (unconditional PUT refused)."""
    return ResourceType(group=group, version=version, plural=plural,
                        kind=kind or _kind_from_plural(plural), namespaced=namespaced,
                        has_status=has_status, field_selectors=selectable_fields,
                        allow_unconditional_update=False)


def _kind_from_plural(plural: str) -> str:
    singular = plural[:-1] if plural.endswith("s") else plural
    return singular[:1].upper() + singular[1:]


PODS = ResourceType("", "v1", "pods", "Pod", has_status=True, field_selectors=POD_FIELDS,
                    return_deleted_object=True)
SECRETS = ResourceType("", "v1", "secrets", "Secret", field_selectors=("type",))
EVENTS = ResourceType("", "v1", "events", "Event", field_selectors=EVENT_FIELDS)
CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap")
RUNNERSETS = custom_resource("gitscale.dev", "v1alpha1", "runnersets", kind="RunnerSet")
#: leader election: an update carrying a stale resourceVersion is a 409, as for any kind
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease")

DEFAULT_RESOURCES = (PODS, SECRETS, EVENTS, CONFIGMAPS, RUNNERSETS, LEASES)


class Registry:
    """The served kinds, found by URL (group, version, plural) or by a short name in hooks."""

    def __init__(self, types: tuple[ResourceType, ...] = DEFAULT_RESOURCES) -> None:
        self._by_url: dict[tuple[str, str, str], ResourceType] = {}
        for rt in types:
            self.add(rt)

    def add(self, rt: ResourceType) -> ResourceType:
        self._by_url[(rt.group, rt.version, rt.plural)] = rt
        return rt

    def by_url(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_url.get((group, version, plural))

    def resolve(self, name: str | ResourceType) -> ResourceType:
        """``"pods"``, ``"runnersets"`` or ``"runnersets.gitscale.dev"`` → its ResourceType."""
        if isinstance(name, ResourceType):
            return name
        matches = [rt for rt in self._by_url.values() if name in (rt.plural, rt.key)]
        if len(matches) != 1:
            raise KeyError(f"{name!r} names {len(matches)} served resources; use plural.group")
        return matches[0]

    def all(self) -> list[ResourceType]:
        return list(self._by_url.values())

    def group_versions(self) -> dict[str, list[str]]:
        """group → its versions, in registration order ("" is the core group)."""
        out: dict[str, list[str]] = {}
        for rt in self._by_url.values():
            versions = out.setdefault(rt.group, [])
            if rt.version not in versions:
                versions.append(rt.version)
        return out
