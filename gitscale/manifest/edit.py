"""Surgical edits of owned fields: every byte outside the changed values stays as it was.

A YAML round trip (ruamel.yaml's included) keeps comments but still re-emits the document: it
normalises spacing in flow mappings, indentation and some quoting, which shows up in review as
noise. So nothing is re-emitted: libyaml's node marks give the exact character span of each
value, new values are spliced into the original text, and missing keys are inserted next to their
siblings with the file's own indentation and line ending. (The marks were first taken from
ruamel.yaml's composer; libyaml's are identical on every golden fixture and 7x faster.) The
result is re-read and compared with the intended object before anything is written, so a splice
bug can never produce a silently wrong manifest.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any, Sequence

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode

from gitscale.errors import ManifestError
from gitscale.yamlread import Document, load_documents

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
FieldPath = tuple[str, ...]
Value = int | str

# Where a new key goes: after the first of these siblings that exists as a one-line scalar.
_AFTER: dict[str, tuple[str, ...]] = {
    "patchID": ("replicas",),
    "effectiveTime": ("patchID", "replicas"),
    "replicas": (),
    "annotations": ("namespace", "name"),
}


@dataclass(frozen=True)
class _Splice:
    start: int
    end: int
    text: str
    order: int


@dataclass(frozen=True)
class Edited:
    """An edit's result, with both texts parsed (the verification parsed them anyway)."""

    text: str
    before: list[Document]
    after: list[Document]


def set_fields(text: str, source: str, doc_index: int, values: dict[FieldPath, Value]) -> str:
    """Return ``text`` with each path in document ``doc_index`` set to its value."""
    return edit_fields(text, source, doc_index, values).text


def edit_fields(text: str, source: str, doc_index: int, values: dict[FieldPath, Value],
                before: list[Document] | None = None) -> Edited:
    """``set_fields``, also giving the documents of both texts (``before``: those of ``text``
    when the caller has them)."""
    if text.startswith("\ufeff"):
        # libyaml's marks count from after a byte-order mark: edit without it, then put it back
        inner = edit_fields(text[1:], source, doc_index, values, before)
        return Edited("\ufeff" + inner.text, inner.before, inner.after)
    try:
        roots = list(yaml.compose_all(text, Loader=_LOADER))
    except yaml.YAMLError as exc:
        raise ManifestError(source, f"not valid YAML: {exc}") from None
    docs = [r for r in roots]
    root = _document_root(docs, doc_index, text, source)
    newline = "\r\n" if "\r\n" in text else "\n"
    splices: list[_Splice] = []
    pending: dict[tuple[int, str], dict[FieldPath, Value]] = {}
    parents: dict[int, MappingNode] = {}
    for order, (path, value) in enumerate(values.items()):
        node: Node = root
        for depth, key in enumerate(path):
            if not isinstance(node, MappingNode):
                raise ManifestError(source, f"{'.'.join(path[:depth])} is not a mapping")
            child = _lookup(node, key)
            if child is None:
                # Group everything missing under this mapping into one insertion.
                pending.setdefault((id(node), key), {})[path[depth + 1:]] = value
                parents[id(node)] = node
                break
            key_node, value_node = child
            if value_node.start_mark.index < key_node.end_mark.index or \
                    text.startswith("&", value_node.start_mark.index):
                # An alias's node sits at its anchor, elsewhere in the file: splicing there
                # would change every other use of it too.
                raise ManifestError(source, f"{'.'.join(path[:depth + 1])} is a YAML anchor "
                                    "or alias; gitscale edits only plain values there",
                                    key_node.start_mark.line + 1)
            if depth == len(path) - 1:
                if not isinstance(child[1], ScalarNode):
                    raise ManifestError(source, f"{'.'.join(path)} is not a scalar",
                                        child[1].start_mark.line + 1)
                splices.append(_replace(text, child[0], child[1], value, order))
            node = child[1]
    inserted: set[int] = set()
    for order, ((parent_id, key), subtree) in enumerate(pending.items(), start=len(values)):
        splices.append(_insert(text, root, parents[parent_id], key, subtree, newline, order,
                               first=parent_id not in inserted))
        inserted.add(parent_id)
    result = text
    for splice in sorted(splices, key=lambda s: (s.start, s.order), reverse=True):
        result = result[: splice.start] + splice.text + result[splice.end:]
    old, new = _verify(text, result, source, doc_index, values, before)
    return Edited(result, old, new)


def _document_root(docs: list[Node], doc_index: int, text: str, source: str) -> Node:
    # PyYAML (used for reading) skips empty documents the same way; map indexes by position.
    if doc_index >= len(docs):
        raise ManifestError(source, "the document to edit is missing (file changed while editing?)")
    return docs[doc_index]


def _lookup(node: MappingNode, key: str) -> tuple[Node, Node] | None:
    for k, v in node.value:
        if isinstance(k, ScalarNode) and k.value == key:
            return k, v
    return None


def render(value: Value, like: ScalarNode | None = None) -> str:
    if isinstance(value, int):
        return str(value)
    # Single quotes have no escapes (and fold line breaks): keep them only for printable text.
    if like is not None and like.style == "'" and value.isprintable():
        return "'" + value.replace("'", "''") + "'"
    if all(ord(c) <= 0xFFFF for c in value):
        return json.dumps(value)
    # json.dumps writes U+10000 and up as a surrogate pair, which YAML reads as two characters
    return '"' + "".join(json.dumps(c)[1:-1] if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"
                         for c in value) + '"'


