"""pytest fixtures for the fake API server. Other test folders import them into their conftest::

    from tests.kubeapi.fixtures import kube_api, kube_client  # noqa: F401
"""
from __future__ import annotations

from typing import Iterator

import kubernetes.client
import pytest

from tests.kubeapi.server import KubeAPIServer, api_client, start_api_server


@pytest.fixture
def kube_api() -> Iterator[KubeAPIServer]:
    """A fresh server per test (empty store, zero counters), stopped at teardown."""
    server = start_api_server()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kube_client(kube_api: KubeAPIServer) -> Iterator[kubernetes.client.ApiClient]:
    client = api_client(kube_api.url)
    try:
        yield client
    finally:
        client.close()
