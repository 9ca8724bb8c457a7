"""Surgical edits of owned fields: every byte outside the changed values stays as it was.

A YAML round trip (ruamel.yaml's included) keeps comments but still re-emits the document: it
normalises spacing in flow mappings, indentation and some quoting, which shows up in review as
noise. So nothing is re-emitted: the exact character span of each value (libyaml's node marks,
or the same offsets from ``gitscale.yamlio.block``, which reads a manifest's usual block style
without libyaml, data and spans in one pass) tells where to splice new values into the original
text, and missing keys are inserted next to their siblings with the file's own indentation and
line ending (``gitscale.manifest.splice``). The result is re-read and compared with the intended
object before anything is written (``gitscale.manifest.verify``), so a splice bug can never
produce a silently wrong manifest.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from gitscale.errors import ManifestError
from gitscale.manifest.splice import Splice, Value, apply, insert, replace
from gitscale.manifest.target import SPEC_PATCH, FieldPath, KeptReads, Owned
from gitscale.manifest.verify import verify
from gitscale.yamlio import block as yamlblock
from gitscale.yamlio import fast as yamlfast
from gitscale.yamlio.read import Document
from gitscale.yamlio.span import MAP, SCALAR, SEQ, Span

if TYPE_CHECKING:
    from yaml.nodes import Node

# PyYAML is imported only for a text the line reader does not take (flow style, anchors, block
# scalars...): a pass that edits block-style manifests never needs it, and importing it costs
# ≈ 20 ms of a CLI start.

__all__ = ["Edit", "Edited", "Remove", "Value", "edit_fields", "set_fields"]


@dataclass(frozen=True)
class Remove:
    """As a value: remove the key (an annotation gitscale no longer needs). Removed only where
    that is one whole line of a block mapping that keeps other keys, with nothing else on it
    (no comment, no other key); anywhere else (a flow mapping, the mapping's only key, a key
    over several lines) ``fallback`` is written instead, as a value would be. An absent key
    stays absent."""

    fallback: str


Edit = Value | Remove


_LONE_CR = re.compile(r"\r(?!\n)")


@dataclass(frozen=True)
class Edited:
    """An edit's result, with both texts parsed (the verification parsed them anyway)."""

    text: str
    before: list[Document]
    after: list[Document]


def set_fields(text: str, source: str, doc_index: int, values: Mapping[FieldPath, Edit],
               owned: Owned = SPEC_PATCH) -> str:
    """Return ``text`` with each path in document ``doc_index`` set to its value; a missing
    key goes where ``owned`` (the object's kind, ``target.KINDS``) puts it."""
    return edit_fields(text, source, doc_index, values, owned=owned).text


