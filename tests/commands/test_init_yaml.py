"""No file gitscale writes holds a YAML anchor or alias (`&id001` / `*id001`): every `init`
variant with either GitOps tool, the demo's config repo after its passes, and the CRD. Read
with the YAML parser's events, not a pattern: an `&` in a string is not an anchor."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gitscale.controller.crd import crd_yaml
from tests.commands.init_variants import ALL, init, options, written
from tests.helpers import run


def anchors_and_aliases(text: str) -> list[str]:
    found = []
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            found.append(f"line {event.start_mark.line + 1}: alias *{event.anchor}")
        elif getattr(event, "anchor", None):
            found.append(f"line {event.start_mark.line + 1}: anchor &{event.anchor}")
    return found


def yaml_files(root: Path, files: list[Path]) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in files
            if p.suffix in (".yaml", ".yml")}


def test_the_check_sees_an_alias_and_not_an_ampersand_in_a_string() -> None:
    assert anchors_and_aliases("a: &x {b: 1}\nc: *x\n") == ["line 1: anchor &x",
                                                           "line 2: alias *x"]
    assert anchors_and_aliases("a: 'x &y *z'\nb: x&y\n") == []


@pytest.mark.parametrize(("gitops", "variant", "complete"), ALL)
def test_no_file_init_writes_has_an_anchor_or_alias(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, gitops: str, variant: str, complete: bool) -> None:
    root, _ = init(tmp_path, capsys, gitops, *options(gitops, variant, complete))
    texts = yaml_files(root, written(root))
    assert "deploy/scaler/cronjob.yaml" in texts and len(texts) > 12
    if variant != "buildkite":
        assert "deploy/scaler/deployment-serve.yaml" in texts  # the one that had them
    for rel, text in texts.items():
        assert anchors_and_aliases(text) == [], rel


def test_no_file_of_the_demo_or_the_crd_has_an_anchor_or_alias(tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                capsys) -> None:
    code, _, err = run(capsys, "demo", "--dir", str(tmp_path / "demo"))
    assert code == 0, err
    checkout = tmp_path / "demo" / "config"
    texts = yaml_files(checkout, [p for p in checkout.rglob("*") if ".git" not in p.parts])
    assert len(texts) >= 3
    for rel, text in {**texts, "crd": crd_yaml()}.items():
        assert anchors_and_aliases(text) == [], rel
