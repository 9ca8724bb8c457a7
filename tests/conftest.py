"""Every test gets its own gitscale cache directory: no test sees another's cache; and starts
with no secret held for masking (gitscale.redact's registry lives as long as the process)."""
from __future__ import annotations

from pathlib import Path

import pytest

from gitscale.redact import forget_held


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path_factory.mktemp("gitscale-cache")
    monkeypatch.setenv("GITSCALE_CACHE_DIR", str(directory))
    return directory


@pytest.fixture(autouse=True)
def _no_secret_held() -> None:
    forget_held()
