"""The README's layout table names every module a newcomer has to find."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gitscale"


def layout() -> str:
    text = (ROOT / "README.md").read_text()
    return text[text.index("\n## Layout"):text.index("\n## Tests")]


def named() -> set[str]:
    return set(re.findall(r"`([^`]+)`", layout()))


def modules() -> list[str]:
    """Top-level modules and packages, every module of the two extension points and of the
    clients they build on."""
    found = [p.name for p in PACKAGE.glob("*.py") if not p.name.startswith("__")]
    found += [f"{p.name}/" for p in PACKAGE.iterdir()
              if p.is_dir() and (p / "__init__.py").exists()]
    for package in ("demand", "controller", "clients"):
        found += [p.name for p in (PACKAGE / package).glob("*.py") if p.name != "__init__.py"]
    return sorted(found)


@pytest.mark.parametrize("module", modules())
def test_the_layout_table_names_the_module(module: str) -> None:
    names = named()
    assert module in names or f"gitscale/{module}" in names, module
