"""A problem schema validation found in a manifest: where in the object (as people read it,
and as keys for its line in the file) and what to fix; jsonschema's errors made one problem
per thing to fix (``explain``)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from gitscale.errors import shown_as_yaml
from gitscale.yamlio.read import Document


@dataclass(frozen=True)
class Problem:
    path: str  # where in the object, as people read it: "spec.github"
    message: str
    at: tuple[str | int, ...] = ()  # the same path, as keys: for its line in the file
    key: tuple[object] | None = None  # the key to point at inside ``at`` (an unknown one,
    # in a tuple: ``(None,)`` is the key YAML read from ``~:``), if any
    object: tuple[str, str] | None = None  # (kind, name): kubeconform names the object

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"

    def line(self, document: Document) -> int | None:
        """The 1-based line to show: the unknown key's, else the value's (a mapping that
        lacks a required key: its own line)."""
        if self.key is not None:
            return document.key_line(list(self.at), self.key[0])
        return document.line_of(list(self.at))


def _label(at: Sequence[str | int]) -> str:
    return ".".join(str(p) for p in at) or "(object)"


def explain(errors: Iterable[Any]) -> list[Problem]:
    """jsonschema's errors as one ``Problem`` per thing to fix: each unknown key on its own
    (jsonschema words several in one message); an unknown key that is a typo of a missing
    required one (``credentialSecret`` for ``credentialsSecret``) is one problem, not two."""
    unknown: dict[tuple[str | int, ...], list[tuple[object, list[str]]]] = {}
    missing: dict[tuple[str | int, ...], list[str]] = {}
    others: list[Problem] = []
    for error in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path]):
        at = tuple(error.absolute_path)
        instance = error.instance
        if error.validator == "additionalProperties" and isinstance(instance, dict):
            known = list((error.schema.get("properties") or {}))
            patterns = list((error.schema.get("patternProperties") or {}))
            for key in instance:
                if key not in known and not any(re.search(p, str(key)) for p in patterns):
                    unknown.setdefault(at, []).append((key, known))
        elif error.validator == "required" and isinstance(instance, dict):
            for key in error.validator_value:
                if key not in instance and key not in missing.setdefault(at, []):
                    missing[at].append(str(key))
        elif error.validator == "type" and (instance is None or isinstance(instance, bool)):
            # jsonschema says Python's None and True: the file says null and true
            others.append(Problem(_label(at), f"{shown_as_yaml(instance)} is not of type "
                                  f"{error.validator_value!r}", at))
        else:
            others.append(Problem(_label(at), str(error.message), at))
    problems: list[Problem] = []
    for at in sorted(set(unknown) | set(missing), key=lambda a: [str(p) for p in a]):
        lacking = list(missing.get(at, []))
        for key, known in unknown.get(at, []):
            import difflib  # only now: a valid manifest (every pass that writes) never needs it

            if not isinstance(key, str):  # YAML read `~:`, `true:`, `1:` as null, bool, int
                problems.append(Problem(_label(at), f"a key YAML reads as {shown_as_yaml(key)}, not "
                                        "as a field name: quote it, or remove it", at, (key,)))
                continue
            typo = difflib.get_close_matches(key, lacking, n=1, cutoff=0.6)
            if typo:
                lacking.remove(typo[0])
                message = f"unknown field {key!r}: did you mean {typo[0]!r} (required)?"
            else:
                near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
                message = f"unknown field {key!r}" + (f": did you mean {near[0]!r}?" if near
                                                      else "")
            problems.append(Problem(_label(at), message, at, (key,)))
        problems += [Problem(_label(at), f"{key!r} is required", at) for key in lacking]
    return sorted(problems + others, key=lambda p: [str(x) for x in p.at])
