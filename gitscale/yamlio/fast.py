"""YAML → plain data straight from libyaml's events: 2–5× faster than PyYAML's loader.

PyYAML's C loader parses in C but composes a node tree and constructs every value in Python,
resolving each plain scalar with a dozen regular expressions. Config repos are mostly the same
few keys and values, so this loader builds dicts and lists from the parser's events and
resolves each distinct plain scalar once. It reads what the line reader (``yamlio.block``)
declines: CRLF files, block scalars, flow collections over several lines, CRDs (gitscale's own,
read by every pass that validates, and those a repo commits); ``benchmarks/bench_yaml.py``
measures each against what ``read.load_documents`` would do without it (2.1× on CRLF
manifests, 2.2× with block scalars, 3.7× on a gitscale.yaml of multi-line flow policies, 2.3×
and 4.7× on CRDs). It covers what manifests, gitscale.yaml and demand
files use: mappings, sequences, plain and quoted scalars (str, int, float, bool, null,
timestamps). Anything else (anchors and aliases, explicit tags, merge keys, complex or
duplicate keys, a parse error) raises ``Unsupported`` before any result escapes, and the
caller loads the text with PyYAML as before, so the data (and every error message) is exactly
PyYAML's.
"""
from __future__ import annotations

import functools
import json
import re
from typing import Any

from gitscale.yamlio import block as yamlblock

MAP = "tag:yaml.org,2002:map"
SEQ = "tag:yaml.org,2002:seq"
STR = "tag:yaml.org,2002:str"
PLAIN = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool",
         "tag:yaml.org,2002:null", "tag:yaml.org,2002:timestamp"}
CACHED = 50_000  # distinct plain scalars remembered per process
MAX_DEPTH = 1000  # deeper nesting is refused by yamlread.check_depth, with its line

_plain: dict[str, tuple[Any]] = {}
_NO_KEY: Any = object()
# What YAML 1.1 does not allow in a stream (its printable set: tab, line breaks, printable
# ASCII, NEL, and the printable Unicode planes); a JSON text with one is left to PyYAML, which
# refuses it with its words. An ASCII text is checked against the ASCII part of the set: the
# whole class spans the astral planes and compiling it costs ≈ 20 ms of every CLI start, so it
# is compiled only for a text that is not ASCII.
_NON_PRINTABLE_ASCII = re.compile("[^\x09\x0A\x0D\x20-\x7E]")


@functools.cache
def _non_printable() -> re.Pattern[str]:
    return re.compile("[^\x09\x0A\x0D\x20-\x7E\x85\xA0-\uD7FF\uE000-\uFFFD"
                      "\U00010000-\U0010FFFF]")


@functools.cache
def _pyyaml_resolving() -> tuple[Any, Any]:
    """PyYAML's resolver and constructor, made on the first plain scalar."""
    import yaml

    return yaml.resolver.Resolver(), yaml.constructor.SafeConstructor()


