"""Block-style YAML → plain data, one line at a time, with the character span of every node.

Manifests, gitscale.yaml and demand files are block mappings and block sequences whose values
each fit on their line: a plain or quoted scalar, or a flow collection closed on that line. This
reader takes exactly that shape. What a line says does not depend on the lines around it (its
indentation, key, value and where each sits), so each distinct line is read once per process
with a few regular expressions and remembered: a config repo of thousands of sets made from a
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

import re
from typing import Any, Callable

# Characters PyYAML refuses in a stream; tabs, CR, NEL, Unicode line breaks and BOM are valid
# YAML but left to libyaml.
_REFUSED = re.compile("[^\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd"
                      "\U00010000-\U0010ffff]")
_KEY = re.compile(r"""(?:([A-Za-z0-9_][A-Za-z0-9_./-]{0,999})|"([^"\\]{0,999})"|'([^']{0,999})')"""
                  r":(?: +|$)")
_DQ = re.compile(r'"([^"\\]*)"')
_SQ = re.compile(r"'((?:[^']|'')*)'")
_TAIL = re.compile(r"(?: +(?:#.*)?)?$")
_DOCUMENT = re.compile(r"---(?: +(?:#.*)?)?$")
_FLOW_PLAIN = re.compile(r"""(?:[^\s,\[\]{}#:'"&*!|>%@`?-]|-[0-9A-Za-z._])[^,\[\]{}#:]*""")
_PLAIN_START = frozenset("-?:,[]{}#&*!|>'\"%@`")  # a plain scalar starts with none of these
LINES = 20_000  # distinct lines remembered (then forgotten all at once, and learnt again)

Resolve = Callable[[str], Any]

# What a line is (the first item of its reading)
_BLANK, _MARKER, _KEY_LINE, _ITEM, _ITEM_KEY = range(5)
# What its value is
_BELOW, _SCALAR, _FLOW = range(3)
SCALAR, MAP, SEQ = "scalar", "map", "seq"


class Deferred(Exception):
    """The text uses YAML this reader leaves to libyaml."""


class Span:
    """Where a node sits in its text: ``start``/``end`` are character offsets (``end``
    exclusive), ``line``/``end_line`` 0-based, ``column`` that of ``start``. A scalar's
    ``value`` is its text as written, unquoted, and ``style`` is ``'``, ``"`` or ``""`` (plain);
    a mapping's ``value`` is its (key, value) pairs, a sequence's its items."""

    __slots__ = ("kind", "start", "end", "line", "column", "end_line", "value", "style", "flow",
                 "lazy")

    def __init__(self, kind: str, start: int, end: int, line: int, column: int, end_line: int,
                 value: Any, style: str = "", flow: bool = False, lazy: bool = False) -> None:
        self.kind, self.start, self.end, self.line, self.column, self.end_line = \
            kind, start, end, line, column, end_line
        self.value, self.style, self.flow, self.lazy = value, style, flow, lazy

    def pairs(self) -> list[tuple[Span, Span]]:
        """A mapping's (key, value) pairs."""
        if self.lazy:
            self._materialize()
        pairs: list[tuple[Span, Span]] = self.value
        return pairs

    def find(self, key: str) -> tuple[Span, Span] | None:
        """The pair of a mapping whose key is written ``key`` (unquoted), if any."""
        if self.lazy and type(self) is Span:  # the lines' records: make only that pair
            records = self.value
            for index, record in enumerate(records):
                if len(record) == 2:  # made already: the same spans every time
                    if record[0].value == key:
                        found: tuple[Span, Span] = record
                        return found
                elif record[0][3] == key:
                    found = records[index] = _pair(record)
                    return found
            return None
        for pair in self.pairs():
            if pair[0].kind == SCALAR and pair[0].value == key:
                return pair
        return None

    def first_key(self) -> Span | None:
        """A mapping's first key (None when empty)."""
        if self.lazy and type(self) is Span:
            if not self.value:
                return None
            if len(self.value[0]) != 2:
                self.value[0] = _pair(self.value[0])
            key: Span = self.value[0][0]
            return key
        pairs = self.pairs()
        return pairs[0][0] if pairs else None

    def block_mappings(self) -> list[Span]:
        """The values of a mapping that are non-empty block mappings."""
        if self.lazy and type(self) is Span:  # (only a block collection is a Span there)
            values = [r[-1] for r in self.value]
            return [v for v in values if type(v) is Span and v.kind == MAP and not v.flow]
        return [v for _, v in self.pairs() if v.kind == MAP and not v.flow and v.pairs()]

    def items(self) -> list[Span]:
        """A sequence's items."""
        if self.lazy:
            self._materialize()
        items: list[Span] = self.value
        return items

    def _materialize(self) -> None:
        # A block collection keeps what its lines said, and makes spans only when asked: most
        # of a manifest is never looked at by the editor.
        if self.kind == MAP:
            self.value = [record if len(record) == 2 else _pair(record) for record in self.value]
        else:
            self.value = [record if type(record) is Span else _value_span(*record[:3], 3)
                          for record in self.value]
        self.lazy = False


