"""Block-style YAML → plain data, one line at a time, with the character span of every node.

Manifests, gitscale.yaml and demand files are block mappings and block sequences whose values
each fit on their line: a plain or quoted scalar, or a flow collection closed on that line. This
reader takes exactly that shape. What a line says does not depend on the lines around it (its
indentation, key, value and where each sits: ``gitscale.yamlio.lines``), so each distinct line
is read once per process with a few regular expressions and remembered: a config repo of thousands of sets made from a
template repeats most of its lines. Only the nesting is worked out per text, from the
indentation. Plain scalars are resolved by the caller's ``resolve`` (PyYAML's own resolver and
constructor).

Anything else — tabs, CR, anchors, aliases, tags, block scalars, a value continued on a later
line, a key it cannot read at a glance, indentation it does not expect, a duplicate key, anything
libyaml might refuse — raises ``Deferred`` before a result escapes, and the caller reads the text
with libyaml instead, so the data (and every error message) stays PyYAML's.

With ``spans=True`` it also returns each document's tree of ``Span``s, with the offsets libyaml's
marks give: what the manifest editor splices at.
"""
from __future__ import annotations

import itertools
import operator
from typing import Any

from gitscale.yamlio.flow import FrozenMap, read_flow, thaw
from gitscale.yamlio.lines import BLANK, ITEM, KEY_LINE, KEY_SCALAR, KEY_STR, MARKER, \
    VALUE_BELOW, VALUE_FLOW, VALUE_SCALAR, Resolve, classify
from gitscale.yamlio.span import MAP, SCALAR, SEQ, Deferred, Source, Span, placed

LINES = 20_000  # distinct lines remembered (then forgotten all at once, and learnt again)

__all__ = ["LINES", "MAP", "SCALAR", "SEQ", "Deferred", "Span", "load"]


class _Source(Source):
    """What each line of a text said (for making its spans later), and where the lines
    begin (counted when first needed)."""

    __slots__ = ("text", "infos", "begins")

    def __init__(self, text: str) -> None:
        self.text = text
        self.infos: list[tuple[Any, ...]] = []
        self.begins: list[int] | None = None

    def pair(self, entry: Any) -> tuple[Span, Span]:
        return _pair(entry, self)

    def item(self, entry: Any) -> Span:
        return _value_span(self.infos[entry], self.begin(entry), entry, 3)

    def written(self, entry: Any) -> str:
        return _written(entry, self)

    def keys(self, entries: list[Any]) -> dict[str, int]:
        infos = self.infos
        return {(infos[entry][3] if type(entry) is int else infos[entry[0]][3]
                 if type(entry[0]) is int else entry[0].value): at
                for at, entry in enumerate(entries)}

    def begin(self, number: int) -> int:
        if self.begins is None:  # (each line's length and its line break, summed in C)
            lengths = map(operator.add, map(len, self.text.split("\n")), itertools.repeat(1))
            self.begins = list(itertools.accumulate(lengths, initial=0))
        return self.begins[number]


def _written(entry: Any, source: _Source) -> str:
    """The key of a mapping's entry, as written."""
    if type(entry) is int:
        return str(source.infos[entry][3])
    if type(entry[0]) is int:
        return str(source.infos[entry[0]][3])
    return str(entry[0].value)


def _pair(entry: Any, source: _Source) -> tuple[Span, Span]:
    """The spans of a key and its value from what their line said."""
    number, child = (entry, None) if type(entry) is int else entry
    info = source.infos[number]
    begin = source.begin(number)
    key = Span(SCALAR, begin + info[2], begin + info[5], number, info[2], number, info[3],
               info[6])
    if child is None:
        child = _value_span(info, begin, number, 8)
    elif child is _NULL:  # null, spanning nothing right after its `:` (as libyaml)
        colon = key.end + 1
        child = Span(SCALAR, colon, colon, number, info[5] + 1, number, "", "")
    return key, child


_lines: dict[Resolve, dict[str, tuple[Any, ...]]] = {}  # by resolver: what each line says


def load(text: str, resolve: Resolve, spans: bool = False) -> tuple[list[Any], list[Span]]:
    """Every document of ``text`` (and with ``spans``, each document's root ``Span``)."""
    try:
        return _read(text, resolve, spans)
    except (IndexError, TypeError, RecursionError) as exc:  # cut short, unhashable, too deep
        raise Deferred(str(exc)) from None


