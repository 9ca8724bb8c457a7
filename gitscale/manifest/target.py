"""Find a set's object in its manifest file and read the fields gitscale owns; where each kind
of object keeps them is one table (``KINDS``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gitscale.config.load import ObjectRef
from gitscale.core.model import Current
from gitscale.errors import ManifestError, shown
from gitscale.runnerset_api import BACKLOG_MAX, GROUP, PATCH_ID_MAX, REPLICAS_MAX
from gitscale.timeutil import parse_time
from gitscale.yamlio.read import Document, load_documents
from gitscale.yamlio.span import Span

if TYPE_CHECKING:
    from gitscale.config.load import Config, RunnerSetConfig
    from gitscale.errors import ConfigError

A_PATCH_ID = "gitscale.dev/patch-id"
A_JOBS = "gitscale.dev/jobs"
A_LAST_SCALE_UP = "gitscale.dev/last-scale-up"
A_DRAINED = "gitscale.dev/drained"
# still-waiting re-affirms in a row for the jobs of A_JOBS (core.still_waiting); absent: none
A_STILL_WAITING = "gitscale.dev/still-waiting"
A_PAUSED = "gitscale.dev/paused"  # set by people: gitscale leaves the object alone
LEGACY_GROUP = "actions.summerwind.dev"


class NoSuchObject(ManifestError):
    """The set's ``object`` matches no object, or several, in its manifest: what to fix is
    the config's ``object:``, so callers name its line (``blamed``)."""

    def blamed(self, config: Config, runner_set: RunnerSetConfig) -> ConfigError:
        """This error said at the line of ``runner_set``'s ``object`` in the config."""
        return config.blame(runner_set.name, object_key(runner_set.object),
                            f"{self.detail} in {runner_set.manifest}")


FieldPath = tuple[str, ...]
ANNOTATIONS: FieldPath = ("metadata", "annotations")


