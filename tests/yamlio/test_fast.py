"""The event loader gives PyYAML's data exactly, or steps aside (``Unsupported``)."""
from __future__ import annotations

import itertools
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gitscale.yamlio import fast as yamlfast
from gitscale.errors import InputError
from gitscale.yamlio.read import _StrictLoader, load_documents


def pyyaml(text: str) -> list[Any]:
    return list(yaml.load_all(text, Loader=_StrictLoader))


def same_or_unsupported(text: str) -> bool:
    """True when the fast loader answered (and agreed), False when it stepped aside."""
    try:
        expected = pyyaml(text)
    except (yaml.YAMLError, ValueError, TypeError):
        with pytest.raises(yamlfast.Unsupported):
            yamlfast.load_all(text)
        return False
    try:
        fast = yamlfast.load_all(text)
    except yamlfast.Unsupported:
        return False
    assert fast == expected
    assert [type(x) for x in fast] == [type(x) for x in expected]
    return True


@pytest.mark.parametrize("text", [
    pytest.param("a: 1\nb: [x, 'y', \"z\"]\nc: {d: null, e: ~, f: yes, g: 0x1F, h: 1_000}\n",
                 id="resolved-scalars"),
    pytest.param("t: 2026-11-21T09:00:00Z\nd: 2026-11-21\nf: 1.5\ni: .inf\nn: -0\no: 0o17\n",
                 id="timestamps-floats-ints"),
    pytest.param("a: '1'\nb: \"true\"\nc: |\n  block\n  text\nd: >\n  folded\n", id="quoted"),
    pytest.param("--- a\n--- \n---\nb: 2\n...\n", id="several-documents"),
    pytest.param("", id="empty-stream"),
    pytest.param("# only a comment\n", id="comment"),
    pytest.param("1: one\n2.5: x\nnull: y\nfalse: z\n", id="scalar-keys"),
    pytest.param("- - - deep\n  - x\n- {}\n- []\n", id="nested-sequences"),
    pytest.param("a: 1:20\nb: 0b101\nc: +12\nd: 1e3\ne: 1.0e+3\n", id="yaml-1.1-numbers"),
    pytest.param("a: b\r\nc: d\r\n", id="crlf"),
])
def test_agrees_with_pyyaml(text: str) -> None:
    assert same_or_unsupported(text)


@pytest.mark.parametrize("text", [
    pytest.param("a: &x 1\nb: *x\n", id="alias"),
    pytest.param("base: &b {x: 1}\nderived:\n  <<: *b\n  y: 2\n", id="merge-key"),
    pytest.param("a: !!str 1\n", id="explicit-tag"),
    pytest.param("a: 1\na: 2\n", id="duplicate-key"),
    pytest.param("1: a\n'1': b\n", id="duplicate-key-as-written"),
    pytest.param("? [a, b]\n: c\n", id="complex-key"),
    pytest.param("a: [1, 2\n", id="broken-yaml"),
    pytest.param("d: 2026-02-30\n", id="impossible-date"),
    pytest.param("a: =\n", id="value-tag"),
])
def test_steps_aside_and_pyyaml_decides(text: str) -> None:
    assert not same_or_unsupported(text)


def test_errors_are_pyyaml_errors() -> None:
    """Whatever the fast loader refuses, load_documents still reports with PyYAML's words."""
    with pytest.raises(InputError, match=r"duplicate key 'a'"):
        load_documents("a: 1\na: 2\n", "f.yaml")
    with pytest.raises(InputError) as broken:
        load_documents("a: [1, 2\n", "f.yaml")
    assert broken.value.line is not None
    assert load_documents("a: &x 1\nb: *x\n", "f.yaml")[0].data == {"a": 1, "b": 1}


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-10**20, 10**20),
    st.floats(allow_nan=False), st.text(max_size=12),
    st.sampled_from(["yes", "No", "on", "~", "null", "0x1F", "0o17", "1_000", "1:20", ".inf",
                     "2026-11-21", "2026-11-21T09:00:00Z", "<<", "=", "-", "? x", "'q'", "#"]),
)
DATA = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4),
    st.dictionaries(st.one_of(st.text(max_size=6), st.integers(-5, 5), st.booleans()), inner,
                    max_size=4)), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(DATA, st.sampled_from([None, True, False]), st.booleans())
