"""Fake GitHub and Buildkite APIs on loopback, one per test, and the tokens they accept."""
from __future__ import annotations

from typing import Iterator

import pytest

from tests.demand.fake_buildkite import FakeBuildkite
from tests.demand.fake_github import FakeGitHub

GH_TOKEN = "ghp_S3cr3tT0kenValue0123456789abcdefABCD"
BK_TOKEN = "bkua_S3cr3tAgentToken0123456789"


@pytest.fixture
def github(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    monkeypatch.setenv("GH_TOKEN", GH_TOKEN)
    with FakeGitHub(token=GH_TOKEN) as fake:
        yield fake


@pytest.fixture
def buildkite(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeBuildkite]:
    monkeypatch.setenv("BK_TOKEN", BK_TOKEN)
    with FakeBuildkite(token=BK_TOKEN) as fake:
        yield fake
