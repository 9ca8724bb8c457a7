"""Each demand source's settings: ``source: {KIND: ...}`` in gitscale.yaml, as a frozen dataclass.

The mapping has passed the source's JSON Schema (its entry's ``schema``) when ``parse`` sees it;
defaults are applied here, once. ``group`` is the key of the sets one read serves: sets whose
settings give the same key share a client and a request.
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Callable

from gitscale.config.secrets import SECRET_REF, SecretRef, identity

GITHUB_API = "https://api.github.com"
GITHUB_TOKEN = SecretRef("env", "GITHUB_TOKEN")  # without an app or a token
BUILDKITE_API = "https://agent.buildkite.com/v3"
BUILDKITE_TOKEN = SecretRef("env", "BUILDKITE_AGENT_TOKEN")
BUILDKITE_GRAPHQL = "https://graphql.buildkite.com/v1"


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
    installation_id: str | None  # None: looked up (the org's, or the first repo's)
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
            app=None if app is None else GitHubApp(
                str(app["appId"]),
                None if app.get("installationId") is None else str(app["installationId"]),
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
class BuildkiteJobIds:
    """``jobIds: {...}`` of a Buildkite source: the ids of the queue's jobs, from the GraphQL
    API with an API access token (``demand/buildkite_jobs.py``)."""

    token: SecretRef  # an API access token with GraphQL access (read-only is enough)
    graphql_url: str = BUILDKITE_GRAPHQL
    cluster: str | None = None  # the queue's cluster (its UUID); None: unclustered jobs only

    @classmethod
    def parse(cls, raw: Any) -> BuildkiteJobIds:
        return cls(SecretRef.parse(raw["token"]),
                   str(raw.get("graphqlUrl", BUILDKITE_GRAPHQL)).rstrip("/"),
                   None if raw.get("cluster") is None else str(raw["cluster"]))

    @property
    def credential(self) -> str:
        return identity(self.token.mapping)


@dataclass(frozen=True)
class BuildkiteSettings:
    """``source: {buildkite: ...}``: the agent metrics API of one queue, and optionally the
    ids of its jobs (``jobIds``)."""

    queue: str
    api_url: str = BUILDKITE_API
    token: SecretRef = BUILDKITE_TOKEN  # an agent token
    count_waiting: bool = False  # jobs waiting behind others count as queued
    job_ids: BuildkiteJobIds | None = None  # None: counts only

    @classmethod
    def parse(cls, raw: Any) -> BuildkiteSettings:
        return cls(str(raw["queue"]), _api(raw, BUILDKITE_API),
                   SecretRef.parse(raw["token"]) if "token" in raw else BUILDKITE_TOKEN,
                   bool(raw.get("countWaiting", False)),
                   BuildkiteJobIds.parse(raw["jobIds"]) if "jobIds" in raw else None)

    @property
    def credential(self) -> str:
        return identity(self.token.mapping)

    def group(self) -> tuple[str, ...]:
        """One request per API, credential and queue (each set counts waiting jobs or not),
        and one id query per GraphQL API, credential and cluster."""
        ids = self.job_ids
        more = () if ids is None else (ids.graphql_url, ids.credential, ids.cluster or "")
        return ("buildkite", self.api_url, self.credential, self.queue, *more)

    def secrets(self) -> tuple[SecretRef, ...]:
        return (self.token,) if self.job_ids is None else (self.token, self.job_ids.token)


# Each source's JSON Schema, checked before ``parse`` sees the mapping.
# an API's base URL: no credentials (a token goes in {env:}/{file:}), no query or fragment
# (the client appends paths and its own query: `?access_token=` would be sent on every call)
API_URL = {"type": "string", "pattern": r"^https?://[^\s@/?#]+(/[^\s@?#]*)?$",
           "maxLength": 2048}
# A Buildkite cluster's UUID, as its Settings page shows it (Cluster ID); config/schemas.py
# explains a mismatch in those words rather than by the pattern.
CLUSTER_UUID = {"type": "string",
                "pattern": "^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$"}

GITHUB: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["labels"],
    "oneOf": [{"required": ["org"]}, {"required": ["repos"]}],
    "properties": {
        "apiUrl": API_URL,
        "org": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9-]*$"},
        "repos": {"type": "array", "minItems": 1, "maxItems": 10_000, "uniqueItems": True,
                  "items": {"type": "string", "pattern": r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$"}},
        "labels": {"type": "array", "minItems": 1, "maxItems": 100,
                   "items": {"type": "string", "minLength": 1, "maxLength": 256}},
        "token": SECRET_REF,
        "concurrency": {"type": "integer", "minimum": 1, "maximum": 64},
        "app": {
            "type": "object",
            "additionalProperties": False,
            "required": ["appId", "privateKey"],  # installationId: looked up when absent
            "properties": {"appId": {"type": ["integer", "string"]},
                           "installationId": {"type": ["integer", "string"]},
                           "privateKey": SECRET_REF},
        },
    },
}

BUILDKITE: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["queue"],
    "properties": {
        "apiUrl": API_URL,
        "queue": {"type": "string", "minLength": 1, "maxLength": 256},
        "token": SECRET_REF,
        "countWaiting": {"type": "boolean"},
        "jobIds": {
            "type": "object",
            "additionalProperties": False,
            "required": ["token"],
            "properties": {
                "token": SECRET_REF,
                "graphqlUrl": API_URL,
                "cluster": CLUSTER_UUID,
            },
        },
    },
}
FILE: dict[str, Any] = {"type": "string", "minLength": 1}


def _no_files(settings: Any) -> tuple[str, ...]:
    return ()


def _no_secrets(settings: Any) -> tuple[SecretRef, ...]:
    return ()


def _github_secrets(settings: GitHubSettings) -> tuple[SecretRef, ...]:
    key = settings.app.private_key if settings.app is not None else None
    return tuple(ref for ref in (settings.token, key) if ref is not None)


@dataclass(frozen=True)
class SourceKind:
    """One demand source, everything the rest of gitscale asks about it: ``source: {NAME: …}``.

    ``client`` names its factory ``(Where, settings) → DemandSource`` as "module:function",
    imported only when a set uses the source (the HTTP sources load httpx and PyJWT;
    ``gitscale.demand.registry.connect`` imports it).
    ``webhooks``: whether ``gitscale serve`` routes ``workflow_job`` deliveries to its sets and
    resyncs them. ``files``: the config repo's files a read needs (a sparse checkout fetches
    them). ``secrets``: the credentials its settings name (held for masking at config load)."""

    name: str
    schema: dict[str, Any]  # the mapping under ``source: {NAME: …}``
    settings: Callable[[Any], Any]  # the schema-valid mapping → the source's frozen dataclass
    group: Callable[[Any], Hashable]  # sets whose settings give one key are read together
    client: str
    webhooks: bool = False
    files: Callable[[Any], tuple[str, ...]] = _no_files
    secrets: Callable[[Any], tuple[SecretRef, ...]] = _no_secrets


SOURCES: Mapping[str, SourceKind] = {kind.name: kind for kind in (
    SourceKind("file", FILE, FileSettings.parse, FileSettings.group,
               "gitscale.demand.file:source", files=lambda s: (s.path,)),
    SourceKind("github", GITHUB, GitHubSettings.parse, GitHubSettings.group,
               "gitscale.demand.github:source", webhooks=True, secrets=_github_secrets),
    SourceKind("buildkite", BUILDKITE, BuildkiteSettings.parse, BuildkiteSettings.group,
               "gitscale.demand.buildkite:source", secrets=BuildkiteSettings.secrets),
)}

SOURCE: dict[str, Any] = {
    "type": "object",
    "minProperties": 1,
    "maxProperties": 1,
    "additionalProperties": False,
    "properties": {name: kind.schema for name, kind in SOURCES.items()},
}
