"""Readers for what ships besides the package: the Dockerfile, .dockerignore, the locks and the
workflows (the tests in this folder share them)."""
from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
IMAGE_LOCK = ROOT / "requirements" / "image.txt"
BUILD_LOCK = ROOT / "requirements" / "build.txt"
# What the Dockerfile removes from the image's venv, under site-packages: the kubernetes
# client's asyncio API, which gitscale never imports
PRUNED = ("kubernetes/aio",)


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper case: FROM, RUN, …
    args: str  # the rest of the instruction, continuation lines joined
    line: int


def instructions(text: str) -> list[Instruction]:
    """The Dockerfile's instructions: comments and blank lines dropped, `\\` continuations
    joined (a comment line inside a continued instruction is dropped, as Docker does)."""
    found: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        keyword, _, args = " ".join(pending).partition(" ")
        found.append(Instruction(keyword.upper(), args.strip(), start))
        pending = []
    assert not pending, "the Dockerfile ends inside a continued instruction"
    return found


@dataclass(frozen=True)
class Stage:
    base: str  # FROM's image, global ARG defaults substituted
    name: str | None
    body: list[Instruction]


def stages(text: str) -> list[Stage]:
    """The build stages, each with its base image (global ARGs' defaults filled in)."""
    defaults: dict[str, str] = {}
    result: list[Stage] = []
    for ins in instructions(text):
        if ins.keyword == "ARG" and not result:
            name, _, value = ins.args.partition("=")
            defaults[name] = value
        elif ins.keyword == "FROM":
            words = [w for w in ins.args.split() if not w.startswith("--")]
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)",
                          lambda m: defaults[m.group(1) or m.group(2)], words[0])
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            result.append(Stage(base, name, []))
        elif result:
            result[-1].body.append(ins)
    return result


def exec_form(args: str) -> list[str]:
    """An instruction's JSON (exec) form, e.g. ENTRYPOINT ["gitscale"]."""
    value = yaml.safe_load(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def env(stage: Stage) -> dict[str, str]:
    """The stage's ENV as key=value pairs (the form this Dockerfile uses)."""
    found: dict[str, str] = {}
    for ins in stage.body:
        if ins.keyword == "ENV":
            for word in shlex.split(ins.args):
                key, _, value = word.partition("=")
                found[key] = value
    return found


# -- .dockerignore -----------------------------------------------------------------------------
def _pattern(pattern: str) -> re.Pattern[str]:
    """Docker's matching (Go's filepath.Match from the context root, plus `**`) as a regex that
    matches the path or any folder above it (an excluded folder excludes its contents)."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out += "[" + pattern[i + 1:end].replace("!", "^", 1) + "]"
            i = end + 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(f"^{out}(?:/.*)?$")


def dockerignore(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """(excludes, pattern) per line; the last matching line decides, as in Docker."""
    rules = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        body = line[1:] if negated else line
        body = body.strip().lstrip("/").rstrip("/")
        rules.append((not negated, _pattern(body)))
    return rules


def in_context(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    sent = True
    for excludes, pattern in rules:
        if pattern.match(path):
            sent = not excludes
    return sent


def checkout_files(root: Path = ROOT) -> list[str]:
    """The checkout's files as a clone would have them plus work not yet committed: tracked and
    untracked-but-not-ignored files that exist."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=root, check=True, capture_output=True).stdout.decode()
    return sorted({p for p in out.split("\0") if p and (root / p).is_file()})


# -- workflows ---------------------------------------------------------------------------------
def workflow(name: str) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    assert isinstance(data, dict)
    if True in data:  # YAML 1.1 reads the key `on` as true
        data["on"] = data.pop(True)
    return data


def steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(job.get("steps", []))


def uses(job: dict[str, Any], action: str) -> dict[str, Any]:
    """The job's one step that uses ``action`` (owner/name, any version)."""
    found = [s for s in steps(job) if s.get("uses", "").split("@")[0] == action]
    assert len(found) == 1, (action, [s.get("uses") for s in steps(job)])
    return found[0]


# -- pins --------------------------------------------------------------------------------------
def extra_pins(extra: str) -> dict[str, str]:
    """name → version of pyproject.toml's optional dependency group ``extra``."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return dict(_pin(r) for r in project["optional-dependencies"][extra])


def runtime_pins() -> dict[str, str]:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return dict(_pin(r) for r in project["dependencies"])


def _pin(requirement: str) -> tuple[str, str]:
    name, sep, version = requirement.partition("==")
    assert sep and re.fullmatch(r"[\w.]+", version.strip()), f"not pinned: {requirement}"
    return canonical(name), version.strip()


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def lock_pins(path: Path) -> dict[str, tuple[str, list[str]]]:
    """name → (version, sha256 hashes) of a pip-compile --generate-hashes lock."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    found: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        line = line.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        assert not line.startswith("-"), f"{path.name}: an option in the lock: {line}"
        requirement, *options = line.split()
        name, version = _pin(requirement)
        hashes = [o.removeprefix("--hash=sha256:") for o in options]
        assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), line
        found[name] = (version, hashes)
    return found