def _replace(text: str, key: Node, node: ScalarNode, value: Value, order: int) -> _Splice:
    start, end = node.start_mark.index, node.end_mark.index
    rendered = render(value, node)
    if start == end:  # an empty (null) value: `replicas:`; its mark may be on the next line
        colon = key.end_mark.index
        while colon < len(text) and text[colon] in " \t":
            colon += 1
        if colon < len(text) and text[colon] == ":":
            return _Splice(colon + 1, colon + 1, " " + rendered, order)
        if start > 0 and text[start - 1] == ":":
            rendered = " " + rendered
    return _Splice(start, end, rendered, order)


def _insert(text: str, root: Node, mapping: MappingNode, key: str,
            subtree: dict[FieldPath, Value], newline: str, order: int,
            first: bool = True) -> _Splice:
    if mapping.flow_style:
        return _insert_flow(text, mapping, key, subtree, order, first)
    if not mapping.value:
        raise ManifestError("", "cannot insert into an empty block mapping")
    indent = mapping.value[0][0].start_mark.column
    step = _indent_step(mapping, root)
    lines = _render_block(key, subtree, indent, step)
    anchor = _anchor(mapping, key)
    if anchor is not None:
        line_end = text.find("\n", anchor.end_mark.index)
        if line_end == -1:
            line_end = len(text)
            if not text.endswith("\n"):
                return _Splice(line_end, line_end, newline + newline.join(lines), order)
        if line_end > 0 and text[line_end - 1] == "\r":
            line_end -= 1
        return _Splice(line_end, line_end, newline + newline.join(lines), order)
    first_key = mapping.value[0][0]
    at = first_key.start_mark.index
    body = newline.join(lines)[indent:]  # the first line is already indented in place
    return _Splice(at, at, body + newline + " " * indent, order)


def _anchor(mapping: MappingNode, key: str) -> ScalarNode | None:
    for sibling in _AFTER.get(key, ()):
        found = _lookup(mapping, sibling)
        if found and isinstance(found[1], ScalarNode):
            value = found[1]
            if value.start_mark.line == value.end_mark.line == found[0].start_mark.line:
                return value
    return None


def _indent_step(mapping: MappingNode, root: Node) -> int:
    """The file's indentation step: from ``mapping``'s own nested mappings if it has any, else
    from the first nested block mapping in the document (``metadata`` with only a name in a
    4-space file must get a 4-space ``annotations`` block, not 2)."""
    queue: list[Node] = [mapping, root]
    while queue:
        parent = queue.pop(0)
        if not isinstance(parent, MappingNode) or parent.flow_style or not parent.value:
            continue
        for _, value in parent.value:
            if isinstance(value, MappingNode) and not value.flow_style and value.value:
                first: int = parent.value[0][0].start_mark.column
                step: int = value.value[0][0].start_mark.column - first
                if step > 0:
                    return step
        if parent is not mapping:
            queue.extend(value for _, value in parent.value)
    return 2


def _render_block(key: str, subtree: dict[FieldPath, Value], indent: int, step: int) -> list[str]:
    pad = " " * indent
    if () in subtree:
        return [f"{pad}{render_key(key)}: {render(subtree[()])}"]
    lines = [f"{pad}{render_key(key)}:"]
    children: dict[str, dict[FieldPath, Value]] = {}
    for path, value in subtree.items():
        children.setdefault(path[0], {})[path[1:]] = value
    for child, rest in children.items():
        lines.extend(_render_block(child, rest, indent + step, step))
    return lines


def _render_flow(key: str, subtree: dict[FieldPath, Value]) -> str:
    if () in subtree:
        return f"{render_key(key)}: {render(subtree[()])}"
    children: dict[str, dict[FieldPath, Value]] = {}
    for path, value in subtree.items():
        children.setdefault(path[0], {})[path[1:]] = value
    inner = ", ".join(_render_flow(child, rest) for child, rest in children.items())
    return f"{render_key(key)}: {{{inner}}}"


def _insert_flow(text: str, mapping: MappingNode, key: str, subtree: dict[FieldPath, Value],
                 order: int, first: bool = True) -> _Splice:
    close = mapping.end_mark.index - 1
    while close > 0 and text[close] != "}":
        close -= 1
    entry = _render_flow(key, subtree)
    if mapping.value:
        last = mapping.value[-1][1]
        at = last.end_mark.index
        return _Splice(at, at, ", " + entry, order)
    # `spec: {}` getting several keys: every insertion after the first needs its comma
    return _Splice(close, close, entry if first else ", " + entry, order)


def render_key(key: str) -> str:
    plain = key.replace("-", "").replace("_", "").replace(".", "").replace("/", "").isalnum()
    return key if plain and not key[0].isdigit() else json.dumps(key)


def _verify(before: str, after: str, source: str, doc_index: int,
            values: dict[FieldPath, Value],
            documents: list[Document] | None) -> tuple[list[Document], list[Document]]:
    """Re-read the result: the target document must equal the old one with ``values`` set."""
    old_documents = documents or load_documents(before, source, ManifestError)
    old = [d.data for d in old_documents]
    try:
        new_documents = load_documents(after, source, ManifestError)
        new = [d.data for d in new_documents]
    except ManifestError as exc:
        raise ManifestError(source, f"editing produced invalid YAML ({exc.detail}); nothing was "
                            "written. This is a gitscale bug: please report it") from None
    expected = copy.deepcopy(old)
    for path, value in values.items():
        _set(expected[doc_index], path, value)
    if new != expected:
        raise ManifestError(source, "editing changed more than the owned fields; nothing was "
                            "written. This is a gitscale bug: please report it")
    return old_documents, new_documents


def _set(obj: Any, path: Sequence[str], value: Value) -> None:
    for key in path[:-1]:
        obj = obj.setdefault(key, {})
    obj[path[-1]] = value
