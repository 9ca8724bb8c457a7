"""Fake GitHub and Buildkite APIs on loopback, one per test, and the tokens they accept; a
fake GitHub that exchanges a GitHub App's JWT for installation tokens."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.demand.fake_buildkite import FakeBuildkite
from tests.demand.fake_github import FakeGitHub

# (not in a shape redact masks by itself: these test that a secret read is masked)
GH_TOKEN = "tok_S3cr3tT0kenValue0123456789abcdefABCD"
BK_TOKEN = "bkua_S3cr3tAgentToken0123456789"
# a token before and after a rotation (tests/demand/test_rotation.py, test_env_file.py); as
# long as each other: a file's size does not tell them apart
OLD = "tok_OldT0kenValue0123456789abcdefABCDEF"
NEW = "tok_NewT0kenValue0123456789abcdefABCDEF"


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


def app_key(tmp_path: Path) -> tuple[Path, bytes]:
    """A new RSA key for a GitHub App: the private key's PEM file, and the public key."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    path = tmp_path / "app.pem"
    path.write_bytes(pem)
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return path, public


@pytest.fixture
def app_github(tmp_path: Path) -> Iterator[FakeGitHub]:
    """GitHub with App 4242 installed as 77; ``key_path`` is the app's private key file."""
    path, public = app_key(tmp_path)
    with FakeGitHub(token=None, app={"id": 4242, "installation": 77, "public_key": public}) as gh:
        gh.key_path = path  # type: ignore[attr-defined]
        yield gh


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    """A GitHub that takes ``OLD`` (a test rotates it), with one job queued for linux."""
    fake = FakeGitHub(token=OLD)
    with fake:
        repo = fake.add_repo("acme", "app")
        fake.add_run(repo, "queued", [("queued", ["self-hosted", "linux"])])
        yield fake
