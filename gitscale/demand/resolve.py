"""Pick each set's source and read demand once per pass."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitscale.cache import default_cache_dir
from gitscale.config import Config, RunnerSetConfig, safe_repo_path
from gitscale.demand import DemandReading
from gitscale.demand.file import FileSource, MissingDemandFile
from gitscale.errors import DemandError

if TYPE_CHECKING:  # the HTTP sources (httpx, PyJWT) load only when a set uses them
    from gitscale.demand.github import GitHubPoller
    from gitscale.demand.http import JsonClient


@dataclass
class Sources:
    """Clients and caches that outlive one pass in loop mode (and are saved between runs)."""

    cache_dir: Path | None = None
    timeout: float = 10.0
    pollers: dict[tuple[str, str], "GitHubPoller"] = field(default_factory=dict)
    buildkite: dict[str, "JsonClient"] = field(default_factory=dict)
    transport: Any = None  # an httpx transport, for tests that need one

    def clients(self) -> list["JsonClient"]:
        return [p.client for p in self.pollers.values()] + list(self.buildkite.values())

    def save(self) -> None:
        for client in self.clients():
            client.cache.save()

    def close(self) -> None:
        self.save()
        for client in self.clients():
            client.close()

    def github_poller(self, settings: dict[str, Any]) -> "GitHubPoller":
        from gitscale.demand.github import DEFAULT_API as GITHUB_API
        from gitscale.demand.github import GitHubAuth, GitHubPoller
        from gitscale.demand.http import EtagCache, JsonClient, cache_file
        from gitscale.demand.secrets import identity

        api = str(settings.get("apiUrl", GITHUB_API)).rstrip("/")
        auth = GitHubAuth(settings, api)
        ident = identity(settings.get("app") or settings.get("token") or {})
        cache = EtagCache.load(cache_file(self.cache_dir, api, ident))
        client = JsonClient(name=f"github ({api})", headers=auth.header, cache=cache,
                            timeout=self.timeout, transport=self.transport)
        return GitHubPoller(client, api, settings)

    def buildkite_client(self, settings: dict[str, Any]) -> "JsonClient":
        from gitscale.demand.buildkite import DEFAULT_API as BUILDKITE_API
        from gitscale.demand.http import EtagCache, JsonClient, cache_file
        from gitscale.demand.secrets import identity, read_secret

        api = str(settings.get("apiUrl", BUILDKITE_API)).rstrip("/")
        ref = settings.get("token", {"env": "BUILDKITE_AGENT_TOKEN"})
        key = f"{api}|{identity(ref)}"
        if key not in self.buildkite:
            token = read_secret(ref, "buildkite agent token")
            cache = EtagCache.load(cache_file(self.cache_dir, api, identity(ref)))
            self.buildkite[key] = JsonClient(
                name=f"buildkite ({api})", headers=lambda: {"Authorization": f"Token {token}"},
                cache=cache, timeout=self.timeout, transport=self.transport)
        return self.buildkite[key]


def read_demand(root: Path, config: Config, demand_file: Path | None,
                sources: Sources | None = None) -> DemandReading:
    """``--demand FILE`` replaces every source; otherwise each set's own source is asked.

    A broken source affects only its sets: they get an error and stay untouched.
    """
    if demand_file is not None:
        return FileSource(demand_file, str(demand_file), strict=True).read(config.sets)
    own = sources is None
    sources = sources or Sources(default_cache_dir())
    reading = DemandReading()
    by_kind: dict[str, list[RunnerSetConfig]] = defaultdict(list)
    for runner_set in config.sets:
        by_kind[runner_set.source.kind].append(runner_set)
    by_file: dict[str, list[RunnerSetConfig]] = defaultdict(list)
    for runner_set in by_kind.get("file", []):
        by_file[str(runner_set.source.settings)].append(runner_set)
    for rel, sets in by_file.items():
        try:
            path = safe_repo_path(root, rel, config.path, DemandError,
                                  lambda: config.line(sets[0].name, "source"))
            reading.merge(FileSource(path, rel).read(sets))
        except MissingDemandFile as exc:
            for runner_set in sets:  # each set's own `source:` line
                reading.errors[runner_set.name] = str(config.blame(
                    runner_set.name, "source", f"{rel}: {exc.detail}"))
        except DemandError as exc:
            for runner_set in sets:
                reading.errors[runner_set.name] = str(exc)
    try:
        if by_kind.get("github"):
            from gitscale.demand.github import read_github

            reading.merge(read_github(by_kind["github"], sources.pollers, sources.github_poller))
        if by_kind.get("buildkite"):
            from gitscale.demand.buildkite import read_buildkite

            reading.merge(read_buildkite(by_kind["buildkite"], sources.buildkite_client))
    finally:
        if own:
            sources.close()
        else:
            sources.save()
    return reading

