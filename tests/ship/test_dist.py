"""The sdist and wheel the release publishes (conftest.dist: `python -m build` on a copy of the
checkout): `twine check --strict` passes, both carry gitscale.__version__, and the wheel holds
every module and data file of the checkout — derived from the checkout, not from a module list,
so a package left out of pyproject.toml's packages fails here."""
from __future__ import annotations

import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

from gitscale import __version__
from tests.ship.conftest import Dist, sh
from tests.ship.shipfiles import ROOT, canonical, checkout_files, runtime_pins


def test_twine_check_strict_passes(dist: Dist) -> None:
    out = sh(sys.executable, "-m", "twine", "check", "--strict", dist.sdist, dist.wheel)
    assert out.count("PASSED") == 2, out


def test_the_file_names_carry_the_version(dist: Dist) -> None:
    assert dist.sdist.name == f"gitscale-{__version__}.tar.gz"
    assert dist.wheel.name == f"gitscale-{__version__}-py3-none-any.whl"


def wheel_names(dist: Dist) -> set[str]:
    with zipfile.ZipFile(dist.wheel) as wheel:
        return set(wheel.namelist())


def test_the_wheel_holds_every_module_of_the_checkout(dist: Dist) -> None:
    names = wheel_names(dist)
    modules = [f for f in checkout_files() if f.startswith("gitscale/") and f.endswith(".py")]
    assert len(modules) > 50
    missing = [m for m in modules if m not in names]
    assert not missing, f"not in the wheel: {missing}"


def test_the_wheel_holds_the_crds_the_presets_and_the_shipped_manifests(dist: Dist) -> None:
    names = wheel_names(dist)
    files = checkout_files()
    expected = {"gitscale/deploy/crds/runnersets.gitscale.dev.yaml"}
    # policies/ is the package gitscale.presets; deploy/ is gitscale.deploy
    expected |= {f"gitscale/presets/{Path(f).name}" for f in files
                 if f.startswith("policies/") and f.endswith(".yaml")}
    expected |= {f"gitscale/{f}" for f in files if f.startswith("deploy/") and
                 f.endswith(".yaml")}
    expected |= {f for f in files if f.startswith("gitscale/data/") and f.endswith(".yaml")}
    assert {"gitscale/presets/default.yaml", "gitscale/deploy/controller/deployment.yaml"} \
        <= expected
    missing = sorted(expected - names)
    assert not missing, f"not in the wheel: {missing}"


def test_the_wheel_metadata(dist: Dist) -> None:
    with zipfile.ZipFile(dist.wheel) as wheel:
        info = f"gitscale-{__version__}.dist-info"
        meta = Parser().parsestr(wheel.read(f"{info}/METADATA").decode())
        entry_points = wheel.read(f"{info}/entry_points.txt").decode()
    assert meta["Name"] == "gitscale" and meta["Version"] == __version__
    assert meta["Requires-Python"] == ">=3.11"
    requires = {canonical(r.split("==")[0]): r.split("==")[1]
                for r in meta.get_all("Requires-Dist") if "extra ==" not in r}
    assert requires == runtime_pins()
    assert "[console_scripts]\ngitscale = " in entry_points
    assert meta.get_payload().startswith("# gitscale")  # the README is the long description


def test_the_sdist_holds_what_the_wheel_is_built_from(dist: Dist) -> None:
    with tarfile.open(dist.sdist) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    for required in ("pyproject.toml", "README.md", "gitscale/__init__.py",
                     "deploy/crds/runnersets.gitscale.dev.yaml", "policies/default.yaml"):
        assert required in names, required
    assert (ROOT / "pyproject.toml").is_file()
