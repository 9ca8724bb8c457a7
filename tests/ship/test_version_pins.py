"""Every image reference (`ghcr.io/gitscale/gitscale:<tag>`) and pip pin (`gitscale==<v>`) that
gitscale ships or writes names gitscale.__version__: the manifests in deploy/, the presets and
data, the README, string constants in the package, and every file `gitscale init` writes."""
from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path
from typing import Any, Iterator

import pytest

import gitscale
from gitscale import __version__
from tests.helpers import run
from tests.ship.shipfiles import ROOT, checkout_files

IMAGE = "ghcr.io/gitscale/gitscale"
_IMAGE_REF = re.compile(re.escape(IMAGE) + r"(?P<rest>:\{\w+\}|[^\s\"'`,;)\]}]*)")
_PIP_PIN = re.compile(r"\bgitscale\s*(?P<op>===?|~=|>=|<=|!=)\s*(?P<value>[^\s\"'`;,\]]+)")
_VERSION_VAR = re.compile(r"^\$\{?\{?(?P<name>\w+)\}?\}?$")  # $V, ${V}, ${{V}} (str.format)
_KUSTOMIZE_IMAGE = re.compile(r"\s*-?\s*name:\s*" + re.escape(IMAGE) + r"\s*$", re.M)
_TEMPLATE = {"{version}", "{__version__}"}  # str.format / f-string slots filled from __version__


def problems(text: str, version: str, *, template: bool = False) -> list[str]:
    """What in ``text`` names another version than ``version``. A pin through a variable
    (`gitscale==$GITSCALE_VERSION`) needs that variable set to ``version`` in the same text;
    ``template``: Python source, whose `{version}` / `{__version__}` slots are filled in."""
    found = []
    allowed = {version} | (_TEMPLATE if template else set())
    for match in _IMAGE_REF.finditer(text):
        rest = match.group("rest")
        if not rest and _KUSTOMIZE_IMAGE.match(text, text.rfind("\n", 0, match.start()) + 1):
            continue  # a kustomization's `images: - name:`, which names the image untagged
        if not rest.startswith(":") or rest[1:] not in allowed:
            found.append(f"{match.group(0)}: not {IMAGE}:{version}")
    for match in _PIP_PIN.finditer(text):
        op, value = match.group("op"), match.group("value")
        if op != "==":
            found.append(f"{match.group(0)}: not pinned with ==")
            continue
        variable = _VERSION_VAR.match(value)
        if variable is None:
            if value not in allowed:
                found.append(f"{match.group(0)}: not gitscale=={version}")
            continue
        name = variable.group("name")
        values = re.findall(rf"\b{name}\b[\"']?\s*[:=]\s*[\"']?([^\s\"']+)", text)
        if not values:
            found.append(f"{match.group(0)}: {name} is set nowhere in the file")
        found += [f"{name}={v}: not {version}" for v in values if v not in allowed]
    return found


def mentions(text: str) -> int:
    return len(_IMAGE_REF.findall(text)) + len(_PIP_PIN.findall(text))


@pytest.mark.parametrize("text, bad", [
    (f"image: {IMAGE}:{__version__}\n", 0),
    (f"image: {IMAGE}:0.0.9\n", 1),
    (f"image: {IMAGE}:latest\n", 1),
    (f"image: {IMAGE}\n", 1),
    (f"images:\n  - name: {IMAGE}\n    newTag: mine\n", 0),  # kustomize names it untagged
    (f"see {IMAGE} for the tags\n", 1),
    (f"image: {IMAGE}@sha256:{'a' * 64}\n", 1),
    (f'pip install "gitscale=={__version__}"\n', 0),
    ('pip install "gitscale==0.0.9"\n', 1),
    ('pip install "gitscale>=0.1"\n', 1),
    (f'GITSCALE_VERSION: "{__version__}"\nrun: pip install "gitscale==${{GITSCALE_VERSION}}"\n',
     0),
    ('GITSCALE_VERSION: "0.0.9"\nrun: pip install "gitscale==$GITSCALE_VERSION"\n', 1),
    ('run: pip install "gitscale==$GITSCALE_VERSION"\n', 1),
])
def test_the_check_itself(text: str, bad: int) -> None:
    assert len(problems(text, __version__)) == bad, problems(text, __version__)


def shipped_files() -> Iterator[str]:
    """Files gitscale ships or installs: the package (with its data), the manifests, the
    presets, and the README (the package's long description)."""
    for rel in checkout_files():
        if rel == "README.md" or rel.startswith(("gitscale/", "deploy/", "policies/")):
            yield rel


def test_every_shipped_file_names_this_version() -> None:
    seen = {}
    for rel in shipped_files():
        text = (ROOT / rel).read_text(encoding="utf-8", errors="replace")
        assert problems(text, __version__, template=rel.endswith(".py")) == [], rel
        seen[rel] = mentions(text)
    assert seen["deploy/controller/deployment.yaml"] >= 1  # the check reads what it must
    assert sum(n for rel, n in seen.items() if rel.endswith(".py")) >= 2  # init's templates


def constants(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from constants(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from constants(item)


def test_every_string_constant_of_the_package_names_this_version() -> None:
    """Module-level strings as the code sees them (f-strings evaluated), wherever the modules
    live: the package is walked, not listed."""
    found = 0
    for module in pkgutil.walk_packages(gitscale.__path__, "gitscale."):
        if module.name.endswith("__main__"):
            continue
        for value in vars(importlib.import_module(module.name)).values():
            for text in constants(value):
                assert problems(text, __version__, template=True) == [], (module.name, text)
                found += mentions(text)
    assert found >= 1  # the scaler manifests' image, at least


@pytest.mark.parametrize("gitops", ["argocd", "flux"])
def test_every_file_init_writes_names_this_version(  # type: ignore[no-untyped-def]
        tmp_path: Path, capsys, gitops: str) -> None:
    found = 0
    for run_in in ("github-actions", "gitlab", "cluster"):  # each writes its own scheduler
        root = tmp_path / run_in
        code, _, err = run(capsys, "init", str(root), "--gitops", gitops, "--run-in", run_in,
                           "--repo-url", "https://git.example.com/ci/config.git")
        assert code == 0, err
        written = [p for p in root.rglob("*") if p.is_file() and ".git" not in
                   p.relative_to(root).parts[:1]]
        assert len(written) > 10
        for path in written:
            text = path.read_text(encoding="utf-8")
            assert problems(text, __version__) == [], path.relative_to(root)
            found += mentions(text)
    # the controller, the CronJob, `run` and `serve` images; the GitHub and GitLab pins
    assert found >= 6
