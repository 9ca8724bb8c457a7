"""The fake GitHub and Buildkite of tests/demand (one per test), for the clients' own tests."""
from __future__ import annotations

from tests.demand.conftest import buildkite, github

__all__ = ["buildkite", "github"]
