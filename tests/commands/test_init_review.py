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


def shell(script: str, cwd: Path, summary: Path) -> subprocess.CompletedProcess[str]:
    """The step's script as the runner runs it: bash -e, gitscale on PATH."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "GITHUB_STEP_SUMMARY": str(summary)}
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
    if config is None:  # the script, run for real on GitLab's detached checkout
        proposed(root, "2")
        done = shell(plan, root, tmp_path / "unused")
        assert done.returncode == 0, done.stderr
        assert re.search(r"~ linux\s+0 → 2", done.stdout)


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
