"""The GitHub workflows: ci.yml runs the README's test command; release.yml checks the tag
against `gitscale --version`, builds and checks the sdist and wheel, pushes the multi-arch
image the manifests name and publishes to PyPI by trusted publishing. Neither runs here (no
GitHub): their facts are asserted, and their shell steps run with stand-ins where they can."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gitscale import __version__
from tests.ship.shipfiles import DOCKERFILE, ROOT, extra_pins, stages, steps, uses, workflow

CONTROLLER = ROOT / "deploy" / "controller" / "deployment.yaml"


def readme_test_command() -> str:
    """The test command of the README's "The two commands"."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("\n## The two commands"):text.index("\n## 60-second")]
    (command,) = [line.split("#")[0].strip() for line in section.splitlines()
                  if line.startswith("bash scripts/test")]
    return command


def all_steps(flow: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for job in flow["jobs"].values() for s in steps(job)]


@pytest.mark.parametrize("name", ["ci.yml", "release.yml"])
def test_every_action_is_pinned_to_a_major_version_at_least(name: str) -> None:
    used = [step["uses"] for step in all_steps(workflow(name)) if "uses" in step]
    assert any(u.startswith("actions/checkout@") for u in used), used  # the loop reads steps
    for action in used:
        assert re.search(r"@(v\d+(\.\d+)*|release/v\d+|[0-9a-f]{40})$", action), action