# PyYAML's implicit resolvers (``yaml.resolver.Resolver``) are keyed by a scalar's first
# character. Those of a letter are bool and null, which match only the words below: any other
# plain scalar that starts with none of OTHER_FIRST and has no line break is a string. Plain
# decimal integers, a text after a dot that is not a number, inf or nan, and one after a digit
# or a sign with a character no number or timestamp has (4Gi) are read here too; everything
# else is PyYAML's to resolve. This spares a pass whose manifests hold only such
# scalars the import of PyYAML (≈ 15 ms of a CLI start); tests/yamlio/test_fast.py checks the
# table against PyYAML's resolver.
OTHER_FIRST = frozenset("-+0123456789.<=~!&*")
WORDS: dict[str, Any] = {
    **dict.fromkeys(("yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
    **dict.fromkeys(("no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), None)}
_DOT_FLOATS = frozenset((".inf", ".Inf", ".INF", ".nan", ".NaN", ".NAN"))
# Every character an int, float or timestamp starting with a sign or a digit may hold (-.inf)
_NUMBER_CHARS = frozenset("0123456789_.:+-eEbxXabcdefABCDEFTtZinIN \t")


def without_pyyaml(value: str) -> tuple[Any] | None:
    """``value`` as PyYAML resolves and constructs a plain scalar, for the common cases; None:
    ask PyYAML."""
    if value in WORDS:
        return (WORDS[value],)
    if "\n" in value:
        return None  # (PyYAML's ``$`` matches before a final line break)
    first = value[0]
    if first not in OTHER_FIRST:
        return (value,)
    if first in "<=~!&*":
        return None
    if first == ".":
        return (value,) if not value[1:2].isdigit() and value not in _DOT_FLOATS else None
    if not _NUMBER_CHARS.issuperset(value):
        return (value,)  # 4Gi, 500m: a letter no int, float or timestamp has
    if first in "123456789" and len(value) <= 18 and value.isascii() and value.isdigit():
        return (int(value),)
    return (0,) if value == "0" else None


def _with_pyyaml(value: str) -> tuple[Any]:
    import yaml  # only here and for YAML events: most manifests and a JSON demand need none

    _resolver, _constructor = _pyyaml_resolving()
    tag = _resolver.resolve(yaml.ScalarNode, value, (True, False))
    if tag == STR:
        return (value,)
    if tag in PLAIN:
        try:
            return (_constructor.construct_object(yaml.ScalarNode(tag, value)),)
        except Exception as exc:  # 2026-02-30: PyYAML reports it, with its words
            raise Unsupported(str(exc)) from None
    raise Unsupported(tag)


class Unsupported(Exception):
    """The text uses YAML this loader leaves to PyYAML."""


def scalar(value: str) -> Any:
    """A plain scalar as PyYAML resolves and constructs it (remembered per process)."""
    found = _plain.get(value)
    if found is None:
        found = without_pyyaml(value) or _with_pyyaml(value)
        if len(_plain) < CACHED:
            _plain[value] = found
    return found[0]


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise Unsupported("duplicate key")
    return found


def _constant(name: str) -> Any:
    raise Unsupported(name)  # NaN, Infinity: not YAML


def _json(text: str) -> list[Any] | None:
    """JSON is YAML: a program's demand file for ten thousand sets loads 10× faster still.
    Numbers are resolved as YAML 1.1 reads them (``1e3`` is a string there)."""
    if text.lstrip()[:1] not in ("{", "[") or "\\u" in text \
            or (_NON_PRINTABLE_ASCII if text.isascii() else _non_printable()).search(text):
        return None  # (surrogate pairs: json joins them; control characters: PyYAML refuses)
    try:
        # a JSON integer (no sign but -, no leading zero, no _) is the same YAML 1.1 integer;
        # a JSON number with an exponent or a fraction may be a string to YAML 1.1 (1e3)
        return [json.loads(text, object_pairs_hook=_pairs, parse_float=scalar,
                           parse_int=int, parse_constant=_constant)]
    except (ValueError, RecursionError):
        return None  # not JSON after all (several documents, comments, YAML flow style)


def load_all(text: str) -> list[Any]:
    """Every document of ``text`` as PyYAML's SafeLoader would load it, or ``Unsupported``."""
    if "\x85" in text or "\u2028" in text or "\u2029" in text:
        # line breaks to YAML 1.1, not to JSON: PyYAML decides ('{"\x85": null}' is refused)
        raise Unsupported("NEL or Unicode line separator")
    as_json = _json(text)
    if as_json is not None:
        return as_json
    try:
        return yamlblock.load(text, scalar)[0]
    except yamlblock.Deferred:
        pass  # flow style, block scalars, anchors...: libyaml's events
    import yaml

    loader = getattr(yaml, "CSafeLoader", None)
    if loader is None:
        raise Unsupported("PyYAML without libyaml")
    parser = loader(text)
    documents: list[Any] = []
    stack: list[Any] = []  # open dicts and lists
    keys: list[Any] = []  # per open container: the key waiting for its value
    seen: list[set[str]] = []  # per open container: its keys as written (1 and "1" clash)
    raw = ""
    scalar_event, map_start, seq_start = yaml.ScalarEvent, yaml.MappingStartEvent, \
        yaml.SequenceStartEvent
    ends = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
    try:
        while True:
            event = parser.get_event()
            if event is None:
                break
            kind = type(event)
            if kind is scalar_event:
                if event.anchor is not None or event.tag is not None:
                    raise Unsupported("anchor or tag")
                raw = event.value
                value: Any = scalar(raw) if event.implicit[0] else raw
            elif kind is map_start or kind is seq_start:
                if event.anchor is not None or event.tag not in (None, MAP, SEQ):
                    raise Unsupported("anchor or tag")
                if len(stack) >= MAX_DEPTH:
                    raise Unsupported("nested too deep")
                stack.append({} if kind is map_start else [])
                keys.append(_NO_KEY)
                seen.append(set())
                continue
            elif kind in ends:
                value = stack.pop()
                keys.pop()
                seen.pop()
            elif kind is yaml.AliasEvent:
                raise Unsupported("alias")
            else:
                continue  # stream and document markers
            if not stack:
                documents.append(value)
                continue
            top = stack[-1]
            if type(top) is list:
                top.append(value)
                continue
            key = keys[-1]
            if key is _NO_KEY:
                if type(value) is dict or type(value) is list or raw in seen[-1]:
                    raise Unsupported("complex or duplicate key")
                seen[-1].add(raw)
                keys[-1] = value
            else:
                if key in top:
                    raise Unsupported("duplicate key")
                top[key] = value
                keys[-1] = _NO_KEY
    except yaml.YAMLError as exc:
        raise Unsupported(str(exc)) from None
    finally:
        parser.dispose()
    return documents
