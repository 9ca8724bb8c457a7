"""Is the config repo's RunnerSet CRD the one this gitscale writes for?

gitscale validates a RunnerSet against the CRD it ships, not the repo's copy, which is what the
cluster applies. Upgraded in the wrong order (the scaler before `gitscale crd --repo`), the
scaler writes fields (``spec.backlog``) that the cluster's older CRD prunes or refuses. So
`validate` and `reconcile` compare the two and warn (docs/upgrading.md: CRD → controller →
scaler). Pure but for reading the shipped file: texts in, a warning out.
"""
from __future__ import annotations

import hashlib
import posixpath
from functools import lru_cache
from typing import Any, Iterable

from gitscale.runnerset_api import GROUP, PLURAL
from gitscale.yamlio.read import load_documents

CRD_NAME = f"{PLURAL}.{GROUP}"
INIT_PATH = "/gitscale-system/crd.yaml"  # `gitscale init` writes <path>/gitscale-system/crd.yaml
FIX = "run `gitscale crd --repo .` and apply it before this version writes"


@lru_cache(maxsize=1)
def shipped_text() -> str:
    """The RunnerSet CRD this gitscale ships (deploy/crds/, what `gitscale crd` prints)."""
    from importlib import resources

    return resources.files("gitscale.deploy.crds").joinpath(f"{CRD_NAME}.yaml") \
        .read_text(encoding="utf-8")


def shipped_blob() -> str:
    """The git blob id (SHA-1) of ``shipped_text``: a repo file with that id is up to date,
    without reading it."""
    data = shipped_text().encode("utf-8")
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def where_the_crd_is(paths: Iterable[str]) -> tuple[list[str], list[str]]:
    """The files `reconcile` checks, without reading every file (`validate` reads them all):
    (files that hold this CRD by their name — ``…runnersets.gitscale.dev….yaml``, `gitscale crd
    --repo`'s default, and ``<path>/gitscale-system/crd.yaml``, `gitscale init`'s —, bundles
    that may hold it among others: ``crds.yaml``, ``….crds.yaml``). Another project's CRD
    (``crossplane/crds/provider-aws.yaml``, ``apps/argo/crd.yaml``) is in neither: read on
    every pass, it would cost a fetch of its blob in a partial clone for nothing."""
    named: list[str] = []
    bundles: list[str] = []
    for path in paths:
        if not path.endswith((".yaml", ".yml")):
            continue
        name = posixpath.basename(path)
        if CRD_NAME in name or f"/{path}".endswith(INIT_PATH):
            named.append(path)
        elif name.rsplit(".", 1)[0] == "crds" or name.rsplit(".", 1)[0].endswith(".crds"):
            bundles.append(path)
    return named, bundles


def drift(path: str, text: str) -> str | None:
    """A warning when ``text`` (the file at ``path``) holds the RunnerSet CRD and it is not
    this gitscale's; None when it is the same, or not that CRD at all. Never raises: a CRD
    whose versions or schemas are not the shape Kubernetes takes (``schema: broken``) cannot
    be compared, and the warning says so (`gitscale crd --repo .` replaces it)."""
    if text == shipped_text():
        return None
    theirs = _crd(text, path)
    if theirs is None:
        return None
    unreadable = _unreadable(theirs)
    if unreadable:
        return (f"{path}: a RunnerSet CRD gitscale cannot compare with its own ({unreadable}): "
                f"{FIX}")
    ours = _crd(shipped_text(), "gitscale's CRD")
    assert ours is not None  # (shipped: a test keeps it equal to gitscale.controller.crd)
    mine, yours = _fields(ours), _fields(theirs)
    if mine == yours and _versions(ours) == _versions(theirs):
        return None  # the same schema, written differently (comments, order): nothing to do
    missing = sorted(mine - yours, key=lambda f: (f.count("."), f))
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more"
                                          if len(missing) > 3 else "")
        return f"{path}: older than this gitscale's RunnerSet CRD (no {shown}): {FIX}"
    extra = sorted(yours - mine, key=lambda f: (f.count("."), f))
    if extra:
        return (f"{path}: newer than this gitscale's RunnerSet CRD (it has {extra[0]}): "
                "upgrade gitscale to the version that wrote it (docs/upgrading.md)")
    return f"{path}: differs from this gitscale's RunnerSet CRD: {FIX}"


def _crd(text: str, path: str) -> dict[str, Any] | None:
    if CRD_NAME not in text or "CustomResourceDefinition" not in text:
        return None
    try:
        docs = load_documents(text, path)
    except Exception:  # noqa: BLE001 - not YAML: not a CRD to compare (validate reports files it reads)
        return None
    for doc in docs:
        data = doc.data
        if isinstance(data, dict) and data.get("kind") == "CustomResourceDefinition" and \
                isinstance(data.get("metadata"), dict) and data["metadata"].get("name") == CRD_NAME:
            return data
    return None


def _unreadable(crd: dict[str, Any]) -> str | None:
    """Where ``crd`` is not the shape a CRD's versions take (the first such place), or None:
    ``spec`` a mapping, ``spec.versions`` a non-empty list of mappings, each one's ``schema``
    and ``schema.openAPIV3Schema`` mappings."""
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return "spec is not a mapping"
    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        return "spec.versions is not a list of versions"
    for i, version in enumerate(versions):
        at = f"spec.versions[{i}]"
        if not isinstance(version, dict):
            return f"{at} is not a mapping"
        schema = version.get("schema")
        if not isinstance(schema, dict):
            return f"{at}.schema is not a mapping"
        if not isinstance(schema.get("openAPIV3Schema"), dict):
            return f"{at}.schema.openAPIV3Schema is not a mapping"
    return None


def _version_list(crd: dict[str, Any]) -> list[dict[str, Any]]:
    spec = crd.get("spec")
    versions = spec.get("versions") if isinstance(spec, dict) else None
    return [v for v in versions if isinstance(v, dict)] if isinstance(versions, list) else []


def _versions(crd: dict[str, Any]) -> list[tuple[str, bool, bool]]:
    return [(str(v.get("name")), bool(v.get("served")), bool(v.get("storage")))
            for v in _version_list(crd)]


def _fields(crd: dict[str, Any]) -> set[str]:
    """Every field path the CRD's schemas define (``spec.backlog``), over its versions."""
    found: set[str] = set()
    for version in _version_list(crd):
        schema = version.get("schema")
        _walk(schema.get("openAPIV3Schema") if isinstance(schema, dict) else None, "", found)
    return found


def _walk(schema: Any, prefix: str, found: set[str]) -> None:
    if not isinstance(schema, dict):
        return
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for key, sub in properties.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            found.add(name)
            _walk(sub, name, found)
    _walk(schema.get("items"), prefix + "[]", found)
