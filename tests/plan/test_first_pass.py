"""The first pass over many new sets lands the same commit, byte for byte, whether manifests
are read by the line reader (gitscale.yamlio.block) or, as before it, by libyaml alone."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from unittest import mock

import pytest

from gitscale.yamlio import block as yamlblock
from tests.helpers import RUNNERSET, git, make_repo, run

NOW = "2026-11-22T10:00:00Z"
SETS = 240

# The layouts a config repo holds, each written the way people write it (the line reader takes
# most of them; the CRLF, multi-document and block-scalar files are left to libyaml).
LAYOUTS = [
    RUNNERSET,
    """\
# {name}: four-space file with comments and annotations of its own
apiVersion: gitscale.dev/v1alpha1
kind: RunnerSet
metadata:
    name: {name}
    namespace: ci   # team namespace
    annotations:
        owner: 'platform'
spec:
    replicas: {replicas}   # managed by gitscale
    platform: buildkite
    buildkite: {{queue: default}}
    template:
        spec:
            containers:
            -   name: agent
                image: "buildkite/agent:3"
""",
    """\
apiVersion: gitscale.dev/v1alpha1
kind: RunnerSet
metadata: {{name: {name}, labels: {{a: b}}}}
spec:
  platform: github
  github: {{configURL: "https://github.com/example", credentialsSecret: gh}}
  replicas:
  template: {{spec: {{containers: [{{name: runner, image: "runner:1"}}]}}}}
""",
    """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: {replicas}
  template:
    spec:
      containers:
      - {{name: c, image: "x:1"}}
""",
    """\
apiVersion: actions.summerwind.dev/v1alpha1
kind: RunnerDeployment
metadata:
  name: {name}
  annotations: {{}}
spec:
  replicas: {replicas}
  template:
    spec:
      repository: example/{name}
""",
    """\
apiVersion: v1
kind: ConfigMap
metadata: {{name: {name}-env}}
data:
  script: |
    echo hello
---
apiVersion: gitscale.dev/v1alpha1
kind: RunnerSet
metadata:
  name: {name}
spec: {{replicas: {replicas}, platform: github, github: {{configURL: "https://github.com/x", credentialsSecret: gh}},
  template: {{spec: {{containers: [{{name: runner, image: "runner:1"}}]}}}}}}
""",
    """\
apiVersion: v1
kind: ConfigMap
metadata: {{name: {name}-env}}
---
apiVersion: gitscale.dev/v1alpha1
kind: RunnerSet
metadata: {{name: {name}}}
spec: {{replicas: {replicas}, patchID: 4, platform: github, github: {{configURL: "https://x", credentialsSecret: gh}}, template: {{spec: {{containers: [{{name: r, image: r}}]}}}}}}
""",
    "\0rawapiVersion: gitscale.dev/v1alpha1\r\nkind: RunnerSet\r\nmetadata:\r\n  name: {name}\r\n"
    "spec:\r\n  replicas: {replicas}\r\n  platform: github\r\n"
    "  github: {{configURL: \"https://github.com/example\", credentialsSecret: gh}}\r\n"
    "  template: {{spec: {{containers: [{{name: runner, image: runner}}]}}}}\r\n",
]


def build(tmp_path: Path) -> tuple[Path, Path]:
    files: dict[str, str] = {}
    config = ["runnerSets:"]
    demand: dict[str, dict[str, int]] = {}
    for i in range(SETS):
        name = f"set-{i:03d}"
        layout = LAYOUTS[i % len(LAYOUTS)]
        files[f"sets/{i % 5}/{name}.yaml"] = layout.format(name=name, replicas=i % 4)
        config += [f"  - name: {name}", f"    manifest: sets/{i % 5}/{name}.yaml",
                   f"    object: {{name: {name}}}", "    source: {file: demand.yaml}",
                   "    policy: {minReplicas: 0, maxReplicas: 50}"]
        demand[name] = {"queued": i % 6, "running": i % 3}
    files["gitscale.yaml"] = "\n".join(config) + "\n"
    files["demand.yaml"] = "{}\n"
    make_repo(tmp_path, files)
    demand_file = tmp_path / "demand.json"
    demand_file.write_text(json.dumps(demand))
    return tmp_path / "remote.git", demand_file


def first_pass(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
               template: Path, demand: Path, where: Path) -> str:
    remote = where / "remote.git"
    shutil.copytree(template, remote, symlinks=True)
    monkeypatch.setenv("GITSCALE_CACHE_DIR", str(where / "cache"))  # empty: every set is new
    code, out, err = run(capsys, "reconcile", "--repo", str(remote), "--demand", str(demand),
                         "--now", NOW)
    assert code == 0, out + err
    return git(remote, "rev-parse", "main")


def test_the_first_pass_lands_the_same_commit_bytes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    template, demand = build(tmp_path / "repo")
    base = git(template, "rev-parse", "main")
    fast = first_pass(capsys, monkeypatch, template, demand, tmp_path / "fast")
    with mock.patch.object(yamlblock, "load", side_effect=yamlblock.Deferred("off")):
        slow = first_pass(capsys, monkeypatch, template, demand, tmp_path / "slow")
    assert fast == slow  # the same tree, message and dates: the same commit id
    remote = tmp_path / "fast" / "remote.git"
    assert git(remote, "rev-parse", "main~1") == base
    written = git(remote, "diff-tree", "--no-commit-id", "--name-only", "-r", "main")
    assert len(written.splitlines()) == SETS  # every set was new: every manifest written once
