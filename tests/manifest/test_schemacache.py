"""Compiled validators kept on disk: used when good, compiled again when not, never an error."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import fastjsonschema
import pytest
import yaml

from gitscale.manifest import schemacache as schemacache
from gitscale.manifest.crd_schemas import SchemaValidator
from tests.helpers import RUNNERSET

SCHEMA = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
          "required": ["spec"], "additionalProperties": False,
          "properties": {"spec": {"type": "object", "properties": {
              "replicas": {"type": "integer", "minimum": 0},
              "effectiveTime": {"type": "string", "format": "date-time"}}}}}
FORMATS = {"date-time": lambda value: value.endswith("Z")}
GOOD = {"spec": {"replicas": 3, "effectiveTime": "2026-11-21T09:00:00Z"}}
BAD = [{"spec": {"replicas": -1}}, {"spec": {"effectiveTime": "tomorrow"}}, {"specs": {}}]


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times fastjsonschema generated a validator's code."""
    calls: list[int] = []
    real = fastjsonschema.compile_to_code

    def counted(*args: Any, **kwargs: Any) -> str:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(fastjsonschema, "compile_to_code", counted)
    return calls


def _checks(tmp_path: Path) -> None:
    check = schemacache.validator(SCHEMA, FORMATS, tmp_path)
    assert check(GOOD) == GOOD
    for bad in BAD:
        with pytest.raises(fastjsonschema.JsonSchemaValueException):
            check(bad)


def _file(tmp_path: Path) -> Path:
    (found,) = tmp_path.glob("validator-*.marshal")
    return found


def test_compiled_once_then_loaded(tmp_path: Path, compiles: list[int]) -> None:
    _checks(tmp_path)
    _checks(tmp_path)
    _checks(tmp_path)
    assert len(compiles) == 1
    assert _file(tmp_path).stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("damage", ["truncated", "flipped", "garbage", "empty", "other-key"])
def test_a_damaged_or_stale_file_is_compiled_again(tmp_path: Path, compiles: list[int],
                                                   damage: str) -> None:
    _checks(tmp_path)
    path = _file(tmp_path)
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[:len(data) // 2])
    elif damage == "flipped":  # one bit of the code changed: the checksum says so
        middle = len(data) - 100
        path.write_bytes(data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1:])
    elif damage == "garbage":
        path.write_bytes(b"\x00\xffnot a validator\n" * 10)
    elif damage == "empty":
        path.write_bytes(b"")
    else:  # a file written for another schema, under this one's name
        other = dict(SCHEMA, minProperties=1)
        schemacache.validator(other, FORMATS, tmp_path / "other")
        path.write_bytes(_file(tmp_path / "other").read_bytes())
    _checks(tmp_path)
    assert len(compiles) == 2 + (damage == "other-key")
    assert path.read_bytes() == data  # rewritten whole
    _checks(tmp_path)
    assert len(compiles) == 2 + (damage == "other-key")


def test_a_directory_that_cannot_be_written_only_costs_a_compile(tmp_path: Path,
                                                                 compiles: list[int]) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache directory should be")
    _checks(blocked)
    _checks(blocked)
    _checks(tmp_path)  # no directory at all
    assert len(compiles) == 3


def test_old_files_are_removed(tmp_path: Path) -> None:
    for limit in range(schemacache.KEEP + 5):
        schemacache.validator(dict(SCHEMA, maxProperties=limit + 1), FORMATS, tmp_path)
    assert len(list(tmp_path.glob("validator-*.marshal"))) == schemacache.KEEP


def test_schema_validation_reads_the_cache_of_an_earlier_run(
        _isolated_cache: Path, compiles: list[int]) -> None:
    runner_set = yaml.safe_load(RUNNERSET.format(name="linux", replicas=2))
    broken = yaml.safe_load(RUNNERSET.format(name="linux", replicas=2).replace(
        "replicas: 2", "replica: 2"))
    import gitscale.manifest.crd_schemas as crd_schemas

    for run in range(2):  # two runs: the process memo forgotten in between
        crd_schemas._COMPILED.clear()
        schemas = SchemaValidator()
        assert schemas.check(runner_set) == []
        assert any("replica" in str(p) for p in schemas.check(broken))
    assert len(compiles) == 1
    assert len(list(_isolated_cache.glob("validator-*.marshal"))) == 1


CRD_TEXT = "spec:\n  group: example.com\n  names: {kind: Thing}\n  n: 1\n  f: 1.5\n  b: true\n"


def test_parsed_crd_kept_then_loaded_equal_with_its_types(tmp_path: Path) -> None:
    parses: list[int] = []

    def parse() -> dict[str, Any]:
        parses.append(1)
        data: dict[str, Any] = yaml.safe_load(CRD_TEXT)
        return data

    first = schemacache.parsed_crd(CRD_TEXT, parse, tmp_path)
    again = schemacache.parsed_crd(CRD_TEXT, parse, tmp_path)
    assert len(parses) == 1
    assert again == first == yaml.safe_load(CRD_TEXT)
    assert [type(v) for v in again["spec"].values()] == [str, dict, int, float, bool]
    assert list(again["spec"]) == ["group", "names", "n", "f", "b"]
    (kept,) = tmp_path.glob("crd-*.marshal")
    assert kept.stat().st_mode & 0o777 == 0o600
    # another text: parsed, and kept beside the first
    schemacache.parsed_crd(CRD_TEXT + "x: 2\n", parse, tmp_path)
    assert len(parses) == 2 and len(list(tmp_path.glob("crd-*.marshal"))) == 2


@pytest.mark.parametrize("damage", ["truncated", "flipped", "garbage", "empty"])
def test_a_damaged_parsed_crd_is_parsed_again(tmp_path: Path, damage: str) -> None:
    def parse() -> dict[str, Any]:
        data: dict[str, Any] = yaml.safe_load(CRD_TEXT)
        return data

    schemacache.parsed_crd(CRD_TEXT, parse, tmp_path)
    (kept,) = tmp_path.glob("crd-*.marshal")
    data = kept.read_bytes()
    kept.write_bytes({"truncated": data[:-7], "flipped": data[:-1] + bytes([data[-1] ^ 1]),
                      "garbage": b"\x00" * 40, "empty": b""}[damage])
    assert schemacache.parsed_crd(CRD_TEXT, parse, tmp_path) == yaml.safe_load(CRD_TEXT)
    assert schemacache.parsed_crd(CRD_TEXT, lambda: {}, tmp_path) == yaml.safe_load(CRD_TEXT)


def test_a_crd_marshal_cannot_hold_is_parsed_each_time(tmp_path: Path) -> None:
    text = "spec: {since: 2026-11-21}\n"
    dated: dict[str, Any] = yaml.safe_load(text)
    assert schemacache.parsed_crd(text, lambda: dated, tmp_path) == dated
    assert list(tmp_path.glob("crd-*.marshal")) == []
    assert schemacache.parsed_crd(text, lambda: {"again": 1}, None) == {"again": 1}


def test_the_shipped_crd_from_the_cache_is_the_file_read(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import resources

    from gitscale.manifest import crd_schemas

    monkeypatch.setenv("GITSCALE_CACHE_DIR", str(tmp_path))
    text = resources.files("gitscale.deploy.crds").joinpath(
        "runnersets.gitscale.dev.yaml").read_text(encoding="utf-8")
    expected = yaml.safe_load(text)
    assert crd_schemas.shipped_crd() == expected  # parsed, then kept
    assert len(list(tmp_path.glob("crd-*.marshal"))) == 1
    assert crd_schemas.shipped_crd() == expected  # loaded