def edit_fields(text: str, source: str, doc_index: int, values: Mapping[FieldPath, Edit],
                before: list[Document] | None = None, kept: KeptReads | None = None,
                owned: Owned = SPEC_PATCH) -> Edited:
    """``set_fields``, also giving the documents of both texts (``before``: those of ``text``
    when the caller has them; ``kept``: the pass's reads, which may hold ``text``'s)."""
    if text.startswith("\ufeff"):
        # libyaml's marks count from after a byte-order mark: edit without it, then put it back
        inner = edit_fields(text[1:], source, doc_index, values, before, kept, owned)
        return Edited("\ufeff" + inner.text, inner.before, inner.after)
    if "\r" in text and (lone := _LONE_CR.search(text)) is not None:
        # YAML reads a lone CR as a line break and the splice's line reader does not: the
        # verifying re-read would refuse the edit as a bug of gitscale's
        raise ManifestError(source, "a line ends in a lone carriage return (CR, the line end "
                            "of classic Mac OS); gitscale edits files whose lines end in LF or "
                            "CRLF: convert it (e.g. `mac2unix`)",
                            text.count("\n", 0, lone.start()) + 1)
    if any(isinstance(v, Remove) for v in values.values()):
        return _edit_removing(text, source, doc_index, values, before, kept, owned)
    docs, before = _parse(text, source, before, kept)
    root = _document_root(docs, doc_index, text, source)
    newline = "\r\n" if "\r\n" in text else "\n"
    splices: list[Splice] = []
    plain: Mapping[FieldPath, Value] = values  # type: ignore[assignment]  # (no Remove: above)
    pending: dict[tuple[int, str], dict[FieldPath, Value]] = {}
    parents: dict[int, Span] = {}
    seen: dict[FieldPath, tuple[Span, Span] | None] = {}  # the paths share their first keys
    for order, (path, value) in enumerate(plain.items()):
        node: Span = root
        for depth, key in enumerate(path):
            if node.kind != MAP:
                raise ManifestError(source, f"{'.'.join(path[:depth])} is not a mapping")
            here = path[:depth + 1]
            child = seen[here] if here in seen else seen.setdefault(here, _lookup(node, key))
            if child is None:
                # Group everything missing under this mapping into one insertion.
                pending.setdefault((id(node), key), {})[path[depth + 1:]] = value
                parents[id(node)] = node
                break
            key_node, value_node = child
            if value_node.start < key_node.end or text.startswith("&", value_node.start):
                # An alias's node sits at its anchor, elsewhere in the file: splicing there
                # would change every other use of it too.
                raise ManifestError(source, f"{'.'.join(path[:depth + 1])} is a YAML anchor "
                                    "or alias; gitscale edits only plain values there",
                                    key_node.line + 1)
            if depth == len(path) - 1:
                if value_node.kind != SCALAR:
                    raise ManifestError(source, f"{'.'.join(path)} is not a scalar",
                                        value_node.line + 1)
                splices.append(replace(text, key_node, value_node, value, order))
            node = value_node
    inserted: set[int] = set()
    steps: dict[int, int] = {}  # each mapping's indentation step, found once
    after = owned.after
    for order, ((parent_id, key), subtree) in enumerate(pending.items(), start=len(values)):
        splices.append(insert(text, root, parents[parent_id], key, subtree, newline, order,
                              steps, after.get(key, ()), first=parent_id not in inserted))
        inserted.add(parent_id)
    result = apply(text, splices)
    old, new = verify(text, result, source, doc_index, plain, before)
    return Edited(result, old, new)


def _edit_removing(text: str, source: str, doc_index: int,
                   values: Mapping[FieldPath, Edit],
                   before: list[Document] | None, kept: KeptReads | None,
                   owned: Owned) -> Edited:
    """``edit_fields`` with keys to remove (rare: `drain --resume`): the values are set first,
    then each key is removed on the text that results (so no insertion and removal meet at one
    place), or given its fallback value; the whole is verified against the original."""
    plain = {p: v for p, v in values.items() if not isinstance(v, Remove)}
    current = edit_fields(text, source, doc_index, plain, before, kept, owned).text \
        if plain else text
    cuts: list[tuple[int, int]] = []
    removed: list[FieldPath] = []
    fallback: dict[FieldPath, Value] = {}
    for _ in range(2):  # a fallback changes the text: find the lines to cut again after it
        root = _document_root(_parse(current, source, None, None)[0], doc_index, current,
                              source)
        cuts, removed = [], []
        for path, value in values.items():
            if not isinstance(value, Remove) or path in fallback:
                continue
            found = _find(root, path)
            if found is None:
                continue  # absent already
            cut = _whole_line(current, *found)
            if cut is None:
                fallback[path] = value.fallback
            else:
                cuts.append(cut)
                removed.append(path)
        pending = {p: v for p, v in fallback.items()
                   if (found := _find(root, p)) is None or found[2].value != v}
        if not pending:
            break
        current = edit_fields(current, source, doc_index, pending, owned=owned).text
    result = current
    for start, end in sorted(cuts, reverse=True):
        result = result[:start] + result[end:]
    old, new = verify(text, result, source, doc_index, {**plain, **fallback}, before, removed)
    return Edited(result, old, new)


