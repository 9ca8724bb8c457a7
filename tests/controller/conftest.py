"""Fixtures for the controller tests: the harness (local API server, GitHub fake, controller)."""
from __future__ import annotations

from typing import Iterator

import pytest

from tests.controller.harness import Harness, start


@pytest.fixture
def harness() -> Iterator[Harness]:
    yield from start()
