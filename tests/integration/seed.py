"""The config repo every integration test starts from, and readers for what gitscale pushed.

The RunnerSet manifest is deliberately awkward: a comment-only first document, a ConfigMap with
decoy ``replicas``/``patchID`` keys, a human annotation, comments after values, quotes of both
kinds, a flow mapping and a blank line inside ``spec``. Only the owned fields may change.
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

RUNNERS = "clusters/prod/runners.yaml"
GPU = "clusters/prod/gpu.yaml"

RUNNERS_YAML = """\
# Runner sets for the monorepo. Humans own everything but the fields gitscale writes.
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: runner-hooks
data:
  replicas: "99"     # a decoy: not an owned field
  patchID: 'keep me'
---
apiVersion: gitscale.dev/v1alpha1
kind: RunnerSet
metadata:
  name: linux-x64
  namespace: ci-runners
  annotations:
    team.example.com/owner: "platform"   # humans own this one
  labels: {team: platform}
spec:
  # gitscale writes the next three fields
  replicas: 2      # written by gitscale
  patchID: 7
  effectiveTime: "2026-03-01T08:00:00Z"

  platform: github
  github:
    configURL: 'https://github.com/example-org'
    credentialsSecret: github-app
    labels: ["self-hosted", "linux", "x64"]
  template:
    spec:
      containers:
        - name: runner
          image: "ghcr.io/actions/actions-runner:2.321.0"   # pinned
"""

GPU_YAML = """\
apiVersion: gitscale.dev/v1alpha1
kind: RunnerSet
metadata:
  name: gpu
spec:
  replicas: 0
  platform: buildkite
  buildkite: {queue: gpu, agentTokenSecret: buildkite-agent-token}
  template:
    spec:
      containers:
        - name: agent
          image: buildkite/agent:3.87.0
"""

CONFIG_YAML = f"""\
runnerSets:
  - name: linux-x64
    manifest: {RUNNERS}
    object: {{kind: RunnerSet, name: linux-x64}}
    source: {{file: demand.yaml}}
    policy: {{minReplicas: 0, maxReplicas: 20, buffer: 0, scaleDownDelay: 0s}}
  - name: gpu
    manifest: {GPU}
    source: {{file: demand.yaml}}
    policy: {{minReplicas: 0, maxReplicas: 4, buffer: 0, scaleDownDelay: 0s}}
"""

FILES = {
    "gitscale.yaml": CONFIG_YAML,
    RUNNERS: RUNNERS_YAML,
    GPU: GPU_YAML,
    "demand.yaml": "linux-x64: {queued: 0, running: 0}\ngpu: {queued: 0, running: 0}\n",
    "README.md": "Config repo for the CI runners.\n",
}

NOW = "2026-03-02T09:00:00Z"

OWNED_SPEC = re.compile(r"^  (replicas|patchID|effectiveTime):")
OWNED_ANNOTATION = re.compile(r"^    gitscale\.dev/[-a-z0-9.]+:")


def demand_text(linux: tuple[int, int], gpu: tuple[int, int] = (0, 0),
                jobs: list[int] | None = None) -> str:
    jobs_part = f", jobs: {jobs}" if jobs is not None else ""
    return (f"linux-x64: {{queued: {linux[0]}, running: {linux[1]}{jobs_part}}}\n"
            f"gpu: {{queued: {gpu[0]}, running: {gpu[1]}}}\n")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def fresh_clone(url: str, dest: Path) -> Path:
    subprocess.run(["git", "clone", "--quiet", url, str(dest)], check=True,
                   capture_output=True, text=True, timeout=60)
    return dest


def commits(bare: Path) -> list[str]:
    """Commits on main, newest first."""
    return git(bare, "rev-list", "refs/heads/main").splitlines()


def merges(bare: Path) -> list[str]:
    return git(bare, "rev-list", "--merges", "refs/heads/main").splitlines()


def show(bare: Path, rev: str, path: str) -> str:
    return subprocess.run(["git", "show", f"{rev}:{path}"], cwd=bare, check=True,
                          capture_output=True).stdout.decode("utf-8")


@dataclass(frozen=True)
class CommitMessage:
    subject: str
    body: str
    raw: str
    sets: dict[str, dict[str, str]]  # Gitscale-Set trailers: name → fields
    base: str | None
    parent: str


def message(bare: Path, rev: str = "refs/heads/main") -> CommitMessage:
    raw = git(bare, "log", "-1", "--format=%B", rev)
    subject = raw.splitlines()[0]
    trailers = git(bare, "log", "-1", "--format=%(trailers:only,unfold)", rev)
    sets: dict[str, dict[str, str]] = {}
    base = None
    for line in trailers.splitlines():
        key, _, value = line.partition(": ")
        if key == "Gitscale-Set":
            name, _, rest = value.partition(" ")
            sets[name] = dict(field.split("=", 1) for field in rest.split())
        elif key == "Gitscale-Base":
            base = value.strip()
    parents = git(bare, "log", "-1", "--format=%P", rev).split()
    assert len(parents) == 1, f"{rev} is not a plain commit: parents {parents}"
    return CommitMessage(subject, raw, raw, sets, base, parents[0])


def runner_set(text: str, name: str) -> dict:
    for doc in yaml.safe_load_all(text):
        if isinstance(doc, dict) and doc.get("kind") == "RunnerSet" \
                and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"no RunnerSet {name} in:\n{text}")
