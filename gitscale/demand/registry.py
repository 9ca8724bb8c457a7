"""What a demand client factory is given. The sources themselves are a table:
``gitscale.config.sources.SOURCES`` (one entry per ``source: {KIND: ...}``: its schema, its
settings, the key of the sets one read serves, its client factory, whether it takes webhooks,
which files it reads). ``read_demand`` (``resolve.py``) does the rest the same way for every
source, including turning a source's failure into reading errors for its sets.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from gitscale.config.sources import SourceKind

if TYPE_CHECKING:
    from gitscale.demand import DemandSource
    from gitscale.config.load import Config
    from gitscale.demand.resolve import Sources


@dataclass(frozen=True)
class Where:
    """What a client factory may use: the checkout a pass reads (its config file's path, for
    errors) and the clients kept across passes."""

    root: Path
    config_path: str
    sources: Sources
    config: Config | None = None  # to name the config's line of a set whose source failed


def connect(kind: SourceKind, where: Where, settings: Any) -> DemandSource:
    """The client of ``kind`` for these settings: its factory, imported now."""
    module, _, name = kind.client.partition(":")
    factory: Callable[[Where, Any], DemandSource] = getattr(importlib.import_module(module), name)
    return factory(where, settings)