# An open block mapping or sequence (a list: made and read for most lines of every text): its
# column, its data, whether it is a mapping, the key waiting for a value written on the lines
# below, its span, the pending key's line (info, offset, number) and its keys as written that
# resolve to something else than that text (`1` and `'1'` are one key to PyYAML's checks).
_INDENT, _DATA, _IS_MAP, _PENDING, _NODE, _RECORD, _ODD = range(7)
_NO: Any = object()  # no key pending
_NULL: Any = object()  # a pending key that got no value
def _read(text: str, resolve: Resolve, spans: bool) -> tuple[list[Any], list[Span]]:
    docs: list[Any] = []
    roots: list[Span] = []
    stack: list[list[Any]] = []
    in_doc = False
    root: Any = _NO
    root_node: Span | None = None
    offset = 0
    number = -1
    lines = _lines.get(resolve)
    if lines is None or len(lines) >= LINES:
        lines = _lines[resolve] = {}
    source = _Source(text) if spans else None
    infos = source.infos if source is not None else None
    for line in text.split("\n"):
        number += 1
        begin = offset
        offset += len(line) + 1
        info = lines.get(line)
        if info is None:
            info = lines[line] = classify(line, resolve)
        if infos is not None:
            infos.append(info)
        kind = info[0]
        if kind == KEY_SCALAR:
            frame = stack[-1] if stack else None
            if frame is not None and frame[0] == info[1] and frame[2] and frame[3] is _NO:
                data = frame[1]
                key = info[4]
                if key in data:
                    raise Deferred("duplicate key")
                data[key] = info[9]
                if spans:
                    frame[4].value.append(number)
                continue
            kind = KEY_LINE
        elif kind == BLANK:
            continue
        if kind == MARKER:
            if in_doc:
                _end(stack, docs, roots, root, root_node, begin, number, spans)
            in_doc, root, root_node, stack = True, _NO, None, []
            continue
        in_doc = True
        indent = info[1]
        if kind == KEY_LINE:
            frame = stack[-1] if stack else None
            if frame is None:
                frame = _place_key(stack, indent, root is _NO, begin, number, source)
                root, root_node = frame[1], frame[4]
            elif frame[0] == indent and frame[2]:  # the next key of the mapping above
                if frame[3] is not _NO:
                    _null(frame, spans)
            elif frame[3] is not _NO and frame[0] < indent:  # the first key of its value
                data = frame[1][frame[3]] = {}
                node = None
                if spans:
                    node = Span(MAP, begin + indent, -1, number, indent, -1, [], source=source)
                    frame[4].value.append((frame[5], node))
                frame[3] = _NO
                frame = [indent, data, True, _NO, node, None, None]
                stack.append(frame)
            else:
                frame = _place_key(stack, indent, root is _NO, begin, number, source)
        else:  # a sequence entry
            sequence = _place_item(stack, indent, root is _NO, begin, number, source)
            if root is _NO:
                root, root_node = stack[0][1], stack[0][4]
            if kind == ITEM:
                sequence[1].append(info[4] if info[3] == VALUE_SCALAR else thaw(info[4]))
                if spans:
                    sequence[4].value.append(number)
                continue
            column = info[2]
            node = Span(MAP, begin + column, -1, number, column, -1, [], source=source) \
                if spans else None
            frame = [column, {}, True, _NO, node, None, None]
            sequence[1].append(frame[1])
            if spans:
                sequence[4].value.append(node)
            stack.append(frame)
        # a key (on its own line, or the first of a mapping in a sequence entry)
        key = info[4]
        data = frame[1]
        if key in data:
            raise Deferred("duplicate key")
        check = info[7]
        if check != KEY_STR:
            _odd_key(frame, info[3])
        value_kind = info[8]
        if value_kind == VALUE_SCALAR:
            data[key] = info[9]
        elif value_kind == VALUE_FLOW:
            frozen = info[9]
            data[key] = (dict(frozen) if type(frozen) is FrozenMap else list(frozen)) \
                if frozen.flat else thaw(frozen)
        elif value_kind == VALUE_BELOW:
            frame[3] = key
            frame[5] = number
            continue
        if spans:
            frame[4].value.append(number)
    if in_doc:  # (libyaml ends a text without a final line break on the line after it)
        _end(stack, docs, roots, root, root_node, offset - 1, number + (line != ""), spans)
    return docs, roots


