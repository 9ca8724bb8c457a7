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

from gitscale.errors import InputError
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


@lru_cache(maxsize=1)
def _shipped_schema() -> tuple[frozenset[str], list[tuple[str, bool, bool]]]:
    """The fields and versions of ``shipped_text``'s CRD: parsed once per process."""
    ours = _crd(shipped_text(), "gitscale's CRD")
    assert ours is not None  # (shipped: a test keeps it equal to gitscale.controller.crd)
    return frozenset(_fields(ours)), _versions(ours)


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
        # each test below needs "crd" or CRD_NAME in the path: ten thousand manifests' paths
        # are passed over with two substring tests
        if ("crd" not in path and CRD_NAME not in path) or not path.endswith((".yaml", ".yml")):
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
    whose versions or schemas are not the shape Kubernetes takes (``schema: broken``, a schema
    that holds itself through a YAML anchor), or a file named after it (``where_the_crd_is``)
    that is not YAML gitscale reads, cannot be compared, and the warning says so and why
    (`gitscale crd --repo .` replaces it)."""
    if text == shipped_text():
        return None
    named = bool(where_the_crd_is([path])[0])
    if not named and (CRD_NAME not in text or "CustomResourceDefinition" not in text):
        return None
    try:
        theirs = _crd(text, path)
    except InputError as exc:  # not YAML, nested too deep, aliases that expand too far
        if not named:
            return None  # not known to be this CRD: another file (validate reads what it reads)
        return _cannot_compare(path, exc.detail if exc.line is None
                               else f"line {exc.line}: {exc.detail}")
    if theirs is None:
        return None
    try:
        unreadable = _unreadable(theirs)
        yours = _fields(theirs)
    except _Unwalkable as exc:
        unreadable = str(exc)
    if unreadable:
        return _cannot_compare(path, unreadable)
    mine, our_versions = _shipped_schema()
    if mine == yours and our_versions == _versions(theirs):
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


def _cannot_compare(path: str, why: str) -> str:
    return f"{path}: a RunnerSet CRD gitscale cannot compare with its own ({why}): {FIX}"


def _crd(text: str, path: str) -> dict[str, Any] | None:
    """The RunnerSet CRD among ``text``'s documents, or None; ``InputError`` when ``text`` is
    not YAML gitscale reads (``yamlio.read.load_documents``)."""
    docs = load_documents(text, path)  # InputError: not YAML, or too deep to read
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
    """Every field path the CRD's schemas define (``spec.backlog``), over its versions;
    ``_Unwalkable`` for a schema that holds itself (a recursive YAML anchor) or is nested
    deeper than ``MAX_SCHEMA_DEPTH``."""
    found: set[str] = set()
    for i, version in enumerate(_version_list(crd)):
        schema = version.get("schema")
        _walk(schema.get("openAPIV3Schema") if isinstance(schema, dict) else None,
              f"spec.versions[{i}].schema.openAPIV3Schema", "", found, ())
    return found


MAX_SCHEMA_DEPTH = 100  # schemas nested in a schema: far more than a CRD needs


class _Unwalkable(Exception):
    """A schema ``_walk`` cannot list the fields of; the message says where and why."""


def _walk(schema: Any, at: str, prefix: str, found: set[str], within: tuple[int, ...]) -> None:
    """``within``: the ids of the schemas enclosing this one (a YAML alias makes one dict
    appear at several places: only one that encloses itself is a cycle)."""
    if not isinstance(schema, dict):
        return
    if id(schema) in within:
        raise _Unwalkable(f"{at} holds itself: a recursive YAML anchor")
    if len(within) >= MAX_SCHEMA_DEPTH:
        raise _Unwalkable(f"{at}: schemas nested more than {MAX_SCHEMA_DEPTH} levels deep")
    within = (*within, id(schema))
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for key, sub in properties.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            found.add(name)
            _walk(sub, f"{at}.properties.{key}", name, found, within)
    _walk(schema.get("items"), f"{at}.items", prefix + "[]", found, within)