def _find(root: Span, path: FieldPath) -> tuple[Span, Span, Span] | None:
    """(the mapping holding the last key, the key, its value) along ``path``, if there."""
    mapping = root
    for depth, key in enumerate(path):
        if mapping.kind != MAP:
            return None
        found = _lookup(mapping, key)
        if found is None:
            return None
        if depth == len(path) - 1:
            return mapping, found[0], found[1]
        mapping = found[1]
    return None


def _whole_line(text: str, mapping: Span, key: Span, value: Span) -> tuple[int, int] | None:
    """The span of the line holding ``key: value`` and nothing else, in a block ``mapping``
    that has other keys; None when removing it would touch anything else."""
    if mapping.flow or len(mapping.pairs()) < 2 or value.kind != SCALAR:
        return None
    if value.start < key.end or text.startswith(("&", "*"), value.start) \
            or value.end_line != key.line or value.end == value.start:
        return None  # an alias, a value on another line, an empty value
    start = text.rfind("\n", 0, key.start) + 1
    if text[start:key.start].strip(" "):
        return None  # something else before the key on its line (`- key: …`)
    end = text.find("\n", value.end)
    rest = text[value.end:len(text) if end == -1 else end]
    if rest.strip(" \t\r"):
        return None  # a comment or more after the value
    if end == -1:  # the last line, without a newline: take the newline before it
        if start == 0:
            return None
        return (start - 2 if text[start - 2:start] == "\r\n" else start - 1), len(text)
    return start, end + 1


def _parse(text: str, source: str, before: list[Document] | None,
           kept: KeptReads | None) -> tuple[list[Span], list[Document] | None]:
    """Each document's root span, and the documents (``before`` when given; None when the
    verification must read them): the pass's read of ``text`` when ``kept`` has it, or one
    pass of ``yamlblock`` for the usual block style, else libyaml's node tree (flow style,
    anchors, block scalars...)."""
    read = kept.take(text) if kept is not None else None
    if read is not None:
        datas, roots = read
        return roots, before or [Document(d, text, i) for i, d in enumerate(datas)]
    try:
        datas, roots = yamlblock.load(text, yamlfast.scalar, spans=True)
    except (yamlblock.Deferred, yamlfast.Unsupported):
        pass
    else:
        return roots, before or [Document(d, text, i) for i, d in enumerate(datas)]
    import yaml

    try:
        nodes = list(yaml.compose_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
    except yaml.YAMLError as exc:
        raise ManifestError(source, f"not valid YAML: {exc}") from None
    return [_Composed.of(n) for n in nodes], before


class _Composed(Span):
    """A node of libyaml's tree as a ``Span``; its children are converted when asked (an alias
    is the same node as its anchor, so the tree may share nodes, or even hold cycles)."""

    __slots__ = ("node",)
    node: Node

    @classmethod
    def of(cls, node: Node) -> "_Composed":
        from yaml.nodes import MappingNode, SequenceNode

        kind = MAP if isinstance(node, MappingNode) else SEQ if isinstance(node, SequenceNode) \
            else SCALAR
        start, end = node.start_mark, node.end_mark
        span = cls(kind, start.index, end.index, start.line, start.column, end.line,
                   node.value if kind == SCALAR else None, getattr(node, "style", None) or "",
                   bool(getattr(node, "flow_style", False)))
        span.node = node
        span.lazy = kind != SCALAR
        return span

    def _materialize(self) -> None:
        if self.kind == MAP:
            self.value = [(_Composed.of(k), _Composed.of(v)) for k, v in self.node.value]
        else:
            self.value = [_Composed.of(v) for v in self.node.value]
        self.lazy = False


def _document_root(docs: list[Span], doc_index: int, text: str, source: str) -> Span:
    # PyYAML (used for reading) skips empty documents the same way; map indexes by position.
    if doc_index >= len(docs):
        raise ManifestError(source, "the document to edit is missing (file changed while editing?)")
    return docs[doc_index]


def _lookup(node: Span, key: str) -> tuple[Span, Span] | None:
    return node.find(key)


