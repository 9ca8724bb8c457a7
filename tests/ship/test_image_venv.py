"""The image's entrypoint command works from a venv made as the Dockerfile makes the image's
(conftest.image_venv: the hash-checked locks, the wheel from the build context, pip check), and
as the image's non-root user with nothing writable but /tmp and the state cache, as under
readOnlyRootFilesystem, in every run of the suite. The image itself, built and run by Docker, is
test_image_docker.py (opt-in: README, "Releasing and the image")."""
from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from gitscale import __version__
from tests.ship.conftest import Dist, ImageVenv, sh
from tests.ship.shipfiles import PRUNED

UID = 65532  # the Dockerfile's USER (test_dockerfile.py holds them equal)


def test_version_and_help_work_from_the_venv(image_venv: ImageVenv) -> None:
    gitscale = image_venv.bin("gitscale")
    assert sh(gitscale, "--version").strip() == f"gitscale, version {__version__}"
    usage = sh(gitscale, "--help")
    for command in ("controller", "run", "serve", "reconcile"):  # what the image runs
        assert command in usage
        assert "Usage: gitscale " + command in sh(gitscale, command, "--help")


def test_every_module_imports_from_the_pruned_venv(image_venv: ImageVenv) -> None:
    """Every gitscale module imports in the venv the Dockerfile prunes (PRUNED gone), and none
    of them imports what was pruned."""
    script = ("import importlib, pkgutil, sys, gitscale\n"
              "names = [m.name for m in pkgutil.walk_packages(gitscale.__path__, 'gitscale.')\n"
              "         if not m.name.endswith('.__main__')  # (it runs the CLI)\n"
              "         and m.name not in ('gitscale.charts.axis', 'gitscale.charts.render')]\n"
              "for name in names:\n"
              "    importlib.import_module(name)\n"
              "pruned = sorted(m for m in sys.modules if m.startswith(%r))\n"
              "print(len(names), pruned)\n" % tuple(p.replace("/", ".") for p in PRUNED))
    # (from the venv's folder: not from the checkout, as the current directory would be; the
    # charts' matplotlib modules need the `charts` extra, which the image has not)
    count, pruned = sh(image_venv.bin("python"), "-c", script, cwd=image_venv.root).split(" ", 1)
    assert int(count) > 150 and pruned.strip() == "[]"
    site = next((image_venv.venv / "lib").glob("python3.*/site-packages"))
    assert all(not (site / part).exists() for part in PRUNED)


def test_the_controller_imports_the_kubernetes_client_from_the_lock(
        image_venv: ImageVenv, tmp_path: Path) -> None:
    proc = subprocess.run([image_venv.bin("gitscale"), "controller", "--kubeconfig",
                           str(tmp_path / "missing")], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "KUBERNETES_SERVICE_HOST": ""})
    assert proc.returncode == 1, proc.stderr
    assert "no usable Kubernetes configuration" in proc.stderr


def test_the_wheel_from_the_build_context_is_the_released_wheel(
        image_venv: ImageVenv, dist: Dist) -> None:
    """.dockerignore leaves out nothing the package needs: the wheel built from the Docker
    build context holds the same files as the one release.yml publishes."""
    assert image_venv.wheel.name == dist.wheel.name
    with zipfile.ZipFile(image_venv.wheel) as a, zipfile.ZipFile(dist.wheel) as b:
        assert sorted(a.namelist()) == sorted(b.namelist())


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to run as the image's user")
def test_as_the_image_user_with_only_tmp_and_the_cache_writable(
        image_venv: ImageVenv) -> None:
    """What the CronJob runs — `reconcile --repo URL`: a clone in /tmp, commit, push — as uid
    65532 with HOME read-only, TMPDIR and GITSCALE_CACHE_DIR the only writable places."""
    base = image_venv.root / "ro"
    home, tmp, cache = base / "home", base / "tmp", base / "cache"
    for path in (home, tmp, cache):
        path.mkdir(parents=True)
    home.chmod(0o555)  # root's: the image user cannot write there
    for path in (tmp, cache):
        os.chown(path, UID, UID)
    env = {"PATH": f"{image_venv.venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
           "HOME": str(home), "TMPDIR": str(tmp), "GITSCALE_CACHE_DIR": str(cache),
           "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8",
           "GITSCALE_GIT_TOKEN": "unused"}  # git's askpass script goes to TMPDIR too
    as_user = ["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups", "--"]
    sh(*as_user, "gitscale", "demo", "--dir", tmp / "demo", env=env)
    remote = tmp / "demo" / "remote.git"
    demand = tmp / "demand.yaml"
    demand.write_text("linux-x64: {queued: 9, running: 0}\ngpu: {queued: 1, running: 0}\n")
    out = sh(*as_user, "gitscale", "reconcile", "--repo", remote, "--demand", demand, env=env)
    assert f"pushed to {remote}" in out, out
    history = sh(*as_user, "gitscale", "history", "--repo", remote, env=env)
    assert history.count("linux-x64") >= 2, history  # the demo's commit and this one
    assert list(home.iterdir()) == []
    assert (cache / "manifest-state.marshal").is_file()  # the state cache, where the image keeps it
    assert not [p.name for p in tmp.iterdir() if p.name.startswith("gitscale-")]  # no clone left


def test_init_and_validate_read_the_package_data_of_the_installed_wheel(
        image_venv: ImageVenv, tmp_path: Path) -> None:
    """`init` copies the controller's manifests and the CRD; `validate` reads the CRD and the
    policy presets: all from the wheel's package data (the venv has no checkout to fall back on)."""
    gitscale = image_venv.bin("gitscale")
    env = {**os.environ, "GITSCALE_CACHE_DIR": str(tmp_path / "cache")}
    root = tmp_path / "config"
    # --run-in cluster: from CI, notify's URL would be a CHANGE-ME (the engine's public one)
    sh(gitscale, "init", root, "--gitops", "flux", "--github-org", "acme", "--repo-url",
       "https://git.example.com/ci/config.git", "--run-in", "cluster", cwd=tmp_path, env=env)
    written = "\n".join(p.read_text() for p in root.rglob("*.yaml") if ".git" not in p.parts)
    assert "kind: CustomResourceDefinition" in written  # the CRD (gitscale.deploy.crds)
    assert "name: gitscale-controller" in written  # the controller (gitscale.deploy.controller)
    assert "0 problems" in sh(gitscale, "validate", "--repo", root, env=env)
