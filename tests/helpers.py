"""Test helpers: real git repos in temporary directories, and the CLI run in-process."""
from __future__ import annotations

import ast
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any, Callable

from gitscale.cli import main


def wait_for(check: Callable[[], Any], timeout: float, interval: float = 0.02) -> Any:
    """``check()``'s first truthy value, polled every ``interval`` s; AssertionError after
    ``timeout`` s (for tests that watch another thread or process converge)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(interval)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(textwrap.dedent(text).encode() if not text.startswith("\0raw")
                         else text[4:].encode())


def make_repo(root: Path, files: dict[str, str], *, bare_remote: bool = True) -> Path:
    """A checkout at ``root/config`` with ``files`` committed; pushed to ``root/remote.git``."""
    checkout = root / "config"
    checkout.mkdir(parents=True)
    git(checkout, "init", "--quiet", "--initial-branch=main")
    write(checkout, files)
    git(checkout, "add", "--all")
    git(checkout, "commit", "--quiet", "-m", "initial")
    if bare_remote:
        remote = root / "remote.git"
        git(root, "init", "--quiet", "--bare", "--initial-branch=main", str(remote))
        git(checkout, "remote", "add", "origin", str(remote))
        git(checkout, "push", "--quiet", "--set-upstream", "origin", "main")
    return checkout


def run(capsys, *argv: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    """Run the CLI in-process; returns (exit code, stdout, stderr)."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


RUNNERSET = """\
apiVersion: gitscale.dev/v1alpha1
kind: RunnerSet
metadata:
  name: {name}
spec:
  replicas: {replicas}
  platform: github
  github: {{configURL: "https://github.com/example", credentialsSecret: github-app}}
  template:
    spec:
      containers:
        - name: runner
          image: runner:1
"""


def simple_config(sets: dict[str, str], source: str = "demand.yaml") -> str:
    """gitscale.yaml for sets name → inline policy (flow mapping text)."""
    lines = ["runnerSets:"]
    for name, policy in sets.items():
        lines += [f"  - name: {name}", f"    manifest: sets/{name}.yaml",
                  f"    source: {{file: {source}}}", f"    policy: {policy}"]
    return "\n".join(lines) + "\n"

# Real CRDs and API payloads written by others, copied byte-exact from their projects (each
# folder's SOURCES.md says from where), so the suite runs on a clone with nothing beside it.
REFERENCE = Path(__file__).resolve().parents[1] / "fixtures" / "reference"


def imports(path: Path) -> set[str]:
    """Top-level packages a module imports (for the layering tests)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found
