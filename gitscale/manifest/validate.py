"""Schema validation of managed manifests: kubeconform when on PATH, else in-process.

``Validation`` is the one entry point (``reconcile`` before committing, ``validate`` on demand).
In-process validation builds JSON Schemas from CRDs (gitscale's own RunnerSet CRD, plus every
CustomResourceDefinition committed in the config repo), the way kubeconform's openapi2jsonschema
does, including kubeconform's ``-strict`` rule: unknown fields are errors, so ``replica: 3`` is
caught in review rather than silently pruned by the API server.

The schemas and the in-process check are ``crd_schemas``, kubeconform's run ``kubeconform``,
what either found ``problem``; this module asks the one on PATH and places each problem at
its line.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, cast

from gitscale.manifest.crd_schemas import SchemaValidator, crds_in_repo, crds_in_texts
from gitscale.manifest.kubeconform import Hung, kubeconform_path, run_kubeconform
from gitscale.manifest.problem import Problem
from gitscale.yamlio.read import load_documents


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
        that may hold a CRD (``repo.index.files_containing``: git grep, and a sparse clone's
        files that are not on disk)."""
        self.schemas = SchemaValidator()
        self.binary = kubeconform_path()
        self._root = root
        self._files = files
        self._texts = texts
        self._scanned = False
        # kubeconform hung once (on this file): not run again, each later file refused at once
        # — a pass of N files would otherwise wait N × its timeout
        self._hung: tuple[str, str] | None = None

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
            found = [(None, p) for p in self._kubeconform(path, text)]
        else:
            found = [(o, p) for o in objects for p in self.schemas.check(o)]
        refused = list(objects) if found and self.binary else \
            [o for o in objects if any(o is obj for obj, _ in found)]
        return Checked(_at_lines(path, text if lines_in is None else lines_in, found),
                       [] if self.binary else [o for o in objects if not self.schemas.knows(o)],
                       refused)


    def _kubeconform(self, path: str, text: str) -> list[Problem]:
        if self._hung is not None:
            said, first = self._hung
            return [Problem("kubeconform", f"not run: {said} on {first}")]
        try:
            return run_kubeconform(cast(str, self.binary), text, self.schemas)
        except Hung as exc:
            self._hung = (str(exc), path)
            return [Problem("kubeconform", str(exc))]


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
