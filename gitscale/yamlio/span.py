"""Where each node of a YAML text sits: the character spans the manifest editor splices at.

``gitscale.yamlio.block`` makes them for the texts it reads (lazily: a manifest's editor looks at a
few of its keys), and ``gitscale.manifest.edit`` makes them from libyaml's node marks for the
rest; both give the same offsets.
"""
from __future__ import annotations

from typing import Any

SCALAR, MAP, SEQ = "scalar", "map", "seq"


class Deferred(Exception):
    """The text uses YAML the line reader leaves to libyaml."""


class Source:
    """Makes the spans of a lazy collection's entries (what its reader noted for each)."""

    __slots__ = ()

    def pair(self, entry: Any) -> tuple[Span, Span]:
        raise NotImplementedError

    def item(self, entry: Any) -> Span:
        raise NotImplementedError

    def written(self, entry: Any) -> str:
        """The key of a mapping's entry, as written."""
        raise NotImplementedError

    def keys(self, entries: list[Any]) -> dict[str, int]:
        """A mapping's keys as written → the index of their entry."""
        return {self.written(entry): at for at, entry in enumerate(entries)}


class Span:
    """Where a node sits in its text: ``start``/``end`` are character offsets (``end``
    exclusive), ``line``/``end_line`` 0-based, ``column`` that of ``start``. A scalar's
    ``value`` is its text as written, unquoted, and ``style`` is ``'``, ``"`` or ``""`` (plain);
    a mapping's ``value`` is its (key, value) pairs, a sequence's its items.

    A block collection read by ``gitscale.yamlio.block`` is ``lazy``: until asked, its ``value``
    holds only its entries as that reader noted them, and ``source`` makes their spans."""

    __slots__ = ("kind", "start", "end", "line", "column", "end_line", "value", "style", "flow",
                 "lazy", "index", "source")

    def __init__(self, kind: str, start: int, end: int, line: int, column: int, end_line: int,
                 value: Any, style: str = "", flow: bool = False,
                 source: Source | None = None) -> None:
        self.kind, self.start, self.end, self.line, self.column, self.end_line = \
            kind, start, end, line, column, end_line
        self.value, self.style, self.flow = value, style, flow
        self.lazy = source is not None
        self.source = source
        self.index: dict[str, int] | None = None  # a lazy mapping's keys as written → entry

    def pairs(self) -> list[tuple[Span, Span]]:
        """A mapping's (key, value) pairs."""
        if self.lazy:
            self._materialize()
        pairs: list[tuple[Span, Span]] = self.value
        return pairs

    def find(self, key: str) -> tuple[Span, Span] | None:
        """The pair of a mapping whose key is written ``key`` (unquoted), if any."""
        source = self.source
        if self.lazy and source is not None:  # make only that pair
            entries = self.value
            index = self.index
            if index is None:  # (keys as written are unique: a duplicate was deferred)
                index = self.index = source.keys(entries)
            at = index.get(key)
            if at is None:
                return None
            entry = entries[at]
            if type(entry) is int or type(entry[0]) is int:  # made once: the same spans
                entry = entries[at] = source.pair(entry)
            found: tuple[Span, Span] = entry
            return found
        for pair in self.pairs():
            if pair[0].kind == SCALAR and pair[0].value == key:
                return pair
        return None

    def first_key(self) -> Span | None:
        """A mapping's first key (None when empty)."""
        source = self.source
        if self.lazy and source is not None:
            if not self.value:
                return None
            entry = self.value[0]
            if type(entry) is int or type(entry[0]) is int:
                entry = self.value[0] = source.pair(entry)
            key: Span = entry[0]
            return key
        pairs = self.pairs()
        return pairs[0][0] if pairs else None

    def block_mappings(self) -> list[Span]:
        """The values of a mapping that are non-empty block mappings."""
        if self.lazy and self.source is not None:  # (only a block collection is a Span there)
            values = [entry[1] for entry in self.value if type(entry) is tuple]
            return [v for v in values if type(v) is Span and v.kind == MAP and not v.flow]
        return [v for _, v in self.pairs() if v.kind == MAP and not v.flow and v.pairs()]

    def items(self) -> list[Span]:
        """A sequence's items."""
        if self.lazy:
            self._materialize()
        items: list[Span] = self.value
        return items

    def _materialize(self) -> None:
        # Spans are made only when asked: most of a manifest is never looked at by the editor.
        source = self.source
        assert source is not None
        if self.kind == MAP:
            self.value = [entry if type(entry) is tuple and type(entry[0]) is Span
                          else source.pair(entry) for entry in self.value]
        else:
            self.value = [entry if type(entry) is Span else source.item(entry)
                          for entry in self.value]
        self.lazy = False


def placed(node: Span, offset: int, column: int, number: int) -> Span:
    """A flow node read at offset 0 of its line, moved by ``offset`` characters (by
    ``column`` columns) onto line ``number``."""
    if node.kind == SCALAR:
        value: Any = node.value
    elif node.kind == MAP:
        value = [(placed(k, offset, column, number), placed(v, offset, column, number))
                 for k, v in node.value]
    else:
        value = [placed(v, offset, column, number) for v in node.value]
    return Span(node.kind, offset + node.start, offset + node.end, number, column + node.column,
                number, value, node.style, node.flow)
