"""An edit's result read again: it must read as the original with the owned values set (and
the removed keys gone), or nothing is written. A splice bug can then never produce a silently
wrong manifest, only an error that asks for a bug report."""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from gitscale.errors import ManifestError
from gitscale.manifest.target import FieldPath
from gitscale.yamlio.read import Document, load_documents

if TYPE_CHECKING:
    from gitscale.manifest.splice import Value


def verify(before: str, after: str, source: str, doc_index: int,
            values: Mapping[FieldPath, Value], documents: list[Document] | None,
            removed: Sequence[FieldPath] = ()) -> tuple[list[Document], list[Document]]:
    """Re-read the result: the target document must equal the old one with ``values`` set.
    The documents returned for the result hold that expected data (equal, as just checked, to
    what the result reads as), sharing every untouched part with the old documents."""
    old_documents = documents or load_documents(before, source, ManifestError)
    old = [d.data for d in old_documents]
    try:
        new = [d.data for d in load_documents(after, source, ManifestError)]
    except ManifestError as exc:
        raise ManifestError(source, f"editing produced invalid YAML ({exc.detail}); nothing was "
                            "written. This is a gitscale bug: please report it") from None
    expected = _expected(old, doc_index, values, removed)
    if new != expected:
        raise ManifestError(source, "editing changed more than the owned fields; nothing was "
                            "written. This is a gitscale bug: please report it")
    return old_documents, [Document(data, after, i) for i, data in enumerate(expected)]


def _expected(old: list[Any], doc_index: int, values: Mapping[FieldPath, Value],
              removed: Sequence[FieldPath] = ()) -> list[Any]:
    """``old`` with ``values`` set in document ``doc_index`` and the ``removed`` keys gone:
    the mappings on the way to each value are copied, everything else is shared (a deep copy
    of every manifest was a tenth of a first pass)."""
    expected = list(old)
    if type(old[doc_index]) is not dict:
        expected = copy.deepcopy(old)
        for path, value in values.items():
            _set(expected[doc_index], path, value)
        for path in removed:
            _pop(expected[doc_index], path)
        return expected
    root = expected[doc_index] = dict(old[doc_index])
    copied = {id(root)}
    changes: list[tuple[FieldPath, Any]] = [*values.items(), *((p, _MISSING) for p in removed)]
    for path, value in changes:
        obj = root
        for key in path[:-1]:
            child = obj.get(key, _MISSING)
            if child is _MISSING:
                child = obj[key] = {}
                copied.add(id(child))
            elif id(child) not in copied:
                if type(child) is not dict:  # not reached: the edit refused a non-mapping
                    raise ManifestError("", f"{'.'.join(path)}: {key} is not a mapping")
                child = obj[key] = dict(child)
                copied.add(id(child))
            obj = child
        if value is _MISSING:
            obj.pop(path[-1], None)
        else:
            obj[path[-1]] = value
    return expected


def _pop(obj: Any, path: Sequence[str]) -> None:
    for key in path[:-1]:
        obj = obj[key]
    obj.pop(path[-1], None)


_MISSING: Any = object()


def _set(obj: Any, path: Sequence[str], value: Value) -> None:
    for key in path[:-1]:
        obj = obj.setdefault(key, {})
    obj[path[-1]] = value
