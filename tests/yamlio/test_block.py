"""The line reader gives PyYAML's data and libyaml's marks exactly, or steps aside (``Deferred``).

Texts are generated line by line the way people write manifests and configs — nesting, compact
and indentless sequences, flow collections, quoting, comments, blank lines, document markers —
with the scalars, keys and mistakes that trip YAML readers mixed in.
"""
from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitscale.yamlio import block as yamlblock

from gitscale.yamlio import fast as yamlfast
from gitscale.manifest.edit import _Composed
from gitscale.yamlio.block import MAP, SCALAR, Span
from gitscale.yamlio.read import _StrictLoader


def pyyaml(text: str) -> list[Any]:
    return list(yaml.load_all(text, Loader=_StrictLoader))


def fast(text: str, spans: bool = False) -> tuple[list[Any], list[Span]] | None:
    """The reader's answer, or None when it stepped aside."""
    try:
        return yamlblock.load(text, yamlfast.scalar, spans)
    except (yamlblock.Deferred, yamlfast.Unsupported):
        return None


def same_spans(ours: Span, theirs: Span, where: str = "") -> None:
    assert ours.kind == theirs.kind, where
    assert (ours.start, ours.line, ours.column) == (theirs.start, theirs.line, theirs.column), \
        where
    assert ours.flow == theirs.flow, where
    if ours.kind == SCALAR or ours.flow:  # (a block collection's end is never used)
        assert (ours.end, ours.end_line) == (theirs.end, theirs.end_line), where
    if ours.kind == SCALAR:
        assert (ours.value, ours.style) == (theirs.value, theirs.style), where
    elif ours.kind == MAP:
        assert len(ours.pairs()) == len(theirs.pairs()), where
        for (key, value), (key2, value2) in zip(ours.pairs(), theirs.pairs()):
            same_spans(key, key2, f"{where}.{key2.value}")
            same_spans(value, value2, f"{where}.{key2.value}:")
    else:
        assert len(ours.items()) == len(theirs.items()), where
        for index, (item, item2) in enumerate(zip(ours.items(), theirs.items())):
            same_spans(item, item2, f"{where}[{index}]")


def agrees(text: str) -> bool:
    """True when the reader answered (data and spans as PyYAML's), False when it stepped
    aside. It must step aside from every text PyYAML refuses."""
    try:
        expected = pyyaml(text)
    except (yaml.YAMLError, ValueError, TypeError):
        assert fast(text) is None, "read a text PyYAML refuses"
        return False
    found = fast(text, spans=True)
    if found is None:
        return False
    data, roots = found
    assert data == expected
    assert [type(d) for d in data] == [type(d) for d in expected]
    assert fast(text) == (data, [])  # with or without spans: the same data
    nodes = [_Composed.of(n) for n in yaml.compose_all(text, Loader=yaml.CSafeLoader)]
    assert len(roots) == len(nodes)
    for ours, theirs in zip(roots, nodes):
        same_spans(ours, theirs)
    return True


@pytest.mark.parametrize("text", [
    pytest.param("a: 1\nb:\n  c: x   # comment\n  d: [1, 'two', \"three\"]\n", id="nested"),
    pytest.param("a:\n- x\n- {k: v}\nb: 2\n", id="indentless-sequence"),
    pytest.param("- a: 1\n  b:\n  - x\n  c: 3\n- y\n", id="compact-mappings"),
    pytest.param("a: b #c\nd: b#c\ne: 'it''s'\nf: \"x # y\"\ng: 1:20\nh: -1\n", id="scalars"),
    pytest.param("a:\nb:   # nothing\nc: ~\n", id="nulls"),
    pytest.param("1: a\nfalse: b\nnull: c\n2026-11-21: d\n'x y': e\n", id="keys"),
    pytest.param("a: 1\n---\nb: 2\n--- # c\n", id="documents"),
    pytest.param("---\n", id="empty-document"),
    pytest.param("# only a comment\n\n", id="no-document"),
    pytest.param("  a: 1\n  b: 2\n", id="indented-root"),
    pytest.param("k: {a: {b: [1, [2]]}, c: []}\nl: [{}, x]\n", id="nested-flow"),
    pytest.param("spec:\n    replicas: 2\n    template:\n        x: y\nz: 1", id="no-final-newline"),
    pytest.param("a: é ü 日本\nb: '✓'\n", id="unicode"),
    pytest.param("image: ghcr.io/x/y:1.2\nurl: https://a.b/c?d=e&f=g\n", id="colons"),
])
def test_reads_what_pyyaml_reads(text: str) -> None:
    assert agrees(text)


