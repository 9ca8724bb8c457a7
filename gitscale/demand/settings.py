"""Each demand source's settings: ``source: {KIND: ...}`` in gitscale.yaml, as a frozen dataclass.

The mapping has passed the source's JSON Schema (``schemas.py``) when ``parse`` sees it;
defaults are applied here, once. ``group`` is the key of the sets one read serves: sets whose
settings give the same key share a client and a request.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gitscale.demand.secrets import SecretRef, identity

GITHUB_API = "https://api.github.com"
GITHUB_TOKEN = SecretRef("env", "GITHUB_TOKEN")  # without an app or a token
BUILDKITE_API = "https://agent.buildkite.com/v3"
BUILDKITE_TOKEN = SecretRef("env", "BUILDKITE_AGENT_TOKEN")


def _api(raw: dict[str, Any], default: str) -> str:
    return str(raw.get("apiUrl", default)).rstrip("/")


@dataclass(frozen=True)
class FileSettings:
    """``source: {file: PATH}``: a demand file in the config repo."""

    path: str

    @classmethod
    def parse(cls, raw: Any) -> FileSettings:
        return cls(str(raw))

    def group(self) -> tuple[str, ...]:
        return ("file", self.path)


@dataclass(frozen=True)
class GitHubApp:
    app_id: str
    installation_id: str
    private_key: SecretRef


@dataclass(frozen=True)
class GitHubSettings:
    """``source: {github: ...}``: REST polling of an org's or a list of repos' workflow jobs."""

    labels: tuple[str, ...]
    org: str | None = None  # one of org and repos
    repos: tuple[str, ...] = ()
    api_url: str = GITHUB_API
    token: SecretRef | None = GITHUB_TOKEN  # None with an app
    app: GitHubApp | None = None
    concurrency: int = 8  # requests in flight at once
    credential: str = ""  # a stable, secret-free name of the credential (cache keys)

    @classmethod
    def parse(cls, raw: Any) -> GitHubSettings:
        app = raw.get("app")
        token = SecretRef.parse(raw["token"]) if "token" in raw else None if app else GITHUB_TOKEN
        return cls(
            labels=tuple(str(label) for label in raw["labels"]),
            org=raw.get("org"),
            repos=tuple(raw.get("repos", ())),
            api_url=_api(raw, GITHUB_API),
            token=token,
            app=None if app is None else GitHubApp(str(app["appId"]), str(app["installationId"]),
                                                   SecretRef.parse(app["privateKey"])),
            concurrency=int(raw.get("concurrency", 8)),
            credential=identity(app or raw.get("token") or {}),
        )

    @property
    def scope(self) -> str:
        return f"org:{self.org}" if self.org is not None else "repos:" + ",".join(
            sorted(self.repos))

    def group(self) -> tuple[str, ...]:
        """One poll per API, scope and credential."""
        return ("github", self.api_url, self.scope, self.credential)


@dataclass(frozen=True)
class BuildkiteSettings:
    """``source: {buildkite: ...}``: the agent metrics API of one queue."""

    queue: str
    api_url: str = BUILDKITE_API
    token: SecretRef = BUILDKITE_TOKEN  # an agent token
    count_waiting: bool = False  # jobs waiting behind others count as queued

    @classmethod
    def parse(cls, raw: Any) -> BuildkiteSettings:
        return cls(str(raw["queue"]), _api(raw, BUILDKITE_API),
                   SecretRef.parse(raw["token"]) if "token" in raw else BUILDKITE_TOKEN,
                   bool(raw.get("countWaiting", False)))

    @property
    def credential(self) -> str:
        return identity(self.token.mapping)

    def group(self) -> tuple[str, ...]:
        """One request per API, credential and queue (each set counts waiting jobs or not)."""
        return ("buildkite", self.api_url, self.credential, self.queue)
