"""Schema validation of managed manifests: kubeconform when on PATH, else in-process.

``Validation`` is the one entry point (``reconcile`` before committing, ``validate`` on demand).
In-process validation builds JSON Schemas from CRDs (gitscale's own RunnerSet CRD, plus every
CustomResourceDefinition committed in the config repo), the way kubeconform's openapi2jsonschema
does, including kubeconform's ``-strict`` rule: unknown fields are errors, so ``replica: 3`` is
caught in review rather than silently pruned by the API server.
"""
from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from gitscale.errors import shown_as_yaml
from gitscale.runnerset_api import GROUP, PLURAL
from gitscale.timeutil import parse_time
from gitscale.yamlio.read import Document, load_documents


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


@dataclass(frozen=True)
class Problem:
    path: str  # where in the object, as people read it: "spec.github"
    message: str
    at: tuple[str | int, ...] = ()  # the same path, as keys: for its line in the file
    key: tuple[object] | None = None  # the key to point at inside ``at`` (an unknown one,
    # in a tuple: ``(None,)`` is the key YAML read from ``~:``), if any
    object: tuple[str, str] | None = None  # (kind, name): kubeconform names the object

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"

    def line(self, document: Document) -> int | None:
        """The 1-based line to show: the unknown key's, else the value's (a mapping that
        lacks a required key: its own line)."""
        if self.key is not None:
            return document.key_line(list(self.at), self.key[0])
        return document.line_of(list(self.at))


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


def _label(at: Sequence[str | int]) -> str:
    return ".".join(str(p) for p in at) or "(object)"


def explain(errors: Iterable[Any]) -> list[Problem]:
    """jsonschema's errors as one ``Problem`` per thing to fix: each unknown key on its own
    (jsonschema words several in one message); an unknown key that is a typo of a missing
    required one (``credentialSecret`` for ``credentialsSecret``) is one problem, not two."""
    unknown: dict[tuple[str | int, ...], list[tuple[object, list[str]]]] = {}
    missing: dict[tuple[str | int, ...], list[str]] = {}
    others: list[Problem] = []
    for error in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path]):
        at = tuple(error.absolute_path)
        instance = error.instance
        if error.validator == "additionalProperties" and isinstance(instance, dict):
            known = list((error.schema.get("properties") or {}))
            patterns = list((error.schema.get("patternProperties") or {}))
            for key in instance:
                if key not in known and not any(re.search(p, str(key)) for p in patterns):
                    unknown.setdefault(at, []).append((key, known))
        elif error.validator == "required" and isinstance(instance, dict):
            for key in error.validator_value:
                if key not in instance and key not in missing.setdefault(at, []):
                    missing[at].append(str(key))
        elif error.validator == "type" and (instance is None or isinstance(instance, bool)):
            # jsonschema says Python's None and True: the file says null and true
            others.append(Problem(_label(at), f"{shown_as_yaml(instance)} is not of type "
                                  f"{error.validator_value!r}", at))
        else:
            others.append(Problem(_label(at), str(error.message), at))
    problems: list[Problem] = []
    for at in sorted(set(unknown) | set(missing), key=lambda a: [str(p) for p in a]):
        lacking = list(missing.get(at, []))
        for key, known in unknown.get(at, []):
            import difflib  # only now: a valid manifest (every pass that writes) never needs it

            if not isinstance(key, str):  # YAML read `~:`, `true:`, `1:` as null, bool, int
                problems.append(Problem(_label(at), f"a key YAML reads as {shown_as_yaml(key)}, not "
                                        "as a field name: quote it, or remove it", at, (key,)))
                continue
            typo = difflib.get_close_matches(key, lacking, n=1, cutoff=0.6)
            if typo:
                lacking.remove(typo[0])
                message = f"unknown field {key!r}: did you mean {typo[0]!r} (required)?"
            else:
                near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
                message = f"unknown field {key!r}" + (f": did you mean {near[0]!r}?" if near
                                                      else "")
            problems.append(Problem(_label(at), message, at, (key,)))
        problems += [Problem(_label(at), f"{key!r} is required", at) for key in lacking]
    return sorted(problems + others, key=lambda p: [str(x) for x in p.at])


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


def kubeconform_path() -> str | None:
    return shutil.which("kubeconform")


KUBECONFORM_TIMEOUT = 120  # seconds for one manifest (it answers in milliseconds)
_POINTER = re.compile(r"'(/[^']*)'")


