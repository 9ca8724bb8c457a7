"""Flow collections closed on their line (`{team: a, arch: b}`, `["x", 'y']`) for the line reader.

Read as PyYAML reads them, or ``Deferred``: plain scalars resolved by the caller's ``resolve``,
quoted ones without escapes; a colon inside a plain scalar, an empty or complex entry, a
trailing comma, a duplicate key, or no closing bracket on the line are left to libyaml. The
data comes frozen (a line is read once per process) and each load thaws its own copy.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from gitscale.yamlio.span import MAP, SCALAR, SEQ, Deferred, Span

DQ = re.compile(r'"([^"\\]*)"')  # a double-quoted scalar without escapes
SQ = re.compile(r"'((?:[^']|'')*)'")
_FLOW_PLAIN = re.compile(r"""(?:[^\s,\[\]{}#:'"&*!|>%@`?-]|-[0-9A-Za-z._])[^,\[\]{}#:]*""")

Resolve = Callable[[str], Any]


def thaw(frozen: Any) -> Any:
    """Fresh data from a frozen flow collection (a scalar as it is)."""
    kind = type(frozen)
    if kind is FrozenMap:
        return dict(frozen) if frozen.flat else {k: thaw(v) for k, v in frozen}
    if kind is FrozenSeq:
        return list(frozen) if frozen.flat else [thaw(v) for v in frozen]
    return frozen


class FrozenMap(tuple):  # type: ignore[type-arg]
    """A flow mapping's (key, value) pairs as read once (a line's reading is shared: every load
    gets its own dict, ``thaw``); ``flat``: no collection among the values."""

    flat = True


class FrozenSeq(tuple):  # type: ignore[type-arg]
    """A flow sequence's items as read once (see ``FrozenMap``)."""

    flat = True


def read_flow(line: str, i: int, resolve: Resolve, spans: bool) -> tuple[Any, Any, int]:
    """The flow collection opening at ``line[i]`` and closed on the same line: its frozen
    data, its span (offsets within ``line``; with ``spans``) and the index after its closing
    bracket."""
    opening = line[i]
    start = i
    i += 1
    while line[i] == " ":
        i += 1
    if opening == "[":
        items: list[Any] = []
        nodes: list[Span] = []
        if line[i] != "]":
            while True:
                value, node, i = _item(line, i, resolve, spans)
                items.append(value)
                nodes.append(node)
                while line[i] == " ":
                    i += 1
                if line[i] == "]":
                    break
                if line[i] != ",":
                    raise Deferred("a flow sequence")
                i += 1
                while line[i] == " ":
                    i += 1
                if line[i] == "]":
                    raise Deferred("a trailing comma")
        seq = FrozenSeq(items)
        seq.flat = not any(type(v) in (FrozenMap, FrozenSeq) for v in items)
        return seq, Span(SEQ, start, i + 1, 0, start, 0, nodes, "", True) if spans else None, \
            i + 1
    pairs: list[tuple[Any, Any]] = []
    keys: set[Any] = set()
    seen: set[str] = set()
    node_pairs: list[tuple[Span, Span]] = []
    if line[i] != "}":
        while True:
            if line[i] in "[{":
                raise Deferred("a complex key")
            key, key_node, i = _item(line, i, resolve, spans)
            if line[i] != ":" or line[i + 1] != " ":
                raise Deferred("a flow mapping entry without `: `")
            raw = key_node.value if spans else key_node
            if raw in seen or key in keys:
                raise Deferred("duplicate key")
            seen.add(raw)
            keys.add(key)
            i += 2
            while line[i] == " ":
                i += 1
            if line[i] in ",}":
                raise Deferred("an empty value in a flow mapping")
            value, node, i = _item(line, i, resolve, spans)
            pairs.append((key, value))
            node_pairs.append((key_node, node))
            while line[i] == " ":
                i += 1
            if line[i] == "}":
                break
            if line[i] != ",":
                raise Deferred("a flow mapping")
            i += 1
            while line[i] == " ":
                i += 1
            if line[i] == "}":
                raise Deferred("a trailing comma")
    mapping = FrozenMap(pairs)
    mapping.flat = not any(type(v) in (FrozenMap, FrozenSeq) for _, v in pairs)
    return mapping, Span(MAP, start, i + 1, 0, start, 0, node_pairs, "", True) if spans \
        else None, i + 1


def _item(line: str, i: int, resolve: Resolve, spans: bool) -> tuple[Any, Any, int]:
    """A flow collection's item: its data, its span (with ``spans``; else the scalar as
    written) and the index after it."""
    first = line[i]
    if first == "[" or first == "{":
        return read_flow(line, i, resolve, spans)
    if first == '"' or first == "'":
        found = (DQ if first == '"' else SQ).match(line, i)
        if found is None:
            raise Deferred("a quoted scalar that does not end on its line")
        value = found.group(1) if first == '"' else found.group(1).replace("''", "'")
        return value, Span(SCALAR, i, found.end(), 0, i, 0, value, first) if spans else value, \
            found.end()
    found = _FLOW_PLAIN.match(line, i)
    if found is None or line[found.end()] not in ",]}:":
        raise Deferred("a flow scalar")
    plain = found.group().rstrip(" ")
    end = i + len(plain)
    return resolve(plain), Span(SCALAR, i, end, 0, i, 0, plain, "") if spans else plain, end
