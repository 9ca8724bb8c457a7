"""Fixtures for the controller tests: the harness (local API server, GitHub fake, controller),
the port of its health server (``/metrics``, ``/healthz``), and a bare local API server."""
from __future__ import annotations

from typing import Iterator

import pytest

from gitscale.controller.loop import serve_health
from tests.controller.harness import Harness, start
from tests.kubeapi.server import KubeAPIServer, start_api_server


@pytest.fixture
def harness() -> Iterator[Harness]:
    yield from start()


@pytest.fixture
def port(harness: Harness) -> Iterator[int]:
    server = serve_health(harness.controller, 0, host="127.0.0.1")
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()


@pytest.fixture
def api() -> Iterator[KubeAPIServer]:
    """A fresh local API server (empty store), stopped at teardown."""
    server = start_api_server()
    try:
        yield server
    finally:
        server.stop()