def run_kubeconform(binary: str, text: str, validator: SchemaValidator) -> list[Problem]:
    """Validate one manifest with kubeconform (strict), giving it schemas for our CRDs."""
    with tempfile.TemporaryDirectory(prefix="gitscale-schemas-") as schemas:
        for (api_version, kind), schema in validator.schemas.items():
            group, version = api_version.split("/")
            target = Path(schemas) / group / f"{kind.lower()}_{version}.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(schema))
        template = schemas + "/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"
        try:
            proc = subprocess.run(
                [binary, "-strict", "-output", "json", "-schema-location", "default",
                 "-schema-location", template, "-"],
                input=text, capture_output=True, text=True, errors="replace",
                timeout=KUBECONFORM_TIMEOUT)
        except subprocess.TimeoutExpired:  # (a kubeconform on PATH that hangs: never a crash)
            return [Problem("kubeconform", f"{binary} gave no answer within "
                            f"{KUBECONFORM_TIMEOUT} s")]
        except OSError as exc:  # not a program this machine runs
            return [Problem("kubeconform", f"{binary} cannot be run: "
                            f"{exc.strerror or type(exc).__name__}")]
    try:
        report = json.loads(proc.stdout or "{}")
    except json.JSONDecodeError:
        report = None
    if not isinstance(report, dict):  # not kubeconform's JSON report
        return [Problem("kubeconform", (proc.stderr or proc.stdout).strip()[:500]
                        or f"exit {proc.returncode}")]
    problems = []
    resources = report.get("resources")
    for item in resources if isinstance(resources, list) else []:
        if not isinstance(item, dict):
            continue
        if item.get("status") in ("statusInvalid", "statusError"):
            name = f"{item.get('kind', '?')}/{item.get('name', '?')}"
            message = str(item.get("msg", "invalid"))
            # kubeconform's messages quote the JSON pointer of the value: its line in the file
            pointer = _POINTER.search(message)
            at = tuple(int(p) if p.isdigit() else p.replace("~1", "/").replace("~0", "~")
                       for p in pointer[1].split("/")[1:]) if pointer else ()
            problems.append(Problem(name, message, at, None,
                                    (str(item.get("kind")), str(item.get("name")))))
    if not problems and proc.returncode != 0:
        problems.append(Problem("kubeconform", (proc.stderr or "failed").strip()[:500]))
    return problems


@dataclass(frozen=True)
class Checked:
    problems: list[str]  # "PATH: where: what"
    unchecked: list[dict[str, Any]]  # objects no schema covers (in-process only)
    # objects a problem was found in; kubeconform names no object, so then all of the file's
    refused: list[dict[str, Any]] = field(default_factory=list)


class Validation:
    """How gitscale validates a manifest file, whichever command asks: kubeconform (strict) when
    it is on PATH, else in-process JSON Schema. Schemas come from gitscale's RunnerSet CRD and,
    read once the first time an object is not a RunnerSet, the CRDs committed in the repo
    (``files``: the repo's files, relative to ``root``)."""

    def __init__(self, root: Path, files: Callable[[], Iterable[str]],
                 texts: Callable[[], Iterable[tuple[str, str]]] | None = None) -> None:
        """``texts``, when given, replaces reading ``files``: the (path, text) of the files
        that may hold a CRD (``gitindex.files_containing``: git grep, and a sparse clone's
        files that are not on disk)."""
        self.schemas = SchemaValidator()
        self.binary = kubeconform_path()
        self._root = root
        self._files = files
        self._texts = texts
        self._scanned = False

    @property
    def how(self) -> str:
        return "kubeconform" if self.binary else "in-process JSON Schema"

    def check(self, path: str, text: str, objects: Sequence[dict[str, Any]],
              lines_in: str | None = None) -> Checked:
        """``text`` is the file at ``path``; ``objects`` the ones gitscale manages in it.
        ``lines_in``: the text whose lines a problem names (``reconcile`` checks its edit but
        names the lines of the file as it is in the repo: the edit is never written)."""
        if not self._scanned and not all(self.schemas.knows(o) for o in objects):
            self._scanned = True
            crds = crds_in_texts(self._texts()) if self._texts is not None \
                else crds_in_repo(self._root, self._files())
            for crd in crds:
                self.schemas.add_crd(crd)
        found: list[tuple[dict[str, Any] | None, Problem]]
        if self.binary is not None:
            found = [(None, p) for p in run_kubeconform(self.binary, text, self.schemas)]
        else:
            found = [(o, p) for o in objects for p in self.schemas.check(o)]
        refused = list(objects) if found and self.binary else \
            [o for o in objects if any(o is obj for obj, _ in found)]
        return Checked(_at_lines(path, text if lines_in is None else lines_in, found),
                       [] if self.binary else [o for o in objects if not self.schemas.knows(o)],
                       refused)


def _at_lines(path: str, text: str, found: list[tuple[dict[str, Any] | None, Problem]]
              ) -> list[str]:
    """Each problem as ``PATH:LINE: where: what`` (the text is parsed again only when there
    is a problem to place)."""
    if not found:
        return []
    try:
        documents = load_documents(text, path)
    except Exception:  # noqa: BLE001 - unreadable here: the problems still stand, without lines
        documents = []
    out = []
    for obj, problem in found:
        if problem.object is not None:  # kubeconform's: the object by its kind and name
            kind, name = problem.object
            document = next((d for d in documents if isinstance(d.data, dict)
                             and d.data.get("kind") == kind
                             and (d.data.get("metadata") or {}).get("name") == name), None)
        else:  # the object itself, else (in the text before an edit) its kind and name
            document = next((d for d in documents if d.data is obj), None) or next(
                (d for d in documents if d.data == obj), None) or next(
                (d for d in documents if isinstance(d.data, dict) and isinstance(obj, dict)
                 and d.data.get("kind") == obj.get("kind")
                 and (d.data.get("metadata") or {}).get("name")
                 == (obj.get("metadata") or {}).get("name")), None)
        line = problem.line(document) if document is not None else None
        out.append(f"{path}:{line}: {problem}" if line is not None else f"{path}: {problem}")
    return out
