"""Built once per session and shared by the tests of this folder: the sdist and wheel as the
release builds them, and a venv made the way the Dockerfile makes the image's."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from tests.ship.shipfiles import PRUNED, ROOT, checkout_files, dockerignore, in_context

TIMINGS: dict[str, float] = {}  # fixture → seconds, printed at the end of the session


def sh(*argv: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None,
       timeout: float = 300) -> str:
    """Run a command; its output, or an AssertionError that shows it."""
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv))} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
    return proc.stdout


def copy_files(files: list[str], dest: Path, root: Path = ROOT) -> None:
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, target)


@dataclass(frozen=True)
class Dist:
    sdist: Path
    wheel: Path


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """`python -m build` as release.yml runs it: the sdist, then the wheel built from the sdist
    (so a file missing from the sdist breaks the wheel too). It builds a copy of the checkout
    (tracked and new files), so the checkout itself gets no build/ or egg-info."""
    started = time.monotonic()
    base = tmp_path_factory.mktemp("dist")
    copy_files(checkout_files(), base / "src")
    sh(sys.executable, "-m", "build", "--outdir", base / "out", base / "src", timeout=600)
    (sdist,) = (base / "out").glob("*.tar.gz")
    (wheel,) = (base / "out").glob("*.whl")
    TIMINGS["dist: python -m build (sdist, then the wheel from it)"] = time.monotonic() - started
    return Dist(sdist, wheel)


@dataclass(frozen=True)
class ImageVenv:
    root: Path  # readable by every user (the non-root test runs the venv as uid 65532)
    venv: Path
    wheel: Path  # built from the Docker build context, as the Dockerfile's build stage does

    def bin(self, name: str) -> Path:
        return self.venv / "bin" / name


@pytest.fixture(scope="session")
def image_venv() -> Iterator[ImageVenv]:
    """The Dockerfile's build stage, step by step, without Docker: the build context is the
    checkout less .dockerignore; the build backend comes from requirements/build.txt and the
    runtime dependencies from requirements/image.txt (both `--require-hashes --no-deps`) into a
    venv without pip; the wheel is built with `--no-build-isolation` and installed `--no-deps`;
    `pip check`. pip's cache serves the downloads after the first run."""
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="ship-venv-"))
    root.chmod(0o755)
    try:
        context = root / "context"
        rules = dockerignore((ROOT / ".dockerignore").read_text())
        copy_files([f for f in checkout_files() if in_context(f, rules)], context)
        env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        builder = root / "builder"
        sh(sys.executable, "-m", "venv", builder)
        pip = [builder / "bin" / "python", "-m", "pip"]
        sh(*pip, "install", "--require-hashes", "--no-deps", "-r",
           context / "requirements" / "build.txt", env=env)
        venv = root / "gitscale"
        sh(sys.executable, "-m", "venv", "--without-pip", venv)
        target = [*pip, "--python", venv / "bin" / "python"]
        # Byte-compiled after the pruning, not before it: the venv ends as the image's (every
        # module kept has its .pyc, the pruned ones are gone), without compiling the 41 MB
        # pruned first (pip's compiling was 14 s of the fixture's 37)
        sh(*target, "install", "--no-compile", "--require-hashes", "--no-deps", "-r",
           context / "requirements" / "image.txt", env=env)
        site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / \
            "site-packages"
        for part in PRUNED:  # as the Dockerfile removes them
            assert (site / part).is_dir(), f"{part} is not in the venv: change PRUNED"
            shutil.rmtree(site / part)
        sh(venv / "bin" / "python", "-m", "compileall", "-q", site)
        sh(*pip, "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", root / "wheels",
           context, env=env)
        (wheel,) = (root / "wheels").glob("gitscale-*.whl")
        sh(*target, "install", "--no-deps", wheel, env=env)
        sh(*target, "check", env=env)
        TIMINGS["image_venv: the Dockerfile's build stage in a fresh venv"] = \
            time.monotonic() - started
        yield ImageVenv(root, venv, wheel)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for what, seconds in TIMINGS.items():
        terminalreporter.write_line(f"tests/ship: {what}: {seconds:.1f} s")
