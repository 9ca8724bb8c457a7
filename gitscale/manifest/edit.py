"""Surgical edits of owned fields: every byte outside the changed values stays as it was.

A YAML round trip (ruamel.yaml's included) keeps comments but still re-emits the document: it
normalises spacing in flow mappings, indentation and some quoting, which shows up in review as
noise. So nothing is re-emitted: the exact character span of each value (libyaml's node marks,
or the same offsets from ``gitscale.yamlio.block``, which reads a manifest's usual block style
without libyaml, data and spans in one pass) tells where to splice new values into the original
text, and missing keys are inserted next to their siblings with the file's own indentation and
line ending. The result is re-read and compared with the intended object before anything is
written, so a splice bug can never produce a silently wrong manifest.
"""
from __future__ import annotations

import copy
import functools
import json
import re
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple, Sequence

from gitscale.yamlio import block as yamlblock

from gitscale.yamlio import fast as yamlfast
from gitscale.errors import ManifestError
from gitscale.manifest.target import SPEC_PATCH, FieldPath, KeptReads, Owned
from gitscale.yamlio.span import MAP, SCALAR, SEQ, Span
from gitscale.yamlio.read import Document, load_documents

if TYPE_CHECKING:
    from yaml.nodes import Node

# PyYAML is imported only for a text the line reader does not take (flow style, anchors, block
# scalars...): a pass that edits block-style manifests never needs it, and importing it costs
# ≈ 20 ms of a CLI start.
Value = int | str


@dataclass(frozen=True)
class Remove:
    """As a value: remove the key (an annotation gitscale no longer needs). Removed only where
    that is one whole line of a block mapping that keeps other keys, with nothing else on it
    (no comment, no other key); anywhere else (a flow mapping, the mapping's only key, a key
    over several lines) ``fallback`` is written instead, as a value would be. An absent key
    stays absent."""

    fallback: str


Edit = Value | Remove


_WHERE = attrgetter("start", "order")


class _Splice(NamedTuple):
    start: int
    end: int
    text: str
    order: int


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
    docs, before = _parse(text, source, before, kept)
    root = _document_root(docs, doc_index, text, source)
    newline = "\r\n" if "\r\n" in text else "\n"
    splices: list[_Splice] = []
    if any(isinstance(v, Remove) for v in values.values()):
        return _edit_removing(text, source, doc_index, values, before, kept, owned)
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
                splices.append(_replace(text, key_node, value_node, value, order))
            node = value_node
    inserted: set[int] = set()
    steps: dict[int, int] = {}  # each mapping's indentation step, found once
    after = owned.after
    for order, ((parent_id, key), subtree) in enumerate(pending.items(), start=len(values)):
        splices.append(_insert(text, root, parents[parent_id], key, subtree, newline, order,
                               steps, after.get(key, ()), first=parent_id not in inserted))
        inserted.add(parent_id)
    result = text
    for splice in sorted(splices, key=_WHERE, reverse=True):
        result = result[: splice.start] + splice.text + result[splice.end:]
    old, new = _verify(text, result, source, doc_index, plain, before)
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
    old, new = _verify(text, result, source, doc_index, {**plain, **fallback}, before, removed)
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


def render(value: Value, like: Span | None = None) -> str:
    if isinstance(value, int):
        return str(value)
    # Single quotes have no escapes (and fold line breaks): keep them only for printable text.
    if like is not None and like.style == "'" and value.isprintable():
        return "'" + value.replace("'", "''") + "'"
    if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
        return '"' + value + '"'  # what json.dumps writes for it, without its encoder
    if all(ord(c) <= 0xFFFF for c in value):
        return json.dumps(value)
    # json.dumps writes U+10000 and up as a surrogate pair, which YAML reads as two characters
    return '"' + "".join(json.dumps(c)[1:-1] if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"
                         for c in value) + '"'


def _replace(text: str, key: Span, node: Span, value: Value, order: int) -> _Splice:
    start, end = node.start, node.end
    rendered = render(value, node)
    if start == end:  # an empty (null) value: `replicas:`; its mark may be on the next line
        colon = key.end
        while colon < len(text) and text[colon] in " \t":
            colon += 1
        if colon < len(text) and text[colon] == ":":
            return _Splice(colon + 1, colon + 1, " " + rendered, order)
        if start > 0 and text[start - 1] == ":":
            rendered = " " + rendered
    return _Splice(start, end, rendered, order)


def _insert(text: str, root: Span, mapping: Span, key: str,
            subtree: dict[FieldPath, Value], newline: str, order: int,
            steps: dict[int, int], after: tuple[str, ...], first: bool = True) -> _Splice:
    """``key`` (with ``subtree`` below it) inserted into ``mapping``: after the first of the
    siblings ``after`` found as a one-line scalar, else before its first key."""
    if mapping.flow:
        return _insert_flow(text, mapping, key, subtree, order, first)
    first_key = mapping.first_key()
    if first_key is None:
        raise ManifestError("", "cannot insert into an empty block mapping")
    indent = first_key.column
    step = steps.get(id(mapping)) or steps.setdefault(id(mapping), _indent_step(mapping, root))
    lines = _render_block(key, subtree, indent, step)
    anchor = _anchor(mapping, after)
    if anchor is not None:
        line_end = text.find("\n", anchor.end)
        if line_end == -1:
            line_end = len(text)
            if not text.endswith("\n"):
                return _Splice(line_end, line_end, newline + newline.join(lines), order)
        if line_end > 0 and text[line_end - 1] == "\r":
            line_end -= 1
        return _Splice(line_end, line_end, newline + newline.join(lines), order)
    at = first_key.start
    body = newline.join(lines)[indent:]  # the first line is already indented in place
    return _Splice(at, at, body + newline + " " * indent, order)


def _anchor(mapping: Span, after: tuple[str, ...]) -> Span | None:
    for sibling in after:
        found = _lookup(mapping, sibling)
        if found and found[1].kind == SCALAR:
            value = found[1]
            if value.line == value.end_line == found[0].line:
                return value
    return None


def _indent_step(mapping: Span, root: Span) -> int:
    """The file's indentation step: from ``mapping``'s own nested mappings if it has any, else
    from the first nested block mapping in the document (``metadata`` with only a name in a
    4-space file must get a 4-space ``annotations`` block, not 2)."""
    queue: list[Span] = [mapping, root]
    while queue:
        parent = queue.pop(0)
        if parent.kind != MAP or parent.flow:
            continue
        first = parent.first_key()
        if first is None:
            continue
        nested = parent.block_mappings()  # (only these can give a step, or hold one)
        for value in nested:
            step: int = value.first_key().column - first.column  # type: ignore[union-attr]
            if step > 0:
                return step
        if parent is not mapping:
            queue.extend(nested)
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


def _insert_flow(text: str, mapping: Span, key: str, subtree: dict[FieldPath, Value],
                 order: int, first: bool = True) -> _Splice:
    close = mapping.end - 1
    while close > 0 and text[close] != "}":
        close -= 1
    entry = _render_flow(key, subtree)
    pairs = mapping.pairs()
    if pairs:
        at = pairs[-1][1].end
        return _Splice(at, at, ", " + entry, order)
    # `spec: {}` getting several keys: every insertion after the first needs its comma
    return _Splice(close, close, entry if first else ", " + entry, order)


@functools.lru_cache(maxsize=256)
def render_key(key: str) -> str:
    plain = key.replace("-", "").replace("_", "").replace(".", "").replace("/", "").isalnum()
    return key if plain and not key[0].isdigit() else json.dumps(key)


def _verify(before: str, after: str, source: str, doc_index: int,
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
