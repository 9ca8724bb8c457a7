"""The demand source registry: typed settings with their defaults applied once, one read per
group of sets, and a source's failure turned into its sets' reading errors in one place."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import pytest
import yaml

from gitscale.files import default_cache_dir
from gitscale.config.load import RunnerSetConfig, load_config
from gitscale.demand import DemandReading, RateLimited, SourceError
from gitscale.config.sources import SOURCES, SourceKind
from gitscale.demand.registry import Where
from gitscale.demand.resolve import Sources, read_demand
from gitscale.config.secrets import SecretRef
from gitscale.config.sources import (
    BUILDKITE_API,
    GITHUB_API,
    BuildkiteSettings,
    FileSettings,
    GitHubSettings,
)
from gitscale.config.schemas import SOURCE
from gitscale.timeutil import parse_time

from tests.demand.fake_buildkite import FakeBuildkite, metrics
from tests.demand.fake_github import FakeGitHub


def test_every_source_in_the_schema_has_one_registry_entry() -> None:
    assert set(SOURCE["properties"]) == set(SOURCES)
    assert all(kind.name == name for name, kind in SOURCES.items())


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_each_client_factory_named_in_the_registry_exists(name: str) -> None:
    import importlib

    module, _, function = SOURCES[name].client.partition(":")
    assert callable(getattr(importlib.import_module(module), function))


def write_config(root: Path, sources: dict[str, Any]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    doc = {"runnerSets": [
        {"name": name, "manifest": f"sets/{name}.yaml", "source": source,
         "policy": {"minReplicas": 0, "maxReplicas": 50}} for name, source in sources.items()]}
    (root / "gitscale.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def test_settings_are_frozen_dataclasses_with_the_defaults_applied(tmp_path: Path) -> None:
    write_config(tmp_path, {
        "f": {"file": "demand.yaml"},
        "g": {"github": {"org": "acme", "labels": ["linux"]}},
        "a": {"github": {"repos": ["acme/b", "acme/a"], "labels": ["x"], "apiUrl": "http://h/",
                         "app": {"appId": 1, "installationId": 2,
                                 "privateKey": {"file": "k.pem"}}}},
        "b": {"buildkite": {"queue": "q"}},
    })
    sets = {s.name: s.source.settings for s in load_config(tmp_path).sets}
    assert sets["f"] == FileSettings("demand.yaml")
    assert sets["g"] == GitHubSettings(("linux",), org="acme", api_url=GITHUB_API,
                                       token=SecretRef("env", "GITHUB_TOKEN"))
    assert (sets["a"].api_url, sets["a"].token, sets["a"].app.private_key, sets["a"].scope) == (
        "http://h", None, SecretRef("file", "k.pem"), "repos:acme/a,acme/b")
    assert sets["b"] == BuildkiteSettings("q", BUILDKITE_API,
                                          SecretRef("env", "BUILDKITE_AGENT_TOKEN"), False)
    with pytest.raises(AttributeError):
        sets["b"].queue = "other"  # type: ignore[misc]


def test_sets_on_one_queue_share_one_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    monkeypatch.setenv("BK_TOKEN", "bk")
    with FakeBuildkite(token="bk") as fake:
        fake.queues["deploy"] = metrics("TestCollectorWithSomeJobsAndAgentsForAQueue")
        common = {"queue": "deploy", "apiUrl": fake.url, "token": {"env": "BK_TOKEN"}}
        write_config(tmp_path, {"small": {"buildkite": common},
                                "large": {"buildkite": {**common, "countWaiting": True}}})
        reading = read_demand(tmp_path, load_config(tmp_path), None,
                              Sources(default_cache_dir(), timeout=5))
        assert len(fake.log) == 1
    assert {n: (d.queued, d.running) for n, d in reading.demands.items()} == {
        "small": (3, 1), "large": (3, 1)}


def test_two_scopes_of_one_credential_share_one_client(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """One ETag cache file and one token per API and credential, however many scopes."""
    monkeypatch.setenv("GH_TOKEN", "ghp_x")
    with FakeGitHub(token="ghp_x") as fake:
        fake.add_repo("acme", "a")
        fake.add_repo("other", "b")
        base = {"labels": ["linux"], "apiUrl": fake.url, "token": {"env": "GH_TOKEN"}}
        write_config(tmp_path, {"a": {"github": {**base, "org": "acme"}},
                                "b": {"github": {**base, "org": "other"}}})
        sources = Sources(default_cache_dir(), timeout=5)
        reading = read_demand(tmp_path, load_config(tmp_path), None, sources)
    assert reading.errors == {} and set(reading.demands) == {"a", "b"}
    assert list(sources.clients) == [("github", fake.url, "env=GH_TOKEN")]


# -- a new source is one registry line -----------------------------------------------------------
class Toy:
    """A source whose answers the test chooses: a reading, or an exception."""

    answer: DemandReading | Exception = DemandReading()
    reads: list[list[str]] = []

    def __init__(self, where: Where, settings: FileSettings) -> None:
        self.settings = settings

    def read(self, sets: Sequence[RunnerSetConfig]) -> DemandReading:
        Toy.reads.append([s.name for s in sets])
        if isinstance(Toy.answer, Exception):
            raise Toy.answer
        return Toy.answer


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> type[Toy]:
    monkeypatch.setitem(SOURCES, "file", SourceKind(  # type: ignore[index]
        "file", SOURCES["file"].schema, FileSettings.parse, FileSettings.group, f"{__name__}:Toy"))
    Toy.reads = []
    return Toy


@pytest.mark.parametrize(
    ("failure", "retry_at"),
    [
        pytest.param(SourceError("toy: GET http://toy answered 500"), None, id="source"),
        pytest.param(RateLimited("toy: rate limited", parse_time("2030-01-01T00:00:00Z")),
                     parse_time("2030-01-01T00:00:00Z"), id="rate-limited"),
    ],
)
def test_a_source_that_cannot_be_read_is_an_error_for_each_of_its_sets(
        toy: type[Toy], failure: Exception, retry_at: Any, tmp_path: Path) -> None:
    write_config(tmp_path, {"a": {"file": "one.yaml"}, "b": {"file": "one.yaml"},
                            "c": {"file": "two.yaml"}})
    toy.answer = failure
    reading = read_demand(tmp_path, load_config(tmp_path), None, Sources(None))
    assert toy.reads == [["a", "b"], ["c"]]  # one read per group
    assert reading.errors == {"a": str(failure), "b": str(failure), "c": str(failure)}
    assert reading.demands == {} and reading.retry_at == retry_at


def test_a_bug_in_a_source_is_not_taken_for_a_reading_error(toy: type[Toy],
                                                            tmp_path: Path) -> None:
    write_config(tmp_path, {"a": {"file": "one.yaml"}})
    toy.answer = KeyError("oops")
    with pytest.raises(KeyError):
        read_demand(tmp_path, load_config(tmp_path), None, Sources(None))
