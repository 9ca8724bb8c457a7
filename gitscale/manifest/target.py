"""Find a set's object in its manifest file and read the fields gitscale owns."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gitscale.config.load import ObjectRef
from gitscale.core.model import Current
from gitscale.errors import ManifestError
from gitscale.runnerset_api import GROUP, PATCH_ID_MAX, REPLICAS_MAX
from gitscale.timeutil import parse_time
from gitscale.yamlio.read import Document, load_documents
from gitscale.yamlio.span import Span

A_PATCH_ID = "gitscale.dev/patch-id"
A_JOBS = "gitscale.dev/jobs"
A_LAST_SCALE_UP = "gitscale.dev/last-scale-up"
A_DRAINED = "gitscale.dev/drained"
A_PAUSED = "gitscale.dev/paused"  # set by people: gitscale leaves the object alone
LEGACY_GROUP = "actions.summerwind.dev"


class NoSuchObject(ManifestError):
    """The set's ``object`` matches no object, or several, in its manifest: what to fix is
    the config's ``object:``, so callers name its line (``Config.blame``)."""


@dataclass(frozen=True)
class Fields:
    """Which owned fields this kind of object carries in its spec."""

    patch_id: bool
    effective_time: bool


GITSCALE = Fields(patch_id=True, effective_time=True)
LEGACY = Fields(patch_id=False, effective_time=True)
REPLICAS_ONLY = Fields(patch_id=False, effective_time=False)

# Every kind gitscale writes, by apiVersion and kind: one table, so adding a kind is one line.
# Anything else is refused: `replicas` written into an object that does not mean it by
# `spec.replicas` (a ConfigMap, an unknown version of our own CRD) would be committed, applied
# and ignored.
KINDS: dict[tuple[str, str], Fields] = {
    (f"{GROUP}/v1alpha1", "RunnerSet"): GITSCALE,
    (f"{LEGACY_GROUP}/v1alpha1", "RunnerDeployment"): LEGACY,
    (f"{LEGACY_GROUP}/v1alpha1", "RunnerSet"): LEGACY,
    ("apps/v1", "Deployment"): REPLICAS_ONLY,
    ("apps/v1", "StatefulSet"): REPLICAS_ONLY,
    ("apps/v1", "ReplicaSet"): REPLICAS_ONLY,
    ("v1", "ReplicationController"): REPLICAS_ONLY,
    ("argoproj.io/v1alpha1", "Rollout"): REPLICAS_ONLY,
}


def fields_for(api_version: str, kind: str) -> Fields | None:
    """The owned fields of this kind of object; None for a kind gitscale does not scale."""
    return KINDS.get((api_version, kind))


def known_kinds() -> str:
    return ", ".join(f"{api} {kind}" for api, kind in KINDS)


@dataclass(frozen=True)
class Target:
    """One object inside one file, as read at the start of a pass."""

    path: str
    text: str
    documents: tuple[Document, ...]
    index: int  # which YAML document
    kind: str
    name: str
    fields: Fields
    current: Current

    @property
    def obj(self) -> dict[str, Any]:
        data: dict[str, Any] = self.documents[self.index].data
        return data


def read_target(path: str, text: str, ref: ObjectRef,
                documents: list[Document] | None = None) -> Target:
    """``ref``'s object in ``text`` (``documents``: the text already parsed)."""
    if documents is None:
        documents = load_documents(text, path, ManifestError)
    candidates = []
    for index, doc in enumerate(documents):
        data = doc.data
        if data is None:
            continue
        if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
            raise ManifestError(path, "a document is not a Kubernetes object (no kind)",
                                doc.line_of([]))
        raw_meta = data.get("metadata")
        meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
        if ref.kind is not None and data["kind"] != ref.kind:
            continue
        if ref.name is not None and meta.get("name") != ref.name:
            continue
        if ref.namespace is not None and meta.get("namespace") != ref.namespace:
            continue
        candidates.append(index)
    wanted = _describe(ref)
    if not candidates:
        raise NoSuchObject(path, f"no object matches {wanted}")
    if len(candidates) > 1:
        raise NoSuchObject(path, f"{len(candidates)} objects match {wanted}; set `object: "
                           "{kind: ..., name: ...}` for this set")
    index = candidates[0]
    doc = documents[index]
    data = doc.data
    meta = data.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        raise ManifestError(path, "object has no metadata.name", doc.line_of([]))
    spec = data.get("spec")
    if not isinstance(spec, dict):
        raise ManifestError(path, f"{data['kind']} {meta['name']} has no spec mapping",
                            doc.line_of(["spec"]))
    api_version = data.get("apiVersion")
    fields = fields_for(api_version, data["kind"]) if isinstance(api_version, str) else None
    if fields is None:
        at = ["apiVersion"] if "apiVersion" in data else ["kind"]
        raise ManifestError(path, f"{api_version or '(no apiVersion)'} {data['kind']} "
                            f"{meta['name']} is not a kind gitscale scales (it writes "
                            f"spec.replicas of: {known_kinds()})", doc.line_of(at))
    current = _current(path, doc, spec, meta, fields)
    return Target(path, text, tuple(documents), index, data["kind"], meta["name"], fields, current)


