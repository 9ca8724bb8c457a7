"""The parsed gitscale.yaml versions a pass may take instead of parsing the text again: by the
hash of their text, in memory and one file each beside the state cache (a run loads only the
one it uses); the newest ``CONFIGS`` kept."""
from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, Iterator, MutableMapping

from gitscale.config.load import Config
from gitscale.files import keep_newest, load_cache
from gitscale.plan.cache_format import STAMP, write

CONFIGS = 8  # parsed gitscale.yaml versions kept


class ConfigStore(MutableMapping[str, Config]):
    """Parsed configs by the hash of their text: in memory, and one file each on disk."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.memory: dict[str, Config] = {}
        self.new: set[str] = set()

    def _file(self, key: str) -> Path | None:
        return self.directory / f"config-{key[:32]}.pickle" if self.directory else None

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def __getitem__(self, key: str) -> Config:
        found: Config | None = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __setitem__(self, key: str, config: Config) -> None:
        self.memory[key] = config
        self.new.add(key)
        while len(self.memory) > CONFIGS:
            del self.memory[next(iter(self.memory))]

    def __delitem__(self, key: str) -> None:
        del self.memory[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.memory)

    def __len__(self) -> int:
        return len(self.memory)

    def get(self, key: str, default: Any = None) -> Any:
        if key in self.memory:
            return self.memory[key]
        data = load_cache(self._file(key))
        if data is None:
            return default
        try:
            stamp, stored_key, config = pickle.loads(data)
        except Exception:  # noqa: BLE001 - a broken cache is only a slower pass
            return default
        if stamp != STAMP or stored_key != key or not isinstance(config, Config):
            return default
        self.memory[key] = config
        return config

    def save(self) -> None:
        for key in sorted(self.new):
            path = self._file(key)
            if path is not None and key in self.memory:
                write(path, (STAMP, key, self.memory[key]))
        self.new.clear()
        if self.directory is not None and self.directory.is_dir():
            keep_newest(self.directory, "config-*.pickle", CONFIGS)