def _pair(record: tuple[Any, ...]) -> tuple[Span, Span]:
    """The spans of a key and its value from what their line said."""
    info, begin, number, child = record
    key = Span(SCALAR, begin + info[2], begin + info[5], number, info[2], number, info[3],
               info[6])
    if child is None:
        child = _value_span(info, begin, number, 7)
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


class _Frame:
    """An open block mapping or sequence: its column, its data and node, and the key waiting
    for a value written on the lines below (with the line that says it)."""

    __slots__ = ("indent", "data", "is_map", "key", "seen", "node", "record")

    def __init__(self, indent: int, data: Any, node: Span | None) -> None:
        self.indent, self.data, self.node = indent, data, node
        self.is_map = type(data) is dict
        self.key: Any = _Frame
        self.seen: set[str] = set()
        self.record: tuple[Any, ...] = ()  # the pending key's line (info, offset, number)


_NO: Any = _Frame  # no key pending
_NULL: Any = object()  # a pending key that got no value


def _read(text: str, resolve: Resolve, spans: bool) -> tuple[list[Any], list[Span]]:
    docs: list[Any] = []
    roots: list[Span] = []
    stack: list[_Frame] = []
    in_doc = False
    root: Any = _NO
    root_node: Span | None = None
    offset = 0
    number = -1
    lines = _lines.get(resolve)
    if lines is None or len(lines) >= LINES:
        lines = _lines[resolve] = {}
    for line in text.split("\n"):
        number += 1
        begin = offset
        offset += len(line) + 1
        info = lines.get(line)
        if info is None:
            info = lines[line] = _classify(line, resolve)
        kind = info[0]
        if kind == _BLANK:
            continue
        if kind == _MARKER:
            if in_doc:
                _end(stack, docs, roots, root, root_node, begin, number, spans)
            in_doc, root, root_node, stack = True, _NO, None, []
            continue
        in_doc = True
        indent = info[1]
        if kind == _KEY_LINE:
            top = stack[-1] if stack else None
            if top is not None and top.indent == indent and top.is_map and top.key is _NO:
                frame = top  # the next key of the mapping on the line above: the usual case
            else:
                frame = _place_key(stack, indent, root is _NO, begin, number, spans)
                if root is _NO:
                    root, root_node = stack[0].data, stack[0].node
        else:  # a sequence entry
            while stack:
                top = stack[-1]
                if top.indent > indent:
                    stack.pop()
                    if top.key is not _NO:
                        _null(top, spans)
                    continue
                break
            else:
                top = None
            if top is not None and not top.is_map and top.indent == indent:
                sequence = top
            elif top is not None and top.key is not _NO and top.indent <= indent:
                sequence = _open(top, indent, [], begin, number, spans)
                stack.append(sequence)
            elif top is None and root is _NO:
                sequence = _Frame(indent, [], Span(SEQ, begin + indent, -1, number, indent, -1,
                                                   [], lazy=True) if spans else None)
                root, root_node = sequence.data, sequence.node
                stack.append(sequence)
            else:
                raise Deferred("a sequence entry where none can be")
            if kind == _ITEM:
                sequence.data.append(_value(info, 3))
                if spans:
                    sequence.node.value.append((info, begin, number, None))  # type: ignore[union-attr]
                continue
            column = info[2]
            frame = _Frame(column, {}, Span(MAP, begin + column, -1, number, column, -1, [],
                                            lazy=True) if spans else None)
            sequence.data.append(frame.data)
            if spans:
                sequence.node.value.append(frame.node)  # type: ignore[union-attr]
            stack.append(frame)
        # a key (on its own line, or the first of a mapping in a sequence entry)
        raw = info[3]
        seen = frame.seen
        if raw in seen:
            raise Deferred("duplicate key")
        seen.add(raw)
        key = info[4]
        data = frame.data
        if key in data:
            raise Deferred("duplicate key")
        value_kind = info[7]
        if value_kind == _SCALAR:
            data[key] = info[8]
        elif value_kind == _BELOW:
            frame.key = key
            if spans:
                frame.record = (info, begin, number)
            continue
        else:
            data[key] = _thaw(info[8])
        if spans:
            frame.node.value.append((info, begin, number, None))  # type: ignore[union-attr]
    if in_doc:
        _end(stack, docs, roots, root, root_node, offset - 1, number, spans)
    return docs, roots