@pytest.mark.parametrize("text", [
    pytest.param("1: a\n'1': b\n", id="duplicate-key-as-written"),
    pytest.param("a: 1\na: 2\n", id="duplicate-key"),
    pytest.param("a: x\n  continued\n", id="multi-line-plain"),
    pytest.param("a: |\n  block\n", id="block-scalar"),
    pytest.param("a: &x 1\nb: *x\n", id="anchor"),
    pytest.param("a: !!str 1\n", id="tag"),
    pytest.param("a: [1,\n  2]\n", id="multi-line-flow"),
    pytest.param("a: \"x\\ty\"\n", id="escape"),
    pytest.param("a:\tb\n", id="tab"),
    pytest.param("a: b\r\n", id="crlf"),
    pytest.param("\ufeffa: b\n", id="bom"),
    pytest.param("a: b: c\n", id="colon-in-value"),
    pytest.param("a: 1\n...\n", id="document-end"),
    pytest.param("%YAML 1.1\n---\na: 1\n", id="directive"),
    pytest.param("a: [b, ]\n", id="trailing-comma"),
    pytest.param("a: {b: c}d\n", id="text-after-flow"),
    pytest.param("a: 2026-02-30\n", id="impossible-date"),
])
def test_steps_aside(text: str) -> None:
    assert not agrees(text)


def test_remembered_lines_never_share_data() -> None:
    """A line is read once per process, but every load gets its own flow collections."""
    text = "a: {b: [1, 2]}\nc: [x]\n"
    first = yamlblock.load(text, yamlfast.scalar)[0][0]
    first["a"]["b"].append(3)
    first["c"].clear()
    assert yamlblock.load(text, yamlfast.scalar)[0][0] == {"a": {"b": [1, 2]}, "c": ["x"]}


KEYS = st.sampled_from(["a", "b", "name", "spec", "gitscale.dev/jobs", "app_1", "1", "0x1F",
                        "yes", "on", "null", "~", "2026-11-21", "1:20", "'q'", '"d d"', "'1'",
                        "-k", "a b", "x:y", "?", "&a", "*a", "<<", "=", "k#", "a" * 5])
SCALARS = st.sampled_from([
    "1", "-1", "0o17", "1_000", "1:20", ".inf", "-.inf", ".nan", "1e3", "1.5", "yes", "No",
    "off", "~", "null", "Null", "2026-11-21", "2026-11-21T09:00:00Z", "2026-02-30", "a b",
    "a#b", "a #b", "a: b", "a:b", "a:", "http://x/y", "-", "--", "- x", "-x", "?x", ":x", "@x",
    "!x", "*x", "&x", "%x", "`x", "|", ">", "'q'", "''", "'it''s'", "'a", '"q"', '""',
    '"a # b"', '"a\\nb"', '"a', "x]", "x}", "x,y", "é", "---", "...", "=", "<<", "#", "x ",
    "[]", "{}", "[a, b]", "[a,b]", "['a', \"b\"]", "{a: b}", "{a: b, c: [d]}", "{a:b}",
    "{a: }", "[a, ]", "[a: b]", "{a, b}", "{'x': 1}", "[ a , b ]", "{a: b} # c", "[a]#c",
    "[[1], [2, [3]]]", "{a: {b: c}}", "[-1, -x]", "[a #c]", "[1,\t2]",
])
COMMENTS = st.sampled_from(["", "", "", " # c", "   # managed", "#x", " #"])


@st.composite
def block_texts(draw: st.DrawFn) -> str:
    """Block-style YAML, mostly well formed: each line a key, an entry or a comment at an
    indentation that usually (not always) fits where it stands."""
    lines: list[str] = []
    indents = [0]
    for _ in range(draw(st.integers(1, 14))):
        choice = draw(st.integers(0, 99))
        indent = draw(st.sampled_from(indents + [indents[-1] + draw(st.sampled_from([1, 2, 4]))]))
        if choice < 4:
            lines.append(draw(st.sampled_from(["", "  ", "# note", "    # deeper note"])))
            continue
        if choice < 6:
            lines.append(draw(st.sampled_from(["---", "--- # doc", "...", "--- a", "---x"])))
            indents = [0]
            continue
        pad = " " * indent
        entry = "- " if choice < 30 else ""
        if choice < 12:
            lines.append(f"{pad}-{draw(st.sampled_from(['', ' ', '  ']))}"
                         f"{draw(SCALARS)}{draw(COMMENTS)}")
            continue
        key = draw(KEYS)
        if choice < 45:  # a key whose value is on the lines below (or null)
            lines.append(f"{pad}{entry}{key}:{draw(COMMENTS)}")
            indents = [i for i in indents if i <= indent] + [indent + (2 if entry else 0)]
            continue
        gap = draw(st.sampled_from([" ", " ", "  ", ""]))
        lines.append(f"{pad}{entry}{key}:{gap}{draw(SCALARS)}{draw(COMMENTS)}")
        indents = [i for i in indents if i <= indent] + \
            ([indent + 2] if entry else [])
    end = draw(st.sampled_from(["\n", "\n", "", "\n\n", "\n# end\n"]))
    return "\n".join(lines) + end


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block_texts())
def test_any_block_text_reads_the_same_or_steps_aside(text: str) -> None:
    agrees(text)


