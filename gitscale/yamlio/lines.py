"""What one line of block-style YAML says, wherever it stands: its kind, indentation, key and
value, and where each sits (``classify``), for ``gitscale.yamlio.block``, which works out the
nesting. A line's reading does not depend on the lines around it, so the block reader keeps each
distinct line's reading and classifies a line once per process. Anything this reader does not
take at a glance raises ``Deferred``: the text is then read by libyaml.
"""
from __future__ import annotations

import functools
import re
from typing import Any, Callable

from gitscale.yamlio.flow import DQ, SQ, read_flow
from gitscale.yamlio.span import Deferred

Resolve = Callable[[str], Any]  # a plain scalar's text → its value (PyYAML's resolver)

_KEY = re.compile(r"""(?:([A-Za-z0-9_][A-Za-z0-9_./-]{0,999})|"([^"\\]{0,999})"|'([^']{0,999})')"""
                  r":(?: +|$)")
_TAIL = re.compile(r"(?: +(?:#.*)?)?$")
_DOCUMENT = re.compile(r"---(?: +(?:#.*)?)?$")
_PLAIN_START = frozenset("-?:,[]{}#&*!|>'\"%@`")  # a plain scalar starts with none of these


@functools.cache
def _refused() -> re.Pattern[str]:
    """Characters PyYAML refuses in a stream; tabs, CR, NEL, Unicode line breaks and BOM are
    valid YAML but left to libyaml. Compiled on the first line that is not ASCII: the class
    spans the astral planes and compiling it costs ≈ 20 ms, more than reading a thousand
    manifests (an ASCII line is refused by ``str.isprintable`` alone, the same set)."""
    return re.compile("[^\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd"
                      "\U00010000-\U0010ffff]")


# What a line is (the first item of its reading)
BLANK, MARKER, KEY_LINE, ITEM, ITEM_KEY, KEY_SCALAR = range(6)  # KEY_SCALAR: a key line
# with a plain key that reads as its text and a scalar value (most lines: read the shortest way)
# What its value is
VALUE_BELOW, VALUE_SCALAR, VALUE_FLOW = range(3)

KEY_STR, KEY_OTHER, KEY_QUOTED = range(3)  # a plain key that reads as itself, or not; quoted

_BLANK_LINE = (BLANK,)
_MARKER_LINE = (MARKER,)


def classify(line: str, resolve: Resolve) -> tuple[Any, ...]:
    """What ``line`` says, wherever it stands: (kind, indent, column of the key or item,
    key as written, key, end column of the key, key style, how to check the key for
    duplicates, value...), or (kind, indent, column, value...) for a plain entry."""
    if (not line.isprintable()) if line.isascii() else _refused().search(line):
        raise Deferred("a tab, CR, BOM or a character PyYAML refuses")
    body = line.lstrip(" ")
    if not body or body[0] == "#":
        return _BLANK_LINE
    indent = len(line) - len(body)
    if indent == 0 and body[0] in "-.%" and (body[0] != "-" or body[:3] == "---"):
        if not _DOCUMENT.match(body):
            raise Deferred("a document marker or directive")
        return _MARKER_LINE
    kind = KEY_LINE
    if body[0] == "-" and (len(body) == 1 or body[1] == " "):
        body = body[1:].lstrip(" ")
        if not body or body[0] == "#" or body[0] == "-" and (len(body) == 1 or body[1] == " "):
            raise Deferred("an empty or nested sequence entry")
        found = _KEY.match(body)
        column = len(line) - len(body)
        if found is None:
            return (ITEM, indent, column, *_read_value(body, column, resolve))
        kind = ITEM_KEY
    else:
        found = _KEY.match(body)
        if found is None:
            raise Deferred("a line that is neither a key nor a sequence entry")
        column = indent
    plain, double, single = found.groups()
    if plain is not None:
        raw, key, style, written = plain, resolve(plain), "", len(plain)
        check = KEY_STR if type(key) is str else KEY_OTHER
    else:
        raw = double if double is not None else single
        key, style, written = raw, '"' if double is not None else "'", len(raw) + 2
        check = KEY_QUOTED
    rest = body[found.end():]
    head = (kind, indent, column, raw, key, column + written, style, check)
    if not rest or rest[0] == "#":
        return (*head, VALUE_BELOW)
    value = _read_value(rest, column + found.end(), resolve)
    if kind == KEY_LINE and check == KEY_STR and value[0] == VALUE_SCALAR:
        head = (KEY_SCALAR, *head[1:])
    return (*head, *value)


def _read_value(rest: str, column: int, resolve: Resolve) -> tuple[Any, ...]:
    """The value filling the rest of a line from ``column`` (after it: spaces, a comment):
    (VALUE_SCALAR, data, start, end, as written, style) or (VALUE_FLOW, frozen data, column, text,
    resolve): a flow collection's spans are made only when asked (from its text, again)."""
    first = rest[0]
    if first == '"' or first == "'":
        found = (DQ if first == '"' else SQ).match(rest)
        if found is None or not _TAIL.match(rest, found.end()):
            raise Deferred("a quoted scalar that does not end on its line")
        value = found.group(1) if first == '"' else found.group(1).replace("''", "'")
        return (VALUE_SCALAR, value, column, column + found.end(), value, first)
    if first == "[" or first == "{":
        frozen, _, end = read_flow(rest, 0, resolve, False)
        if not _TAIL.match(rest, end):
            raise Deferred("text after a flow collection")
        return (VALUE_FLOW, frozen, column, rest, resolve)
    if first in _PLAIN_START and not (first == "-" and len(rest) > 1 and rest[1] not in " -"):
        raise Deferred("a value starting with an indicator")
    cut = rest.find(" #")
    plain = (rest if cut < 0 else rest[:cut]).rstrip(" ")
    if ": " in plain or plain[-1] == ":":
        raise Deferred("a colon in a plain value")
    return (VALUE_SCALAR, resolve(plain), column, column + len(plain), plain, "")