def schema_check(path: Path, cwd: Path, schema: str = "vendor.github-workflows",
                 ) -> subprocess.CompletedProcess[str]:
    """check-jsonschema against its vendored copy of SchemaStore's GitHub workflow schema
    (offline; ``vendor.gitlab-ci``: GitLab's CI schema)."""
    binary = Path(sys.executable).parent / "check-jsonschema"
    return subprocess.run([str(binary), "--builtin-schema", schema, str(path)],
                          capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.mark.parametrize("name", ["ci.yml", "release.yml"])
def test_the_workflow_is_valid_against_githubs_workflow_schema(name: str, tmp_path: Path) -> None:
    proc = schema_check(ROOT / ".github" / "workflows" / name, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_schema_check_fails_on_a_misspelt_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    stepz: []\n")
    proc = schema_check(bad, tmp_path)
    assert proc.returncode == 1 and "'stepz' was unexpected" in proc.stdout


def test_ci_runs_the_readme_test_command_on_push_and_pull_request() -> None:
    flow = workflow("ci.yml")
    assert set(flow["on"]) == {"push", "pull_request", "workflow_call"}  # release.yml calls it
    (job,) = flow["jobs"].values()
    assert uses(job, "actions/setup-python")["with"]["python-version"] == "3.11"
    runs = [s.get("run", "").strip() for s in steps(job)]
    assert readme_test_command() == "bash scripts/test"
    assert runs[-1] == readme_test_command()
    assert any("apt-get install" in r and re.search(r"\bgit\b", r) for r in runs)
    assert flow["permissions"] == {"contents": "read"}


@pytest.fixture(scope="module")
def release() -> dict[str, Any]:
    return workflow("release.yml")


def step_named(job: dict[str, Any], name: str) -> dict[str, Any]:
    (step,) = [s for s in steps(job) if s.get("name", "").startswith(name)]
    return step


def test_release_runs_on_v_tags_only(release: dict[str, Any]) -> None:
    assert release["on"] == {"push": {"tags": ["v*"]}}
    assert release["permissions"] == {"contents": "read"}  # jobs widen only what they need


def test_release_publishes_nothing_from_a_commit_whose_suite_fails(
        release: dict[str, Any]) -> None:
    assert release["jobs"]["test"] == {"uses": "./.github/workflows/ci.yml"}
    assert release["jobs"]["build"]["needs"] == "test"  # and image and pypi need build


def test_release_builds_and_checks_the_sdist_and_wheel_with_the_tests_pins(
        release: dict[str, Any]) -> None:
    build = step_named(release["jobs"]["build"], "Build the sdist and wheel")["run"]
    pins = extra_pins("test")
    for tool in ("build", "twine"):
        assert f'"{tool}=={pins[tool]}"' in build  # the versions the test command uses
    assert "python -m build --outdir dist" in build
    assert "twine check --strict dist/*" in build
    install = step_named(release["jobs"]["build"], "Install the wheel")["run"]
    assert "--require-hashes --no-deps -r requirements/image.txt" in install
    assert "install --no-deps dist/*.whl" in install


def run_step(script: str, tmp_path: Path, env: dict[str, str]) -> tuple[int, str, str]:
    output = tmp_path / "github_output"
    output.write_text("")
    proc = subprocess.run(["bash", "-e", "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=60,
                          env={**os.environ, "GITHUB_OUTPUT": str(output), **env})
    return proc.returncode, output.read_text(), proc.stdout + proc.stderr


@pytest.mark.parametrize("tag, ok", [(f"v{__version__}", True), ("v0.0.0-not-it", False),
                                     (__version__, False)])
def test_the_tag_check_step_compares_the_tag_with_gitscale_version(
        release: dict[str, Any], tmp_path: Path, tag: str, ok: bool) -> None:
    """The step as written, with the test venv's gitscale standing in for the built wheel."""
    script = step_named(release["jobs"]["build"], "The tag is gitscale --version")["run"]
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "gitscale").symlink_to(Path(sys.executable).parent / "gitscale")
    code, output, log = run_step(script, tmp_path, {"RUNNER_TEMP": str(tmp_path),
                                                    "GITHUB_REF_NAME": tag})
    if ok:
        assert code == 0 and output == f"version={__version__}\n", log
    else:
        assert code != 0 and output == "" and f"is not v{__version__}" in log, log


def test_the_base_pin_step_builds_from_the_dockerfiles_base_at_one_digest(
        release: dict[str, Any], tmp_path: Path) -> None:
    """The step as written, with a stand-in `docker` that prints a digest."""
    script = step_named(release["jobs"]["image"], "Pin the base image by digest")["run"]
    digest = "sha256:" + "ab" * 32
    fake = tmp_path / "bin" / "docker"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho \"$*\" > {tmp_path}/argv\necho '\"{digest}\"'\n")
    fake.chmod(0o755)
    code, output, log = run_step(script, tmp_path,
                                 {"PATH": f"{fake.parent}:{os.environ['PATH']}"})
    assert code == 0, log
    (base,) = {s.base for s in stages(DOCKERFILE.read_text())}
    pinned = base if "@sha256:" in base else f"{base}@{digest}"
    assert output == f"image={pinned}\n"
    if "@sha256:" not in base:
        assert (tmp_path / "argv").read_text().startswith(f"buildx imagetools inspect {base} ")


def test_release_pushes_the_image_the_manifests_name_for_two_platforms(
        release: dict[str, Any]) -> None:
    job = release["jobs"]["image"]
    assert job["needs"] == "build"
    assert job["permissions"] == {"contents": "read", "packages": "write"}
    for action in ("docker/setup-qemu-action", "docker/setup-buildx-action"):
        uses(job, action)
    login = uses(job, "docker/login-action")["with"]
    assert login["registry"] == "ghcr.io"
    assert login["password"] == "${{ secrets.GITHUB_TOKEN }}"
    push = uses(job, "docker/build-push-action")["with"]
    assert push["platforms"].split(",") == ["linux/amd64", "linux/arm64"]
    assert push["push"] is True
    controller_image = yaml.safe_load(CONTROLLER.read_text())[
        "spec"]["template"]["spec"]["containers"][0]["image"]
    repository = controller_image.rsplit(":", 1)[0]
    assert release["env"]["IMAGE"] == repository == "ghcr.io/gitscale/gitscale"
    assert push["tags"] == "${{ env.IMAGE }}:${{ needs.build.outputs.version }}"
    args = dict(line.split("=", 1) for line in push["build-args"].splitlines())
    assert args["VERSION"] == "${{ needs.build.outputs.version }}"  # the image checks its wheel
    assert args["PYTHON_IMAGE"] == "${{ steps.base.outputs.image }}"
    assert {"REVISION", "SOURCE"} <= set(args)


def test_pypi_is_trusted_publishing_after_the_image(release: dict[str, Any]) -> None:
    job = release["jobs"]["pypi"]
    assert set(job["needs"]) == {"build", "image"}
    assert job["environment"] == "pypi"
    assert job["permissions"] == {"id-token": "write"}
    publish = uses(job, "pypa/gh-action-pypi-publish")
    assert "with" not in publish or "password" not in publish["with"]  # no token: OIDC
    download = uses(job, "actions/download-artifact")["with"]
    upload = uses(release["jobs"]["build"], "actions/upload-artifact")["with"]
    assert download["name"] == upload["name"] and download["path"] == upload["path"]
