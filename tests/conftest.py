"""Every test gets its own gitscale cache directory: no test sees another's cache; and starts
with no secret held for masking (gitscale.redact's registry lives as long as the process).
``black_hole``: a port that never answers, for the tests of what waits on a network."""
from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Iterator

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


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A TCP port on 127.0.0.1 that accepts every connection and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()
    for conn in held:
        conn.close()