PLAIN_KEYS = st.sampled_from(["a", "b", "name", "spec", "replicas", "gitscale.dev/jobs",
                              "kubernetes.io/arch", "app_1", "1", "on", "null", "2026-11-21",
                              "x-y", "'q'", '"d d"', "'1'"])
LEAVES = st.sampled_from(["1", "-1", "0o17", "1:20", "yes", "~", "2026-11-21T09:00:00Z",
                          "ghcr.io/a/b:2.3", "a b", "a#b", "'it''s'", '"x # y"', "''", "é",
                          "[]", "{}", "[a, 'b', \"c\"]", "{cpu: \"2\", memory: 4Gi}",
                          "{a: {b: [1, [2]]}}", "[-1, -x]", "https://x/y?z=1"])


@st.composite
def tree_texts(draw: st.DrawFn, depth: int = 0, indent: int = 0, step: int = 0) -> str:
    """Well-formed block YAML (so that most of it is read, not stepped aside from): a mapping
    or sequence of leaves and nested blocks, with the layouts people use."""
    step = step or draw(st.sampled_from([2, 2, 4, 3]))
    pad = " " * indent
    lines: list[str] = []
    keys = draw(st.lists(PLAIN_KEYS, min_size=1, max_size=5, unique=True))
    as_sequence = depth > 0 and draw(st.integers(0, 3)) == 0
    for key in keys:
        nested = depth < 3 and draw(st.integers(0, 2)) == 0
        comment = draw(COMMENTS.filter(lambda c: c.startswith(" ") or not c))
        head = f"{pad}- " if as_sequence else pad
        if not nested:
            value = draw(LEAVES) if draw(st.integers(0, 5)) else ""
            lines.append(f"{head}{key}:{' ' if value else ''}{value}{comment}")
            if draw(st.integers(0, 6)) == 0:
                lines.append(draw(st.sampled_from(["", f"{pad}# note", "# left"])))
            continue
        lines.append(f"{head}{key}:{comment}")
        inner = indent + (2 if as_sequence else 0)
        if draw(st.booleans()):  # a sequence, indentless or indented
            at = inner + draw(st.sampled_from([0, step]))
            for _ in range(draw(st.integers(1, 3))):
                if draw(st.booleans()):
                    lines.append(f"{' ' * at}- {draw(LEAVES)}")
                else:
                    block = draw(tree_texts(depth + 1, at + 2, step)).splitlines()
                    lines.append(f"{' ' * at}- {block[0].lstrip()}")
                    lines.extend(block[1:])
        else:
            lines.append(draw(tree_texts(depth + 1, inner + step, step)).rstrip("\n"))
    return "\n".join(lines) + "\n"


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree_texts(), st.sampled_from(["", "---\n", "--- # doc\n"]),
       st.sampled_from(["", "---\nb: 1\n", "---\n"]))
def test_any_tree_reads_the_same(text: str, start: str, more: str) -> None:
    agrees(start + text + more)


@settings(max_examples=300, deadline=None)
@given(st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=5), inner, max_size=4)),
    max_leaves=25), st.sampled_from([2, 4]), st.booleans())
def test_dumped_block_yaml_reads_the_same(data: Any, indent: int, flow: bool) -> None:
    text = yaml.safe_dump(data, default_flow_style=None if flow else False, indent=indent,
                          allow_unicode=True, width=10_000)
    agrees(text)


def test_generated_texts_are_mostly_read() -> None:
    """The generators above would prove little if the reader stepped aside from everything."""
    read = sum(agrees(yaml.safe_dump({"k": i, "l": [i, {"m": str(i)}], "n": {"o": None}},
                                     default_flow_style=False)) for i in range(20))
    assert read == 20
