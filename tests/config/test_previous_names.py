"""``previousNames`` in gitscale.yaml: read as written, and each way it cannot be one set's
past refused at its line."""
from __future__ import annotations

from pathlib import Path

import pytest

from gitscale.config.load import load_config
from gitscale.errors import ConfigError
from tests.helpers import RUNNERSET, write


def config(linux: str = "", gpu: str = "") -> str:
    return ("runnerSets:\n"
            "  - name: linux-x64\n"
            f"{linux}"
            "    manifest: sets/linux.yaml\n"
            "    source: {file: demand.yaml}\n"
            "    policy: default\n"
            "  - name: gpu\n"
            f"{gpu}"
            "    manifest: sets/gpu.yaml\n"
            "    source: {file: demand.yaml}\n"
            "    policy: default\n")


def checkout(tmp_path: Path, text: str) -> Path:
    write(tmp_path, {"gitscale.yaml": text,
                     "sets/linux.yaml": RUNNERSET.format(name="linux", replicas=1),
                     "sets/gpu.yaml": RUNNERSET.format(name="gpu", replicas=1)})
    return tmp_path


@pytest.mark.parametrize(("linux", "gpu", "expected"), [
    pytest.param("", "", ((), ()), id="none"),
    pytest.param("    previousNames: [linux]\n", "", (("linux",), ()), id="one"),
    pytest.param("    previousNames:\n      - linux-amd64\n      - linux\n",
                 "    previousNames: []\n", (("linux-amd64", "linux"), ()), id="two-in-order"),
    pytest.param("    previousNames: [linux]\n", "    previousNames: [cuda]\n",
                 (("linux",), ("cuda",)), id="each-set-its-own"),
])
def test_previous_names_are_read(tmp_path: Path, linux: str, gpu: str,
                                 expected: tuple[tuple[str, ...], tuple[str, ...]]) -> None:
    sets = load_config(checkout(tmp_path, config(linux, gpu))).sets
    assert (sets[0].previous_names, sets[1].previous_names) == expected
    assert sets[0].names == ("linux-x64", *expected[0])


@pytest.mark.parametrize(("linux", "gpu", "where", "words"), [
    pytest.param("    previousNames: [gpu]\n", "", "gitscale.yaml:3",
                 ["runner set 'linux-x64': previousNames: 'gpu' is the name of another set of "
                  "this file (line 7)", "remove it from previousNames, or rename that set"],
                 id="another-sets-name"),
    pytest.param("", "    previousNames: [linux-x64]\n", "gitscale.yaml:7",
                 ["runner set 'gpu': previousNames: 'linux-x64' is the name of another set "
                  "of this file (line 2)"], id="an-earlier-sets-name"),
    pytest.param("    previousNames:\n      - linux\n      - linux\n", "", "gitscale.yaml:5",
                 ["previousNames: 'linux' is listed twice (first at line 4)"],
                 id="listed-twice"),
    pytest.param("    previousNames: [linux-x64]\n", "", "gitscale.yaml:3",
                 ["previousNames: 'linux-x64' is the set's own name"], id="its-own-name"),
    pytest.param("    previousNames: [linux]\n", "    previousNames: [cuda, linux]\n",
                 "gitscale.yaml:8",
                 ["runner set 'gpu': previousNames: 'linux' is also a previous name of set "
                  "'linux-x64' (line 3)", "keep it on the set that took over its runners"],
                 id="two-sets-claim-one-name"),
    pytest.param("    previousNames: [linux, 7]\n", "", "gitscale.yaml:3",
                 ["runner set 'linux-x64' previousNames.1", "string"], id="not-a-string"),
    pytest.param("    previousNames: linux\n", "", "gitscale.yaml:3",
                 ["runner set 'linux-x64' previousNames", "array"], id="not-a-list"),
    pytest.param("    previousNames: [Linux_64]\n", "", "gitscale.yaml:3",
                 ["previousNames.0", "does not match"], id="not-a-set-name"),
])
def test_bad_previous_names_name_the_line(tmp_path: Path, linux: str, gpu: str, where: str,
                                          words: list[str]) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(checkout(tmp_path, config(linux, gpu)))
    said = str(raised.value)
    assert said.startswith(f"{where}: "), said
    for word in words:
        assert word in said, said


def test_valid_previous_names_compose_no_yaml_nodes(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Line numbers are for errors: composing the node tree of a 50,000-set gitscale.yaml
    for them made one ``previousNames`` cost 10 s more on each read of a changed config."""
    import yaml

    def composed(*args: object, **kwargs: object) -> None:
        raise AssertionError("a valid config's YAML nodes were composed")

    root = checkout(tmp_path, config("    previousNames: [linux, amd64]\n",
                                     "    previousNames: [cuda]\n"))
    monkeypatch.setattr(yaml, "compose_all", composed)
    assert [s.names for s in load_config(root).sets] == [("linux-x64", "linux", "amd64"),
                                                        ("gpu", "cuda")]
