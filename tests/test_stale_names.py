"""The package was regrouped by role: comments, docstrings and the docs name modules as they are
now (``gitscale.repo.index``, not ``gitindex``), and a name is imported from the module that
defines it, not through a pass-through (``gitscale.redact.redact``, not ``gitscale.repo.git``'s
copy)."""
from __future__ import annotations

import ast
import importlib
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gitscale"
SOURCES = sorted(PACKAGE.rglob("*.py"))
# the flat modules' names before the regroup, and what they are now
OLD = {"gitindex": "gitscale.repo.index", "gitcommit": "gitscale.repo.fastimport",
       "yamlfast": "gitscale.yamlio.fast", "webhook_batch": "gitscale.webhooks.batch"}
NOT_MODULES = {"gitscale.dev", "gitscale.yaml"}  # the API group, the config file


def prose(source: str) -> str:
    """A module's comments and strings (docstrings among them): what a reader reads as text."""
    return "\n".join(t.string for t in tokenize.generate_tokens(io.StringIO(source).readline)
                     if t.type in (tokenize.COMMENT, tokenize.STRING))


def resolves(name: str) -> bool:
    """``gitscale.a.b``: a module, or a name in the longest module it starts with."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_old_module_name_in_comments_or_docstrings(path: Path) -> None:
    text = prose(path.read_text(encoding="utf-8"))
    found = {old: new for old, new in OLD.items() if re.search(rf"\b{old}\b", text)}
    assert not found, f"{path.relative_to(ROOT)} names {found} (old → now)"


def test_no_old_module_name_in_the_docs() -> None:
    docs = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = [(d.name, old) for d in docs for old in OLD
             if re.search(rf"\b{old}\b", d.read_text(encoding="utf-8"))]
    assert not found


def test_every_dotted_gitscale_name_in_the_text_exists() -> None:
    """``gitscale.a.b`` in a comment or docstring is a module, or a name in one."""
    missing = [(str(path.relative_to(ROOT)), name) for path in SOURCES
               for name in sorted(set(re.findall(r"``(gitscale(?:\.\w+)+)", prose(
                   path.read_text(encoding="utf-8")))) - NOT_MODULES)
               if not resolves(name)]
    assert not missing
    assert resolves("gitscale.repo.index.check_out") and not resolves("gitscale.gitindex")


def test_redact_is_imported_from_gitscale_redact_only() -> None:
    git = importlib.import_module("gitscale.repo.git")
    assert not hasattr(git, "redact") and not hasattr(git, "redact_text")
    through = []
    for path in SOURCES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "gitscale.repo.git" and \
                    any(a.name == "redact" for a in node.names):
                through.append(str(path.relative_to(ROOT)))
            if isinstance(node, ast.Attribute) and node.attr == "redact" and \
                    isinstance(node.value, ast.Name) and node.value.id == "git":
                through.append(str(path.relative_to(ROOT)))
    assert not through


def test_the_checks_see_what_they_look_for() -> None:
    """The reader finds an old name in a comment and a docstring, not in code."""
    sample = ('"""Reads ``gitindex.check_out``."""\nfrom x import fast as yamlfast  # yamlfast\n'
              'y = yamlfast\n')
    assert prose(sample).splitlines() == ['"""Reads ``gitindex.check_out``."""', "# yamlfast"]
