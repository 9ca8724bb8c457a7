"""The review init writes beside the scheduler: on a pull / merge request, `validate` and `plan`
on the merge commit (a detached HEAD). The Plan step's shell runs here for real, with gitscale
on PATH, against a checkout like the one actions/checkout or GitLab's runner leaves."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gitscale import __version__
from tests.commands.test_init_ops import init
from tests.helpers import git
from tests.ship.test_workflows import schema_check

WORKFLOW = ".github/workflows/gitscale-plan.yml"
FILE_SOURCE = """\
runnerSets:
  - name: linux
    manifest: clusters/prod/runnersets/linux.yaml
    source: {file: demand.yaml}
    policy: {minReplicas: 0, maxReplicas: MAX}
"""


def proposed(root: Path, max_replicas: str) -> None:
    """A pull request's merge commit: the config changed, checked out detached. The source
    becomes a demand file (the test has no GitHub), 4 jobs queued."""
    git(root, "checkout", "--quiet", "--detach")
    (root / "gitscale.yaml").write_text(FILE_SOURCE.replace("MAX", max_replicas))
    (root / "demand.yaml").write_text("linux: {queued: 4, running: 0}\n")
    git(root, "commit", "--quiet", "-am", "the proposed change")


def shell(script: str, cwd: Path, summary: Path, first_on_path: Path | None = None,
          **env_vars: str) -> subprocess.CompletedProcess[str]:
    """The step's script as the runner runs it: bash -e, gitscale on PATH (after
    ``first_on_path``, a stand-in's folder)."""
    path = os.pathsep.join(str(p) for p in (first_on_path, Path(sys.executable).parent) if p)
    env = {**os.environ, "PATH": f"{path}{os.pathsep}{os.environ['PATH']}",
           "GITHUB_STEP_SUMMARY": str(summary), **env_vars}
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_github_review_runs_validate_and_plan_read_only(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    root, out = init(tmp_path, capsys, "flux")
    assert WORKFLOW in out
    workflow = yaml.safe_load((root / WORKFLOW).read_text())
    assert workflow[True] == {"pull_request": {"branches": ["main"]}}
    assert workflow["permissions"] == {"contents": "read"}
    (job,) = workflow["jobs"].values()
    assert job["env"]["GITSCALE_VERSION"] == __version__
    steps = {s.get("name"): s for s in job["steps"]}
    checkout = job["steps"][0]
    assert checkout["uses"] == "actions/checkout@v4" and checkout["with"]["fetch-depth"] == 0
    assert steps["Validate"]["run"] == "gitscale validate --repo config"
    # the demand source's secret, as the schedule passes it
    scheduled = (root / ".github/workflows/gitscale.yml").read_text()
    for variable, value in steps["Plan"]["env"].items():
        assert f"{variable}: {value}" in scheduled
    # the Plan step, run for real in a workspace holding the checkout at `config`
    work = tmp_path / "runner"
    work.mkdir()
    git(work, "clone", "--quiet", str(root), "config")
    proposed(work / "config", "3")
    summary = tmp_path / "summary.md"
    done = shell(steps["Plan"]["run"], work, summary)
    assert done.returncode == 0, done.stderr  # plan's 2 (changes pending) is a pass
    text = summary.read_text()
    assert text.startswith("### gitscale plan\n```diff\n") and text.endswith("```\n")
    assert re.search(r"~ linux\s+0 → 3", text) and "+  replicas: 3" in text, text
    assert git(work / "config", "status", "--porcelain") == ""  # nothing written
    # a change gitscale refuses fails the step, and says why
    proposed(work / "config", "lots")
    done = shell(steps["Plan"]["run"], work, summary)
    assert done.returncode == 1 and "gitscale.yaml" in done.stderr and "maxReplicas" in done.stderr
    # a crash (70) or a kill fails it too: an empty summary must not read as "no change"
    crashing = tmp_path / "crashing"
    crashing.mkdir()
    (crashing / "gitscale").write_text("#!/bin/sh\necho 'gitscale crashed: this is a bug' >&2\n"
                                      "exit 70\n")
    (crashing / "gitscale").chmod(0o755)
    done = shell(steps["Plan"]["run"], work, summary, first_on_path=crashing)
    assert done.returncode == 70, done.stderr


@pytest.mark.parametrize("config", [None, "ci/scale.yaml"])
def test_gitlab_review_job_runs_on_merge_requests(tmp_path: Path, capsys,  # type: ignore[no-untyped-def]
                                                  config: str | None) -> None:
    extra = ("--github-org", "acme") + (("--config", config) if config else ())
    root, _ = init(tmp_path, capsys, "argocd", *extra, run_in="gitlab")
    pipeline = yaml.safe_load((root / ".gitlab-ci.yml").read_text())
    job = pipeline["gitscale-plan"]
    assert job["rules"] == [{"if": '$CI_PIPELINE_SOURCE == "merge_request_event"'}]
    assert job["variables"]["GIT_DEPTH"] == "0"
    flag = f" --config {config}" if config else ""
    assert f"gitscale validate --repo .{flag}" in job["script"]
    (plan,) = [line for line in job["script"] if "gitscale plan" in line]
    assert f"gitscale plan --repo .{flag} --every 5m" in plan
    # the scheduled job is still the only one on a schedule
    assert pipeline["gitscale"]["rules"][0] == {"if": '$CI_PIPELINE_SOURCE == "schedule"'}
    if config is None:  # the scripts, run for real on GitLab's checkout
        gitlab_merge_request(tmp_path, root, job["script"])


def gitlab_merge_request(tmp_path: Path, root: Path, script: list[str]) -> None:
    """GitLab checks out the source branch's head, detached; meanwhile gitscale committed
    to the target branch (replicas 0 → 1). The job merges the target in, so the plan is
    that of the merge (1 → 2 with the change's max), not of the branch point (0 → 2)."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "clone", "--quiet", "--bare", str(root), str(remote))
    git(root, "remote", "add", "origin", str(remote))
    git(root, "checkout", "--quiet", "-b", "more")
    proposed(root, "2")  # (detached on the change)
    source = git(root, "rev-parse", "HEAD")
    target = tmp_path / "target"
    git(tmp_path, "clone", "--quiet", str(remote), str(target))
    manifest = target / "clusters/prod/runnersets/linux.yaml"
    manifest.write_text(manifest.read_text().replace("replicas: 0", "replicas: 1"))
    git(target, "commit", "--quiet", "-am", "gitscale: linux 0→1")
    git(target, "push", "--quiet", "origin", "main")
    git(root, "checkout", "--quiet", source)
    merge, validate, plan = script[1:]
    for step in (merge, validate, plan):
        done = shell(step, root, tmp_path / "unused", CI_MERGE_REQUEST_TARGET_BRANCH_NAME="main")
        assert done.returncode == 0, (step, done.stderr)
    assert re.search(r"~ linux\s+1 → 2", done.stdout), done.stdout
    assert git(root, "status", "--porcelain") == "?? plan.txt"


def test_no_gitlab_review_with_a_github_apps_key(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A PEM key cannot be masked, so it is protected: a merge request's pipeline would
    never get it, and unprotecting it would hand it to every branch."""
    root, _ = init(tmp_path, capsys, "flux", "--github-org", "acme", "--github-app-id", "7",
                   run_in="gitlab")
    assert "gitscale-plan" not in yaml.safe_load((root / ".gitlab-ci.yml").read_text())


def test_no_review_from_the_cluster(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The source's credentials live in the cluster there, not in CI."""
    root, _ = init(tmp_path, capsys, "flux", run_in="cluster")
    assert not (root / ".github").exists() and not (root / ".gitlab-ci.yml").exists()


@pytest.mark.parametrize(("run_in", "files", "schema"), [
    pytest.param("github-actions", [".github/workflows/gitscale.yml", WORKFLOW],
                 "vendor.github-workflows", id="github"),
    pytest.param("gitlab", [".gitlab-ci.yml"], "vendor.gitlab-ci", id="gitlab"),
])
def test_the_ci_files_init_writes_are_valid_against_the_ci_schemas(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, run_in: str, files: list[str], schema: str) -> None:
    """SchemaStore's schemas of GitHub workflows and GitLab CI (check-jsonschema's vendored
    copies, offline): a misspelt or misplaced key would be refused by GitHub or GitLab."""
    root, _ = init(tmp_path, capsys, "flux", "--github-org", "acme", "--config", "ci/g.yaml",
                   run_in=run_in)
    for rel in files:
        done = schema_check(root / rel, tmp_path, schema)
        assert done.returncode == 0, (rel, done.stdout + done.stderr)