def _describe(ref: ObjectRef) -> str:
    parts = [f"{k}={v}" for k, v in (("kind", ref.kind), ("name", ref.name),
                                      ("namespace", ref.namespace)) if v]
    return "{" + ", ".join(parts) + "}" if parts else "any object"


def is_digits(text: str) -> bool:
    """ASCII digits only, and few enough for int(): "²".isdigit() is true, int("²") fails."""
    return text.isascii() and text.isdigit() and len(text) <= 18


def _int_field(path: str, doc: Document, at: list[Any], value: Any, hi: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= hi:
        raise ManifestError(path, f"{'.'.join(at)} must be an integer from 0 to {hi}, "
                            f"found {value!r}", doc.line_of(at))
    return int(value)


def _current(path: str, doc: Document, spec: dict[str, Any], meta: dict[str, Any],
             fields: Fields) -> Current:
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        raise ManifestError(path, "metadata.annotations must be a mapping",
                            doc.line_of(["metadata", "annotations"]))
    replicas = _int_field(path, doc, ["spec", "replicas"], spec.get("replicas"),
                           REPLICAS_MAX)
    if fields.patch_id:
        patch_id = _int_field(path, doc, ["spec", "patchID"], spec.get("patchID"), PATCH_ID_MAX)
    else:
        raw = annotations.get(A_PATCH_ID)
        patch_id = int(raw) if isinstance(raw, str) and is_digits(raw) else None
        if patch_id is not None and patch_id > PATCH_ID_MAX:
            patch_id = None
    last_up = annotations.get(A_LAST_SCALE_UP)
    last_scale_up: datetime | None = None
    if last_up is not None:
        try:
            last_scale_up = parse_time(str(last_up))
        except ValueError as exc:
            raise ManifestError(path, f"annotation {A_LAST_SCALE_UP}: {exc}",
                                doc.line_of(["metadata", "annotations", A_LAST_SCALE_UP])) from None
    jobs = annotations.get(A_JOBS)
    return Current(
        replicas=replicas,
        patch_id=patch_id,
        last_scale_up=last_scale_up,
        fingerprint=str(jobs) if jobs is not None else None,
        drained=str(annotations.get(A_DRAINED, "")).lower() == "true",
        paused=str(annotations.get(A_PAUSED, "")).lower() == "true",
    )


@dataclass(frozen=True)
class Located:
    """What a pass needs to decide about one object, without the parsed file (cacheable)."""

    index: int
    kind: str
    name: str
    fields: Fields
    current: Current


def object_key(ref: ObjectRef) -> str:
    """The config key to blame for an object that cannot be found: ``object`` when the set
    names one, else ``manifest`` (the file holds none, or several)."""
    return "object" if ref != ObjectRef() else "manifest"


def locate(path: str, text: str, ref: ObjectRef, documents: list[Document] | None = None,
           kept: KeptReads | None = None) -> Located:
    """``ref``'s object in ``text``, without the parsed file. A pass locates the sets whose
    manifest it does not know yet and then edits most of them: with ``kept``, the text's read
    is kept there for that edit."""
    if documents is None:
        documents = read_documents(text, path, kept)
    target = read_target(path, text, ref, documents)
    return Located(target.index, target.kind, target.name, target.fields, target.current)


KEPT_READS = 10_000  # (a first pass over 10,000 new sets keeps ~25 MiB of them)


class KeptReads:
    """The texts one pass read to locate its sets, with the span of every value: the edit that
    usually follows takes its text's read (``gitscale.manifest.edit``) instead of reading the
    text again. One per pass, made by the pass and dropped with it, with the reads no edit took
    (sets not written); bounded all the same."""

    def __init__(self, limit: int = KEPT_READS) -> None:
        self.limit = limit
        self._reads: dict[str, tuple[list[Any], list[Span]]] = {}

    def keep(self, text: str, datas: list[Any], roots: list[Span]) -> None:
        if len(self._reads) < self.limit:
            self._reads[text] = (datas, roots)

    def take(self, text: str) -> tuple[list[Any], list[Span]] | None:
        """The read of ``text`` (each document's data and root span), once."""
        return self._reads.pop(text, None)

    def __contains__(self, text: object) -> bool:
        return text in self._reads

    def __len__(self) -> int:
        return len(self._reads)


def read_documents(text: str, source: str, kept: KeptReads | None = None) -> list[Document]:
    """The documents of ``text``, as ``load_documents`` reads them; when the line reader takes
    the text, its spans go to ``kept`` for an edit of the same text."""
    from gitscale.yamlio import block as yamlblock, fast as yamlfast

    if kept is None:
        return load_documents(text, source, ManifestError)
    try:
        datas, roots = yamlblock.load(text, yamlfast.scalar, spans=True)
    except (yamlblock.Deferred, yamlfast.Unsupported):
        return load_documents(text, source, ManifestError)
    kept.keep(text, datas, roots)
    return [Document(data, text, index) for index, data in enumerate(datas)]
