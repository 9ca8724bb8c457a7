"""Label and field selectors, parsed once and matched against raw object dicts.

Label selectors follow the Kubernetes grammar: comma-separated requirements, each one of
``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a)``, ``k``, ``!k``, ``k>n``, ``k<n``.
``!=`` and ``notin`` also match objects without the label (as the real server does).
Field selectors take ``path=v``, ``path==v`` and ``path!=v`` on the fields a kind supports;
any other field is a 400, exactly like a real API server.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from tests.kubeapi.errors import bad_request
from tests.kubeapi.resources import ResourceType

Matcher = Callable[[dict[str, Any]], bool]

_SET_RE = re.compile(r"^(?P<key>[^\s=!<>(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_OP_RE = re.compile(r"^(?P<key>[^\s=!<>(),]+)\s*(?P<op>==|=|!=|<|>)\s*(?P<value>[^\s=!<>(),]*)$")
_EXISTS_RE = re.compile(r"^(?P<neg>!?)\s*(?P<key>[^\s=!<>(),]+)$")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # in, notin, exists, !exists, gt, lt
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "in":
            return present and value in self.values
        if self.op == "notin":
            return not present or value not in self.values
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if not present:
            return False
        try:
            have, want = int(str(value)), int(next(iter(self.values)))
        except ValueError:
            return False
        return have > want if self.op == "gt" else have < want


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside ``( … )``."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def parse_label_selector(text: str | None) -> list[Requirement]:
    if not text or not text.strip():
        return []
    requirements = []
    for part in _split_top_level(text):
        if m := _SET_RE.match(part):
            values = frozenset(v.strip() for v in m["values"].split(",") if v.strip())
            requirements.append(Requirement(m["key"], m["op"], values))
        elif m := _OP_RE.match(part):
            op = {"=": "in", "==": "in", "!=": "notin", ">": "gt", "<": "lt"}[m["op"]]
            requirements.append(Requirement(m["key"], op, frozenset([m["value"]])))
        elif m := _EXISTS_RE.match(part):
            requirements.append(Requirement(m["key"], "!exists" if m["neg"] else "exists"))
        else:
            raise bad_request(f"unable to parse requirement: {part!r} in labelSelector {text!r}")
    return requirements


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    equal: bool
    value: str

    def matches(self, obj: dict[str, Any]) -> bool:
        return (field_value(obj, self.path) == self.value) == self.equal


def field_value(obj: dict[str, Any], path: str) -> str:
    """The selector value of a dotted path: missing → "", booleans as true/false."""
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def parse_field_selector(text: str | None, rt: ResourceType) -> list[FieldRequirement]:
    if not text or not text.strip():
        return []
    out = []
    for part in text.split(","):
        m = re.match(r"^\s*([^=!\s]+)\s*(==|=|!=)(.*)$", part)
        if not m:
            raise bad_request(f"invalid selector: {text!r}; can't understand {part!r}")
        path, op, value = m[1], m[2], m[3].strip().replace("\\,", ",").replace("\\=", "=")
        if not rt.supports_field(path):
            raise bad_request(f'field label not supported: {path}')
        out.append(FieldRequirement(path, op != "!=", value))
    return out


def matcher(rt: ResourceType, namespace: str | None, label_selector: str | None,
            field_selector: str | None) -> Matcher:
    """One predicate for "does this object belong in this list or watch" (raises 400 early)."""
    labels = parse_label_selector(label_selector)
    fields = parse_field_selector(field_selector, rt)

    def match(obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        if namespace is not None and rt.namespaced and meta.get("namespace") != namespace:
            return False
        obj_labels = meta.get("labels") or {}
        return (all(r.matches(obj_labels) for r in labels)
                and all(f.matches(obj) for f in fields))

    return match
