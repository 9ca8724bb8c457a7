"""``CHANGE-ME``: the one spelling of a value ``gitscale init`` could not fill in.

``init`` writes it inside the value (``org: CHANGE-ME``, ``configURL: https://github.com/CHANGE-ME``)
with a comment on the same line saying what belongs there; ``init`` prints the list of them, and
``validate`` and every command that commits (``reconcile``, ``run``, ``serve``, ``drain``) refuse
a gitscale.yaml or a managed manifest that still holds one, naming the file and line and quoting
that comment. Only values count: a comment that mentions the word is not a placeholder.
"""
from __future__ import annotations

from dataclasses import dataclass

PLACEHOLDER = "CHANGE-ME"


@dataclass(frozen=True)
class Placeholder:
    line: int  # 1-based, where the value starts
    value: str  # the whole value that holds the placeholder
    hint: str  # the comment at the end of that line: what to put there ("" without one)

    def describe(self, path: str) -> str:
        """``PATH:LINE: replace CHANGE-ME in 'VALUE' with HINT``: a line of an error or a list."""
        what = self.hint or "the value gitscale init could not guess"
        where = "" if self.value == PLACEHOLDER else f" in {self.value!r}"
        return f"{path}:{self.line}: replace {PLACEHOLDER}{where} with {what}"


def find_placeholders(text: str) -> list[Placeholder]:
    """Every scalar (key or value) of ``text`` that holds ``CHANGE-ME``, in order. Costs a
    substring search when there is none; only a text that has one is scanned."""
    if PLACEHOLDER not in text:
        return []
    import yaml

    lines = text.splitlines()
    last_token_end: dict[int, int] = {}  # line → column after its last token
    found: list[tuple[int, str]] = []
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        for token in yaml.scan(text, Loader=loader):
            end = token.end_mark
            last_token_end[end.line] = max(last_token_end.get(end.line, 0), end.column)
            if isinstance(token, yaml.ScalarToken) and PLACEHOLDER in token.value:
                found.append((token.start_mark.line, token.value))
    except yaml.YAMLError:
        # not YAML after all: every line that has it before a " #" (a comment, most likely)
        return [Placeholder(n + 1, value.strip(), comment.strip())
                for n, (value, _, comment) in enumerate(line.partition(" #") for line in lines)
                if PLACEHOLDER in value]
    return [Placeholder(line + 1, value, _comment(lines[line], last_token_end.get(line, 0)))
            for line, value in found if line < len(lines)]


def _comment(line: str, after: int) -> str:
    """The comment that ends ``line`` after column ``after`` (where its last token ended)."""
    rest = line[after:].strip()
    return rest[1:].strip() if rest.startswith("#") else ""


def placeholder_problems(path: str, text: str) -> list[str]:
    """``find_placeholders`` as the lines of an error about the file at ``path``."""
    return [p.describe(path) for p in find_placeholders(text)]