def _place_key(stack: list[_Frame], indent: int, rootless: bool, begin: int, number: int,
               spans: bool) -> _Frame:
    """The mapping a key line at ``indent`` belongs to: the frames deeper than it (and a
    sequence at its column) are closed; then a mapping at its column, a new mapping as the
    value of a pending key, or the document's root."""
    while stack:
        top = stack[-1]
        if top.indent > indent or top.indent == indent and not top.is_map:
            stack.pop()
            if top.key is not _NO:
                _null(top, spans)
            continue
        break
    else:
        if not rootless:
            raise Deferred("a key after the document's root")
        frame = _Frame(indent, {}, Span(MAP, begin + indent, -1, number, indent, -1, [],
                                        lazy=True) if spans else None)
        stack.append(frame)
        return frame
    if top.is_map and top.indent == indent:
        if top.key is not _NO:
            _null(top, spans)
        return top
    if top.key is not _NO and top.indent < indent:
        frame = _open(top, indent, {}, begin, number, spans)
        stack.append(frame)
        return frame
    raise Deferred("a key where none can be")


def _value(info: tuple[Any, ...], at: int) -> Any:
    """The data of the value read at ``info[at:]``: a fresh copy of a flow collection."""
    if info[at] == _SCALAR:
        return info[at + 1]
    return _thaw(info[at + 1])


def _thaw(frozen: Any) -> Any:
    kind = type(frozen)
    if kind is _FrozenMap:
        return dict(frozen) if frozen.flat else {k: _thaw(v) for k, v in frozen}
    if kind is _FrozenSeq:
        return list(frozen) if frozen.flat else [_thaw(v) for v in frozen]
    return frozen


class _FrozenMap(tuple):  # type: ignore[type-arg]
    flat = True


class _FrozenSeq(tuple):  # type: ignore[type-arg]
    flat = True


def _value_span(info: tuple[Any, ...], begin: int, number: int, at: int) -> Span:
    if info[at] == _SCALAR:
        start, end = info[at + 2], info[at + 3]
        return Span(SCALAR, begin + start, begin + end, number, start, number, info[at + 4],
                    info[at + 5])
    return _placed(info[at + 2], begin, 0, number)


def _placed(node: Span, offset: int, column: int, number: int) -> Span:
    """A flow node read at offset 0 of its line, moved by ``offset`` characters (by
    ``column`` columns) onto line ``number``."""
    if node.kind == SCALAR:
        value: Any = node.value
    elif node.kind == MAP:
        value = [(_placed(k, offset, column, number), _placed(v, offset, column, number))
                 for k, v in node.value]
    else:
        value = [_placed(v, offset, column, number) for v in node.value]
    return Span(node.kind, offset + node.start, offset + node.end, number, column + node.column,
                number, value, node.style, node.flow)


def _open(parent: _Frame, indent: int, data: Any, begin: int, number: int,
          spans: bool) -> _Frame:
    """A block collection starting on this line as the value of ``parent``'s pending key."""
    node: Span | None = None
    if spans:
        node = Span(MAP if type(data) is dict else SEQ, begin + indent, -1, number, indent, -1,
                    [], lazy=True)
        parent.node.value.append((*parent.record, node))  # type: ignore[union-attr]
    parent.data[parent.key] = data
    parent.key = _NO
    return _Frame(indent, data, node)


def _null(frame: _Frame, spans: bool) -> None:
    """A pending key with nothing below it: null, spanning nothing right after its `:` (where
    libyaml puts an empty value)."""
    frame.data[frame.key] = None
    if spans:
        frame.node.value.append((*frame.record, _NULL))  # type: ignore[union-attr]
    frame.key = _NO


def _end(stack: list[_Frame], docs: list[Any], roots: list[Span], root: Any,
         root_node: Span | None, at: int, number: int, spans: bool) -> None:
    for frame in stack:
        if frame.key is not _NO:
            _null(frame, spans)
    docs.append(None if root is _NO else root)
    if spans:
        roots.append(root_node if root_node is not None
                     else Span(SCALAR, at, at, number, 0, number, "", ""))


_BLANK_LINE = (_BLANK,)
_MARKER_LINE = (_MARKER,)


