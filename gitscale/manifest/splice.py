"""Where an edit's new text goes in a manifest, and how a value is written there.

A ``Splice`` replaces the characters ``start:end`` of the original text: a value's own span
(``replace``), or nothing at the place a missing key is inserted (``insert``): after the first
of its siblings ``Owned.after`` names, else before the mapping's first key, with the file's
indentation step and line ending, or at the end of a flow mapping. ``apply`` makes them all,
from the last to the first, so no splice moves another's offsets. ``gitscale.manifest.edit``
decides which splices an edit needs and verifies the result.
"""
from __future__ import annotations

import functools
import json
from operator import attrgetter
from typing import NamedTuple, Sequence

from gitscale.errors import ManifestError
from gitscale.manifest.target import FieldPath
from gitscale.yamlio.span import MAP, SCALAR, Span

Value = int | str  # what an edit writes into a field


class Splice(NamedTuple):
    """``text`` in place of ``start:end``; ``order``: which comes first at one place."""

    start: int
    end: int
    text: str
    order: int


_WHERE = attrgetter("start", "order")


def apply(text: str, splices: Sequence[Splice]) -> str:
    """``text`` with every splice made (the last one first: none moves another's offsets; at
    one place, in the order they were made)."""
    result = text
    for splice in sorted(splices, key=_WHERE, reverse=True):
        result = result[: splice.start] + splice.text + result[splice.end:]
    return result


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


def replace(text: str, key: Span, node: Span, value: Value, order: int) -> Splice:
    start, end = node.start, node.end
    rendered = render(value, node)
    if node.style in ("|", ">"):
        # a block scalar (a person's hand edit): its span runs to the next line's start, past
        # its content's line break (and, kept with ``+``, blank lines): those stay, or the
        # next key would join the value's line
        while end > start and text[end - 1] in " \t\r\n":
            end -= 1
    if start == end:  # an empty (null) value: `replicas:`; its mark may be on the next line
        colon = key.end
        while colon < len(text) and text[colon] in " \t":
            colon += 1
        if colon < len(text) and text[colon] == ":":
            return Splice(colon + 1, colon + 1, " " + rendered, order)
        if start > 0 and text[start - 1] == ":":
            rendered = " " + rendered
    return Splice(start, end, rendered, order)


def insert(text: str, root: Span, mapping: Span, key: str,
            subtree: dict[FieldPath, Value], newline: str, order: int,
            steps: dict[int, int], after: tuple[str, ...], first: bool = True) -> Splice:
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
                return Splice(line_end, line_end, newline + newline.join(lines), order)
        if line_end > 0 and text[line_end - 1] == "\r":
            line_end -= 1
        return Splice(line_end, line_end, newline + newline.join(lines), order)
    at = first_key.start
    body = newline.join(lines)[indent:]  # the first line is already indented in place
    return Splice(at, at, body + newline + " " * indent, order)


def _anchor(mapping: Span, after: tuple[str, ...]) -> Span | None:
    for sibling in after:
        found = mapping.find(sibling)
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
                 order: int, first: bool = True) -> Splice:
    close = mapping.end - 1
    while close > 0 and text[close] != "}":
        close -= 1
    entry = _render_flow(key, subtree)
    pairs = mapping.pairs()
    if pairs:
        at = pairs[-1][1].end
        return Splice(at, at, ", " + entry, order)
    # `spec: {}` getting several keys: every insertion after the first needs its comma
    return Splice(close, close, entry if first else ", " + entry, order)


@functools.lru_cache(maxsize=256)
def render_key(key: str) -> str:
    plain = key.replace("-", "").replace("_", "").replace(".", "").replace("/", "").isalnum()
    return key if plain and not key[0].isdigit() else json.dumps(key)
