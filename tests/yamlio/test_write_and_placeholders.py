"""Writing YAML without anchors or aliases, and finding `init`'s CHANGE-ME values by line."""
from __future__ import annotations

import pytest
import yaml

from gitscale.yamlio.placeholders import Placeholder, find_placeholders, placeholder_problems
from gitscale.yamlio.write import dump


def test_a_shared_object_is_written_out_each_time() -> None:
    probe = {"httpGet": {"path": "/healthz", "port": "http"}}
    data = {"readinessProbe": probe, "livenessProbe": probe, "ports": [probe["httpGet"]] * 2}
    assert "&id" in yaml.safe_dump(data, sort_keys=False)  # what PyYAML does by itself
    text = dump(data)
    assert "&" not in text and "*" not in text
    assert yaml.safe_load(text) == data


def test_otherwise_the_same_bytes_as_safe_dump() -> None:
    data = {"b": [1, "two", None, True], "a": {"long": "x " * 80, "date": "2026-01-01"}}
    for options in ({}, {"width": 100}, {"default_flow_style": None, "width": 120}):
        assert dump(data, **options) == yaml.safe_dump(data, sort_keys=False, **options)


TEXT = """\
# CHANGE-ME in a comment is not a value
top:
  org: CHANGE-ME  # the organization
  url: "https://github.com/CHANGE-ME"   # the URL, quoted
  source: {github: {org: CHANGE-ME, labels: [a, b]}}  # in a flow mapping
  args:
    - --repo
    - https://CHANGE-ME/config.git  # the repo
  bare: CHANGE-ME
  fine: acme  # CHANGE-ME only in this comment
"""


def test_values_with_the_placeholder_by_line_with_the_lines_comment() -> None:
    assert find_placeholders(TEXT) == [
        Placeholder(3, "CHANGE-ME", "the organization"),
        Placeholder(4, "https://github.com/CHANGE-ME", "the URL, quoted"),
        Placeholder(5, "CHANGE-ME", "in a flow mapping"),
        Placeholder(8, "https://CHANGE-ME/config.git", "the repo"),
        Placeholder(9, "CHANGE-ME", ""),
    ]


@pytest.mark.parametrize(("text", "want"), [
    pytest.param("a: 1\n", [], id="none"),
    pytest.param("a: change-me\n", [], id="one-spelling"),
    pytest.param("a: @CHANGE-ME  # hint\n", ["x.yaml:1: replace CHANGE-ME in 'a: @CHANGE-ME' "
                                             "with hint"], id="not-yaml"),
])
def test_problems(text: str, want: list[str]) -> None:
    assert placeholder_problems("x.yaml", text) == want


def test_a_problem_says_file_line_and_what_to_put_there() -> None:
    assert placeholder_problems("gitscale.yaml", TEXT)[:2] == [
        "gitscale.yaml:3: replace CHANGE-ME with the organization",
        "gitscale.yaml:4: replace CHANGE-ME in 'https://github.com/CHANGE-ME' with the URL, "
        "quoted",
    ]