def test_any_dumped_data_loads_the_same(data: Any, flow: bool | None, canonical: bool) -> None:
    text = yaml.safe_dump(data, default_flow_style=flow, canonical=canonical, allow_unicode=True)
    same_or_unsupported(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab:-[]{},'\"\n #&*!|>?01.~", max_size=40))
def test_any_text_loads_the_same_or_steps_aside(text: str) -> None:
    try:
        expected = pyyaml(text)
    except (yaml.YAMLError, ValueError, TypeError):
        with pytest.raises(yamlfast.Unsupported):
            yamlfast.load_all(text)
        return
    try:
        fast = yamlfast.load_all(text)
    except yamlfast.Unsupported:
        return
    assert fast == expected


@pytest.mark.parametrize("text", [
    pytest.param('{"a": {"queued": 1, "running": 2, "jobs": ["x", 3]}}', id="demand"),
    pytest.param('{"a": 1e3, "b": 1.5, "c": -0, "d": true, "e": null}', id="numbers"),
    pytest.param('[1, "two", {"three": [3.0]}]\n', id="array"),
    pytest.param('{"a":1,"b":"\\/\\n\\t"}', id="escapes"),
])
def test_json_agrees_with_pyyaml(text: str) -> None:
    assert same_or_unsupported(text)


def test_json_duplicates_and_constants_step_aside() -> None:
    assert not same_or_unsupported('{"a": 1, "a": 2}')
    with pytest.raises(yamlfast.Unsupported):
        yamlfast.load_all('{"a": NaN}')


def test_yaml_line_breaks_inside_json_are_left_to_pyyaml() -> None:
    """JSON takes NEL in a string; YAML 1.1 counts it as a line break and refuses the text."""
    with pytest.raises(yamlfast.Unsupported):
        yamlfast.load_all('{"\x85": null}')
    assert not same_or_unsupported('{"\x85": null}')


@settings(max_examples=300, deadline=None)
@given(DATA.filter(lambda d: isinstance(d, (dict, list))))
def test_any_json_loads_the_same(data: Any) -> None:
    import json

    try:
        text = json.dumps(data, ensure_ascii=False)
    except (TypeError, ValueError):
        return
    same_or_unsupported(text)


def pyyaml_scalar(value: str) -> tuple[Any] | None:
    """A plain scalar as PyYAML's own resolver and constructor read it; None: refused."""
    resolver, constructor = yaml.resolver.Resolver(), yaml.constructor.SafeConstructor()
    tag = resolver.resolve(yaml.ScalarNode, value, (True, False))
    try:
        return (constructor.construct_object(yaml.ScalarNode(tag, value)),)
    except Exception:  # noqa: BLE001 - a merge or value tag, a bad date: PyYAML refuses it
        return None


def test_the_table_without_pyyaml_is_pyyamls() -> None:
    """Every first character that PyYAML resolves to something other than bool or null is in
    OTHER_FIRST, and WORDS are exactly what bool and null match."""
    table = yaml.resolver.Resolver.yaml_implicit_resolvers
    assert None not in table  # no resolver for every first character
    bool_null = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:null"}
    for first, resolvers in table.items():
        if first not in yamlfast.OTHER_FIRST and first != "":
            assert {tag for tag, _ in resolvers} <= bool_null, first
    for word, value in yamlfast.WORDS.items():
        assert yamlfast.without_pyyaml(word) == pyyaml_scalar(word) == (value,)
    letters = "yesnoturflaYESNOTURFLA"
    for size in (1, 2, 3, 4):
        for word in map("".join, itertools.product(letters, repeat=size)):
            assert yamlfast.without_pyyaml(word) == pyyaml_scalar(word), word


@pytest.mark.parametrize("value", [
    "apiVersion", "gitscale.dev/v1alpha1", "name", "namespace", "true", "Off", "NULL", "~", "",
    "3", "0", "10000", "4Gi", "500m", "2.5", "1e3", "0x1F", "0o17", "017", "1_000", "1:20",
    "2026-11-21", "2026-11-21T09:00:00Z", "-1", "+1", "-", ".status.x", ".5", ".inf", ".NaN",
    "-.inf", "+.5", "<<", "=", "~x", "ghcr.io/actions/actions-runner:2.321.0", "x64", "amd64", "true\n",
    "9" * 19, "١٢", "12a", "1 2",
])
def test_scalars_read_without_pyyaml_are_pyyamls(value: str) -> None:
    quick = yamlfast.without_pyyaml(value)
    assert quick is None or (quick == pyyaml_scalar(value)
                             and type(quick[0]) is type(pyyaml_scalar(value)[0]))  # type: ignore[index]
    assert value not in ("4Gi", "500m", "apiVersion", "name", "3", ".status.x", "true") \
        or quick is not None  # what manifests hold is read here


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet="0123456789abefinoxyEINTZ_.:+-<=~ \t\n/Gm", min_size=1, max_size=12))
def test_any_plain_scalar_without_pyyaml_is_pyyamls(value: str) -> None:
    quick = yamlfast.without_pyyaml(value)
    if quick is not None:
        expected = pyyaml_scalar(value)
        assert expected is not None and quick == expected, value
        assert type(quick[0]) is type(expected[0]), value
