"""The demand source registry: ``source: {KIND: ...}`` in gitscale.yaml → how a pass reads it.

One line per source: its settings (a frozen dataclass from ``settings.py``), the key of the sets
one read serves, and its client factory ``(where, settings) → DemandSource``, named here and
imported only when a set uses the source (the HTTP sources load httpx and PyJWT).
``read_demand`` (``resolve.py``) does the rest the same way for every source, including turning
a source's failure into reading errors for its sets.
"""
from __future__ import annotations

import importlib
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from gitscale.demand.settings import BuildkiteSettings, FileSettings, GitHubSettings

if TYPE_CHECKING:
    from gitscale.demand import DemandSource
    from gitscale.config import Config
    from gitscale.demand.resolve import Sources


@dataclass(frozen=True)
class Where:
    """What a client factory may use: the checkout a pass reads (its config file's path, for
    errors) and the clients kept across passes."""

    root: Path
    config_path: str
    sources: Sources
    config: Config | None = None  # to name the config's line of a set whose source failed


@dataclass(frozen=True)
class SourceKind:
    name: str
    settings: Callable[[Any], Any]  # the schema-valid mapping → the source's frozen dataclass
    group: Callable[[Any], Hashable]  # sets whose settings give one key are read together
    client: str  # "module:function", (Where, settings) → DemandSource

    def connect(self, where: Where, settings: Any) -> DemandSource:
        module, _, name = self.client.partition(":")
        factory: Callable[[Where, Any], DemandSource] = getattr(
            importlib.import_module(module), name)
        return factory(where, settings)


SOURCES: Mapping[str, SourceKind] = {kind.name: kind for kind in (
    SourceKind("file", FileSettings.parse, FileSettings.group, "gitscale.demand.file:source"),
    SourceKind("github", GitHubSettings.parse, GitHubSettings.group,
               "gitscale.demand.github:source"),
    SourceKind("buildkite", BuildkiteSettings.parse, BuildkiteSettings.group,
               "gitscale.demand.buildkite:source"),
)}