@dataclass(frozen=True)
class Owned:
    """Where one kind of object keeps the fields gitscale owns, each a path in the object: what
    a pass reads (``read_target``), writes (``engine._values``), where the editor puts a missing
    one (``after``), what the state cache keeps (a row names its kind) and what `plan` shows.

    ``replicas``: the count the kind's controller scales to. ``patch_id``: in the spec (an
    integer its controller reads) or an annotation (its digits, for gitscale alone). An
    ``effective_time`` the controller reads, and a ``backlog`` it refills from under saturation
    (gitscale's controller), when the kind has them. ``annotations``: the mapping of gitscale's
    own annotations (``A_*``). ``unset``: what the kind's controller runs while ``replicas``
    is absent, when that is not none at all (Kubernetes defaults an apps/v1 object's replicas to
    1, actions-runner-controller a RunnerDeployment's): read as the current count, so a first
    write of 1 is not taken for a scale-up (which would hold the next scale-down)."""

    replicas: FieldPath
    patch_id: FieldPath
    effective_time: FieldPath | None = None
    backlog: FieldPath | None = None
    annotations: FieldPath = ANNOTATIONS
    unset: int | None = None
    # worked out once from the paths above (a pass asks for each on every set it reads or edits)
    patch_in_annotation: bool = field(init=False, repr=False, compare=False)
    after: dict[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        in_annotation = self.patch_id[:len(self.annotations)] == self.annotations
        object.__setattr__(self, "patch_in_annotation", in_annotation)
        # Where the editor inserts a missing owned key: after the nearest of these siblings
        # that it finds as a one-line scalar, else first in its mapping. Replicas, patch ID,
        # effective time and backlog go in that order; a new annotations mapping goes after
        # the object's name (or namespace).
        fields = [p for p in (self.replicas, self.patch_id, self.effective_time, self.backlog)
                  if p is not None and p[:len(self.annotations)] != self.annotations]
        after = {path[-1]: tuple(other[-1] for other in reversed(fields[:n])
                                 if other[:-1] == path[:-1])
                 for n, path in enumerate(fields)}
        after[self.annotations[-1]] = ("namespace", "name")
        object.__setattr__(self, "after", after)

    def annotation(self, name: str) -> FieldPath:
        return (*self.annotations, name)

    @property
    def reaffirms(self) -> bool:
        """Whether writing the same replicas again changes what the kind's controller reads (a
        patch ID in its spec, or an effective time): a plain Deployment has nothing to
        re-affirm, and gets no commit for it."""
        return not self.patch_in_annotation or self.effective_time is not None

    def shown(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The owned fields' values in ``obj``, as `plan` shows them (the patch ID a number)."""
        patch = _get(obj, self.patch_id)
        return {
            "replicas": _get(obj, self.replicas),
            "patchID": int(patch) if isinstance(patch, (int, str)) and is_digits(str(patch))
            else None,
            "effectiveTime": _get(obj, self.effective_time) if self.effective_time else None,
            # a RunnerSet's: the jobs its replicas could not cover (absent means 0); a kind
            # without one says null, so that every entry has the same keys
            "backlog": None if self.backlog is None else _get(obj, self.backlog) or 0,
        }


SPEC_PATCH = Owned(("spec", "replicas"), ("spec", "patchID"), ("spec", "effectiveTime"),
                   ("spec", "backlog"))
LEGACY = Owned(("spec", "replicas"), (*ANNOTATIONS, A_PATCH_ID), ("spec", "effectiveTime"),
               unset=1)
REPLICAS_ONLY = Owned(("spec", "replicas"), (*ANNOTATIONS, A_PATCH_ID), unset=1)

# Every kind gitscale writes, by apiVersion and kind, with where it keeps the owned fields: one
# table, so adding a kind is one line (CONTRIBUTING.md, "Adding a target kind"). Anything else
# is refused: `replicas` written into an object that does not mean it (a ConfigMap, an unknown
# version of our own CRD) would be committed, applied and ignored.
KINDS: dict[tuple[str, str], Owned] = {
    (f"{GROUP}/v1alpha1", "RunnerSet"): SPEC_PATCH,
    (f"{LEGACY_GROUP}/v1alpha1", "RunnerDeployment"): LEGACY,
    (f"{LEGACY_GROUP}/v1alpha1", "RunnerSet"): LEGACY,
    ("apps/v1", "Deployment"): REPLICAS_ONLY,
    ("apps/v1", "StatefulSet"): REPLICAS_ONLY,
    ("apps/v1", "ReplicaSet"): REPLICAS_ONLY,
    ("v1", "ReplicationController"): REPLICAS_ONLY,
    ("argoproj.io/v1alpha1", "Rollout"): REPLICAS_ONLY,
}


def owned_for(api_version: str, kind: str) -> Owned | None:
    """Where this kind of object keeps the owned fields; None for a kind gitscale does not
    scale."""
    return KINDS.get((api_version, kind))


def known_kinds() -> str:
    return ", ".join(f"{api} {kind}" + ("" if owned.replicas == ("spec", "replicas")
                                        else f" ({'.'.join(owned.replicas)})")
                     for (api, kind), owned in KINDS.items())


@dataclass(frozen=True)
class Target:
    """One object inside one file, as read at the start of a pass."""

    path: str
    text: str
    documents: tuple[Document, ...]
    index: int  # which YAML document
    api_version: str
    kind: str
    name: str
    owned: Owned
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
        held = [i for i, doc in enumerate(documents) if isinstance(doc.data, dict)]
        raise NoSuchObject(path, f"no object matches {wanted}" + (
            f"; the file holds {_objects(documents, held)}" if held else ""))
    if len(candidates) > 1:
        raise NoSuchObject(path, f"{len(candidates)} objects match {wanted}; set `object: "
                           "{kind: ..., name: ...}` for this set to one of "
                           f"{_objects(documents, candidates)}")
    index = candidates[0]
    doc = documents[index]
    data = doc.data
    meta = data.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        raise ManifestError(path, "object has no metadata.name", doc.line_of([]))
    api_version = data.get("apiVersion")
    owned = owned_for(api_version, data["kind"]) if isinstance(api_version, str) else None
    top = owned.replicas[0] if owned is not None else "spec"  # what holds the owned fields
    if not isinstance(data.get(top), dict):
        raise ManifestError(path, f"{data['kind']} {meta['name']} has no {top} mapping",
                            doc.line_of([top]))
    if owned is None:
        at = ["apiVersion"] if "apiVersion" in data else ["kind"]
        raise ManifestError(path, f"{api_version or '(no apiVersion)'} {data['kind']} "
                            f"{meta['name']} is not a kind gitscale scales (it writes "
                            f"spec.replicas of: {known_kinds()})", doc.line_of(at))
    current = _current(path, doc, data, owned)
    return Target(path, text, tuple(documents), index, str(api_version), data["kind"],
                  meta["name"], owned, current)


def _objects(documents: list[Document], indexes: list[int], most: int = 5) -> str:
    """The objects at ``indexes`` as a person finds them: kind, name and line."""
    def one(index: int) -> str:
        data = documents[index].data
        meta = data.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        said = name if isinstance(name, str) and 0 < len(name) <= 253 else shown(name)
        return f"{data.get('kind')} {said} " \
               f"(line {documents[index].line_of([])})"
    said = ", ".join(one(i) for i in indexes[:most])
    return said + (f" and {len(indexes) - most} more" if len(indexes) > most else "")


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


def _get(data: Any, path: FieldPath) -> Any:
    """The value at ``path``; None when it or a mapping on the way is missing."""
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _flag(path: str, doc: Document, owned: Owned, annotations: dict[str, Any],
          key: str) -> bool:
    """A yes-or-no annotation (``gitscale.dev/paused``, ``gitscale.dev/drained``): "true" or
    "false" (any case; a YAML boolean too), absent or empty for no. Any other value ("yes",
    "on", "1", a typo) is refused at its line: read as no, it had gitscale scale a set that
    a person meant to hold."""
    value = annotations.get(key)
    text = "" if value is None else str(value).strip().lower()
    if text in ("true", "false", ""):
        return text == "true"
    raise ManifestError(path, f"annotation {key}: {shown(value)} is neither \"true\" nor "
                        "\"false\"", doc.line_of([*owned.annotations, key]))


def _current(path: str, doc: Document, data: dict[str, Any], owned: Owned) -> Current:
    annotations = _get(data, owned.annotations) or {}
    if not isinstance(annotations, dict):
        raise ManifestError(path, f"{'.'.join(owned.annotations)} must be a mapping",
                            doc.line_of(list(owned.annotations)))
    replicas = _int_field(path, doc, list(owned.replicas), _get(data, owned.replicas),
                          REPLICAS_MAX)
    if replicas is None:
        replicas = owned.unset
    if not owned.patch_in_annotation:
        patch_id = _int_field(path, doc, list(owned.patch_id), _get(data, owned.patch_id),
                              PATCH_ID_MAX)
    else:
        raw = annotations.get(owned.patch_id[-1])
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
                                doc.line_of([*owned.annotations, A_LAST_SCALE_UP])) from None
    jobs = annotations.get(A_JOBS)
    reaffirms = annotations.get(A_STILL_WAITING)
    if reaffirms is not None and not is_digits(str(reaffirms)):
        # read as 0 it would shorten a backoff, read as anything else lengthen it: refused
        raise ManifestError(path, f"annotation {A_STILL_WAITING}: {shown(reaffirms)} is not a "
                            "count (digits; gitscale writes it, and removes it when the wait "
                            "ends)", doc.line_of([*owned.annotations, A_STILL_WAITING]))
    backlog = None
    if owned.backlog is not None:  # absent: none
        backlog = _int_field(path, doc, list(owned.backlog), _get(data, owned.backlog),
                             BACKLOG_MAX) or 0
    written_at = None  # (read where the controller holds slots by it: with a backlog)
    if owned.backlog is not None and owned.effective_time is not None:
        raw_time = _get(data, owned.effective_time)
        try:
            written_at = parse_time(str(raw_time)) if raw_time is not None else None
        except ValueError:
            written_at = None  # (the schema's to refuse; no re-affirm before a write)
    return Current(
        replicas=replicas,
        patch_id=patch_id,
        last_scale_up=last_scale_up,
        fingerprint=str(jobs) if jobs is not None else None,
        drained=_flag(path, doc, owned, annotations, A_DRAINED),
        paused=_flag(path, doc, owned, annotations, A_PAUSED),
        backlog=backlog,
        written_at=written_at,
        reaffirms=int(str(reaffirms)) if reaffirms is not None else 0,
    )


@dataclass(frozen=True)
class Located:
    """What a pass needs to decide about one object, without the parsed file (cacheable)."""

    index: int
    api_version: str
    kind: str
    name: str
    owned: Owned  # (the row of KINDS for its apiVersion and kind)
    current: Current


def object_key(ref: ObjectRef) -> str:
    """The config key to blame for an object that cannot be found: ``object`` when the set
    names one, else ``manifest`` (the file holds none, or several)."""
    return "object" if ref != ObjectRef() else "manifest"


def shared_object(config: Config, runner_set: RunnerSetConfig, owner: str, kind: str,
                  name: str) -> ConfigError:
    """``runner_set`` resolves to the object (``kind`` ``name``) of the set ``owner``: both
    would write it, the last one winning while the commit describes both (an entry copied
    without changing its ``object``). Said at the set's line, naming the owner's."""
    theirs = object_key(config.get(owner).object)
    return config.blame(
        runner_set.name, object_key(runner_set.object),
        f"resolves to {kind} {name} in {runner_set.manifest}, the object of runner set "
        f"{owner!r} ({config.path}:{config.line(owner, theirs)}): two sets would write one "
        "object; give this set its own `object: {kind: ..., name: ...}`")


def locate(path: str, text: str, ref: ObjectRef, documents: list[Document] | None = None,
           kept: KeptReads | None = None) -> Located:
    """``ref``'s object in ``text``, without the parsed file. A pass locates the sets whose
    manifest it does not know yet and then edits most of them: with ``kept``, the text's read
    is kept there for that edit."""
    if documents is None:
        documents = read_documents(text, path, kept)
    target = read_target(path, text, ref, documents)
    return Located(target.index, target.api_version, target.kind, target.name, target.owned,
                   target.current)


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