def _odd_key(frame: list[Any], raw: str) -> None:
    """A quoted key, or a plain one that is not read as its text: PyYAML's duplicate check
    compares keys as written, so `1:` and `'1':` clash although they load as two keys."""
    odd = frame[6]
    if odd is None:
        odd = frame[6] = set()
    if raw in odd:  # (the same text read the same way is the same key: checked already)
        raise Deferred("duplicate key")
    odd.add(raw)


def _place_key(stack: list[list[Any]], indent: int, rootless: bool, begin: int, number: int,
               source: _Source | None) -> list[Any]:
    """The mapping a key line at ``indent`` belongs to: the frames deeper than it (and a
    sequence at its column) are closed; then a mapping at its column, a new mapping as the
    value of a pending key, or the document's root."""
    top = _close(stack, indent, True, source is not None)
    if top is None:
        if not rootless:
            raise Deferred("a key after the document's root")
        return _root(stack, indent, {}, begin, number, source)
    if top[2] and top[0] == indent:
        if top[3] is not _NO:
            _null(top, source is not None)
        return top
    if top[3] is not _NO and top[0] < indent:
        frame = _open(top, indent, {}, begin, number, source)
        stack.append(frame)
        return frame
    raise Deferred("a key where none can be")


def _place_item(stack: list[list[Any]], indent: int, rootless: bool, begin: int, number: int,
                source: _Source | None) -> list[Any]:
    """The sequence an entry at ``indent`` belongs to: the frames deeper than it are closed;
    then a sequence at its column, a new one as the value of a pending key (at the key's own
    column too), or the document's root."""
    top = _close(stack, indent, False, source is not None)
    if top is None:
        if not rootless:
            raise Deferred("a sequence entry after the document's root")
        return _root(stack, indent, [], begin, number, source)
    if not top[2] and top[0] == indent:
        return top
    if top[3] is not _NO and top[0] <= indent:
        sequence = _open(top, indent, [], begin, number, source)
        stack.append(sequence)
        return sequence
    raise Deferred("a sequence entry where none can be")


def _close(stack: list[list[Any]], indent: int, sequence: bool, spans: bool) -> list[Any] | None:
    """Close the frames deeper than ``indent`` (with ``sequence``, a sequence at its column
    too: a key line ends it); the frame left on top, None when none is left."""
    while stack:
        top = stack[-1]
        if top[0] < indent or top[0] == indent and (top[2] or not sequence):
            return top
        stack.pop()
        if top[3] is not _NO:
            _null(top, spans)
    return None


def _root(stack: list[list[Any]], indent: int, data: Any, begin: int, number: int,
          source: _Source | None) -> list[Any]:
    """The document's root collection, starting on this line."""
    node = Span(MAP if type(data) is dict else SEQ, begin + indent, -1, number, indent, -1, [],
                source=source) if source else None
    frame = [indent, data, type(data) is dict, _NO, node, None, None]
    stack.append(frame)
    return frame


def _value_span(info: tuple[Any, ...], begin: int, number: int, at: int) -> Span:
    if info[at] == VALUE_SCALAR:
        start, end = info[at + 2], info[at + 3]
        return Span(SCALAR, begin + start, begin + end, number, start, number, info[at + 4],
                    info[at + 5])
    column, rest, resolve = info[at + 2:at + 5]
    return placed(read_flow(rest, 0, resolve, True)[1], begin + column, column, number)


def _open(parent: list[Any], indent: int, data: Any, begin: int, number: int,
          source: _Source | None) -> list[Any]:
    """A block collection starting on this line as the value of ``parent``'s pending key."""
    node: Span | None = None
    if source is not None:
        node = Span(MAP if type(data) is dict else SEQ, begin + indent, -1, number, indent, -1,
                    [], source=source)
        parent[4].value.append((parent[5], node))
    parent[1][parent[3]] = data
    parent[3] = _NO
    return [indent, data, type(data) is dict, _NO, node, None, None]


def _null(frame: list[Any], spans: bool) -> None:
    """A pending key with nothing below it: null, spanning nothing right after its `:` (where
    libyaml puts an empty value)."""
    frame[1][frame[3]] = None
    if spans:
        frame[4].value.append((frame[5], _NULL))
    frame[3] = _NO


def _end(stack: list[list[Any]], docs: list[Any], roots: list[Span], root: Any,
         root_node: Span | None, at: int, number: int, spans: bool) -> None:
    for frame in stack:
        if frame[3] is not _NO:
            _null(frame, spans)
    docs.append(None if root is _NO else root)
    if spans:
        roots.append(root_node if root_node is not None
                     else Span(SCALAR, at, at, number, 0, number, "", ""))


