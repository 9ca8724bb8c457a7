"""Every test gets its own gitscale cache directory: no test sees another's cache."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path_factory.mktemp("gitscale-cache")
    monkeypatch.setenv("GITSCALE_CACHE_DIR", str(directory))
    return directory
