"""In-process validation: JSON Schemas built from CRDs (gitscale's own RunnerSet CRD as shipped,
plus every CustomResourceDefinition committed in the config repo), the way kubeconform's
openapi2jsonschema does, with its ``-strict`` rule (unknown fields are errors). A manifest is
checked by fastjsonschema first (compiled once, kept on disk by ``schemacache``); only one it
refuses is checked again by jsonschema, which lists every problem."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Iterable

from gitscale.manifest.problem import Problem, explain
from gitscale.runnerset_api import GROUP, PLURAL
from gitscale.timeutil import parse_time
from gitscale.yamlio.read import load_documents


def shipped_crd() -> dict[str, Any]:
    """gitscale's RunnerSet CRD, as shipped in deploy/crds/: ``gitscale.controller.crd.crd()``,
    written there by `gitscale crd` (a test keeps the two identical). Reading the file costs a
    pass ~5 ms; building the CRD imports the controller's platform registry, ~25 ms. Its data
    is kept in the state cache directory (``schemacache.parsed_crd``)."""
    from importlib import resources

    from gitscale.files import default_cache_dir
    from gitscale.manifest.schemacache import parsed_crd

    name = f"{PLURAL}.{GROUP}.yaml"
    text = resources.files("gitscale.deploy.crds").joinpath(name).read_text(encoding="utf-8")

    def parse() -> dict[str, Any]:
        crd: dict[str, Any] = load_documents(text, f"gitscale's {name}")[0].data
        return crd

    return parsed_crd(text, parse, default_cache_dir())


def _date_time(value: object) -> bool:
    if isinstance(value, str):
        parse_time(value)
    return True


def _format_checker() -> Any:
    import jsonschema

    checker = jsonschema.FormatChecker(formats=())
    checker.checks("date-time", raises=ValueError)(_date_time)
    return checker


def openapi_to_jsonschema(schema: Any, strict: bool = True) -> Any:
    """OpenAPI v3 (Kubernetes structural schema) → JSON Schema."""
    if isinstance(schema, list):
        return [openapi_to_jsonschema(s, strict) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    preserve = schema.get("x-kubernetes-preserve-unknown-fields") is True
    for key, value in schema.items():
        if key.startswith("x-kubernetes-") or key == "nullable":
            continue
        if key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: openapi_to_jsonschema(v, strict) for k, v in value.items()}
        else:
            out[key] = openapi_to_jsonschema(value, strict)
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    if strict and out.get("type") == "object" and "properties" in out and not preserve:
        out.setdefault("additionalProperties", False)
    return out


class SchemaValidator:
    """JSON Schemas keyed by (apiVersion, kind), from CRDs.

    A manifest is checked with fastjsonschema first (compiled once per kind and process:
    importing jsonschema alone costs more than a whole pass); only a manifest it refuses is
    checked again with jsonschema, which lists every problem and has the final word."""

    def __init__(self, crds: Iterable[dict[str, Any]] = ()) -> None:
        self.schemas: dict[tuple[str, str], dict[str, Any]] = {}
        self._fast: dict[tuple[str, str], Any] = {}
        self._shipped: frozenset[tuple[str, str]] = frozenset()
        self.add_crd(shipped_crd())
        # The kinds of gitscale's own CRD keep its schema: a copy committed in the repo is what
        # the cluster applies, maybe of another version (crd_drift warns about it), never what
        # gitscale writes for.
        self._shipped = frozenset(self.schemas)
        for crd in crds:
            self.add_crd(crd)

    def add_crd(self, crd: dict[str, Any]) -> None:
        spec = crd.get("spec") or {}
        group, kind = spec.get("group"), (spec.get("names") or {}).get("kind")
        for version in spec.get("versions") or []:
            raw = ((version.get("schema") or {}).get("openAPIV3Schema"))
            if not (group and kind and raw) or \
                    (f"{group}/{version.get('name')}", kind) in self._shipped:
                continue
            schema = openapi_to_jsonschema(copy.deepcopy(raw))
            props = schema.setdefault("properties", {})
            props["metadata"] = {"type": "object", "required": ["name"],
                                 "properties": {"name": {"type": "string", "minLength": 1}}}
            props.setdefault("apiVersion", {"type": "string"})
            props.setdefault("kind", {"type": "string"})
            key = (f"{group}/{version['name']}", kind)
            self.schemas[key] = schema
            self._fast.pop(key, None)

    @property
    def validators(self) -> dict[tuple[str, str], Any]:
        """jsonschema validators (Draft 4, as Kubernetes' structural schemas), built on use."""
        import jsonschema

        return {key: jsonschema.Draft4Validator(schema, format_checker=_format_checker())
                for key, schema in self.schemas.items()}

    def knows(self, obj: dict[str, Any]) -> bool:
        return (str(obj.get("apiVersion")), str(obj.get("kind"))) in self.schemas

    def check(self, obj: dict[str, Any]) -> list[Problem]:
        key = (str(obj.get("apiVersion")), str(obj.get("kind")))
        schema = self.schemas.get(key)
        if schema is None:
            return []
        if key not in self._fast:
            text = json.dumps(schema, sort_keys=True)
            if text not in _COMPILED:  # once per process: `run` validates every pass
                _COMPILED[text] = _fast_validator(schema)
            self._fast[key] = _COMPILED[text]
        try:
            self._fast[key](obj)
            return []
        except Exception:  # noqa: BLE001 - refused (or unsure): jsonschema decides
            pass
        import jsonschema

        validator = jsonschema.Draft4Validator(schema, format_checker=_format_checker())
        return explain(validator.iter_errors(obj))


_COMPILED: dict[str, Any] = {}  # schema (as JSON) → its compiled fastjsonschema check


def _fast_validator(schema: dict[str, Any]) -> Any:
    """The fastjsonschema check of ``schema``, compiled once and kept in the state cache
    directory between runs (``gitscale.manifest.schemacache``)."""
    from gitscale.files import default_cache_dir
    from gitscale.manifest.schemacache import validator

    # Draft 4 as jsonschema checks it; no defaults written into the object; only the
    # date-time format is checked (as by _format_checker), every other format is accepted.
    formats: dict[str, Any] = {name: _any_value for name in (
        "date", "email", "hostname", "idn-email", "idn-hostname", "ipv4", "ipv6", "iri",
        "iri-reference", "json-pointer", "regex", "relative-json-pointer", "time", "uri",
        "uri-reference", "uri-template", "duration", "uuid")}
    formats["date-time"] = _is_date_time
    return validator({**schema, "$schema": "http://json-schema.org/draft-04/schema#"}, formats,
                     default_cache_dir())


def _any_value(_value: object) -> bool:
    return True


def _is_date_time(value: str) -> bool:
    try:
        parse_time(value)
    except ValueError:
        return False
    return True


def crds_in_repo(root: Path, paths: Iterable[str]) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition in the given repo files."""
    texts = []
    for rel in paths:
        path = root / rel
        if path.is_symlink() or not path.is_file():
            continue  # a link to /dev/zero would be read forever
        try:
            texts.append((rel, path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    return crds_in_texts(texts)


def crds_in_texts(texts: Iterable[tuple[str, str]]) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition in the given (path, text) files."""
    found: list[dict[str, Any]] = []
    for rel, text in texts:
        if "CustomResourceDefinition" not in text:
            continue
        try:
            docs = load_documents(text, rel)
        except Exception:  # a broken unrelated file is not ours to report here
            continue
        found.extend(d.data for d in docs if isinstance(d.data, dict)
                     and d.data.get("kind") == "CustomResourceDefinition")
    return found