def _classify(line: str, resolve: Resolve) -> tuple[Any, ...]:
    """What ``line`` says, wherever it stands: (kind, indent, column of the key or item,
    key as written, key, end column of the key, key style, value...)."""
    if _REFUSED.search(line):
        raise Deferred("a tab, CR, BOM or a character PyYAML refuses")
    body = line.lstrip(" ")
    if not body or body[0] == "#":
        return _BLANK_LINE
    indent = len(line) - len(body)
    if indent == 0 and body[0] in "-.%" and (body[0] != "-" or body[:3] == "---"):
        if not _DOCUMENT.match(body):
            raise Deferred("a document marker or directive")
        return _MARKER_LINE
    kind = _KEY_LINE
    if body[0] == "-" and (len(body) == 1 or body[1] == " "):
        body = body[1:].lstrip(" ")
        if not body or body[0] == "#" or body[0] == "-" and (len(body) == 1 or body[1] == " "):
            raise Deferred("an empty or nested sequence entry")
        found = _KEY.match(body)
        column = len(line) - len(body)
        if found is None:
            return (_ITEM, indent, column, *_read_value(body, column, resolve))
        kind = _ITEM_KEY
    else:
        found = _KEY.match(body)
        if found is None:
            raise Deferred("a line that is neither a key nor a sequence entry")
        column = indent
    plain, double, single = found.groups()
    if plain is not None:
        raw, key, style, written = plain, resolve(plain), "", len(plain)
    else:
        raw = double if double is not None else single
        key, style, written = raw, '"' if double is not None else "'", len(raw) + 2
    rest = body[found.end():]
    head = (kind, indent, column, raw, key, column + written, style)
    if not rest or rest[0] == "#":
        return (*head, _BELOW)
    return (*head, *_read_value(rest, column + found.end(), resolve))


def _read_value(rest: str, column: int, resolve: Resolve) -> tuple[Any, ...]:
    """The value filling the rest of a line from ``column`` (after it: spaces, a comment):
    (_SCALAR, data, start, end, as written, style) or (_FLOW, frozen data, span)."""
    first = rest[0]
    if first == '"' or first == "'":
        found = (_DQ if first == '"' else _SQ).match(rest)
        if found is None or not _TAIL.match(rest, found.end()):
            raise Deferred("a quoted scalar that does not end on its line")
        value = found.group(1) if first == '"' else found.group(1).replace("''", "'")
        return (_SCALAR, value, column, column + found.end(), value, first)
    if first == "[" or first == "{":
        frozen, node, end = _flow(rest, 0, resolve)
        if not _TAIL.match(rest, end):
            raise Deferred("text after a flow collection")
        return (_FLOW, frozen, _placed(node, column, column, 0))
    if first in _PLAIN_START and not (first == "-" and len(rest) > 1 and rest[1] not in " -"):
        raise Deferred("a value starting with an indicator")
    cut = rest.find(" #")
    plain = (rest if cut < 0 else rest[:cut]).rstrip(" ")
    if ": " in plain or plain[-1] == ":":
        raise Deferred("a colon in a plain value")
    return (_SCALAR, resolve(plain), column, column + len(plain), plain, "")


def _flow(line: str, i: int, resolve: Resolve) -> tuple[Any, Span, int]:
    """The flow collection opening at ``line[i]`` and closed on the same line: its frozen
    data, its span (offsets within ``line``) and the index after its closing bracket."""
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
                value, node, i = _flow_item(line, i, resolve)
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
        seq = _FrozenSeq(items)
        seq.flat = not any(type(v) in (_FrozenMap, _FrozenSeq) for v in items)
        return seq, Span(SEQ, start, i + 1, 0, start, 0, nodes, "", True), i + 1
    pairs: list[tuple[Any, Any]] = []
    keys: set[Any] = set()
    seen: set[str] = set()
    node_pairs: list[tuple[Span, Span]] = []
    if line[i] != "}":
        while True:
            if line[i] in "[{":
                raise Deferred("a complex key")
            key, key_node, i = _flow_item(line, i, resolve)
            if line[i] != ":" or line[i + 1] != " ":
                raise Deferred("a flow mapping entry without `: `")
            if key_node.value in seen or key in keys:
                raise Deferred("duplicate key")
            seen.add(key_node.value)
            keys.add(key)
            i += 2
            while line[i] == " ":
                i += 1
            if line[i] in ",}":
                raise Deferred("an empty value in a flow mapping")
            value, node, i = _flow_item(line, i, resolve)
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
    mapping = _FrozenMap(pairs)
    mapping.flat = not any(type(v) in (_FrozenMap, _FrozenSeq) for _, v in pairs)
    return mapping, Span(MAP, start, i + 1, 0, start, 0, node_pairs, "", True), i + 1


def _flow_item(line: str, i: int, resolve: Resolve) -> tuple[Any, Span, int]:
    first = line[i]
    if first == "[" or first == "{":
        return _flow(line, i, resolve)
    if first == '"' or first == "'":
        found = (_DQ if first == '"' else _SQ).match(line, i)
        if found is None:
            raise Deferred("a quoted scalar that does not end on its line")
        value = found.group(1) if first == '"' else found.group(1).replace("''", "'")
        return value, Span(SCALAR, i, found.end(), 0, i, 0, value, first), found.end()
    found = _FLOW_PLAIN.match(line, i)
    if found is None or line[found.end()] not in ",]}:":
        raise Deferred("a flow scalar")
    plain = found.group().rstrip(" ")
    end = i + len(plain)
    return resolve(plain), Span(SCALAR, i, end, 0, i, 0, plain, ""), end
