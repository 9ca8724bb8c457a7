"""Read demand once per pass: each group of sets from its source (``registry.py``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, TypeVar

from gitscale.files import default_cache_dir
from gitscale.config.load import Config, RunnerSetConfig
from gitscale.demand import DemandReading, RateLimited
from gitscale.demand.file import FileSource, MissingDemandFile
from gitscale.demand.refused import CredentialRefused
from gitscale.config.sources import SOURCES
from gitscale.errors import ConfigError, GitscaleError
from gitscale.config.secrets import SecretError

if TYPE_CHECKING:
    from gitscale.demand.registry import Where


class Kept(Protocol):
    """A client of ``gitscale.clients`` (imported only when a set uses one: httpx, PyJWT)."""

    def save(self) -> None: ...

    def close(self) -> None: ...


K = TypeVar("K", bound=Kept)


@dataclass
class Sources:
    """Clients and caches that outlive one pass in loop mode (and are saved between runs)."""

    cache_dir: Path | None = None
    timeout: float = 10.0
    transport: Any = None  # an httpx transport, for tests that need one
    clients: dict[tuple[str, ...], Kept] = field(default_factory=dict)
    # told when a credential file the clients read changes (``config/rotating.py``): run and
    # serve log it
    report: Callable[[str], None] | None = None
    # when each of the sources' warnings was last said and last seen (``demand.warner``): in a
    # loop, once and then every 30 minutes while it lasts, not once a pass
    warned: dict[str, tuple[float, float]] = field(default_factory=dict)

    def client(self, key: tuple[str, ...], make: Callable[[], K]) -> K:
        """The client kept under ``key`` (a kind, an API and a credential), made on first
        use. The key names the kind, so one key always holds the same type."""
        if key not in self.clients:
            self.clients[key] = make()
        return self.clients[key]  # type: ignore[return-value]

    def save(self) -> None:
        for client in self.clients.values():
            client.save()

    def close(self) -> None:
        self.save()
        for client in self.clients.values():
            client.close()


def read_demand(root: Path, config: Config, demand_file: Path | None,
                sources: Sources | None = None) -> DemandReading:
    """``--demand FILE`` replaces every source; otherwise each set's own source is asked, once
    per group of sets that one read serves.

    A broken source affects only its sets: they get an error and stay untouched.
    """
    if demand_file is not None:
        return FileSource(demand_file, str(demand_file), strict=True).read(config.sets)
    from gitscale.demand.registry import Where  # the sources' clients: not for --demand FILE

    own = sources is None
    sources = sources or Sources(default_cache_dir())
    where = Where(root, config.path, sources, config)
    groups: dict[tuple[str, Any], list[RunnerSetConfig]] = {}
    for runner_set in config.sets:
        source = runner_set.source
        key = (source.kind, SOURCES[source.kind].group(source.settings))
        groups.setdefault(key, []).append(runner_set)
    reading = DemandReading()
    try:
        for sets in groups.values():
            reading.merge(read_group(where, sets))
    finally:
        if own:
            sources.close()
        else:
            sources.save()
    return reading


def read_group(where: Where, sets: list[RunnerSetConfig]) -> DemandReading:
    """One read for ``sets`` (one group of one source). The one place where a source that
    cannot be read becomes a reading error for each of its sets."""
    from gitscale.demand.registry import connect

    source = sets[0].source
    try:
        return connect(SOURCES[source.kind], where, source.settings).read(sets)
    except MissingDemandFile as exc:
        failed = DemandReading()
        for runner_set in sets:  # each set's own `source:` line is to blame
            failed.errors[runner_set.name] = str(exc) if where.config is None else str(
                where.config.blame(runner_set.name, "source", f"{exc.source}: {exc.detail}"))
        return failed
    except SecretError as exc:
        failed = DemandReading()
        for runner_set in sets:  # the line of gitscale.yaml that names the credential
            failed.errors[runner_set.name] = str(exc) if where.config is None else \
                secret_error(where.config, runner_set, exc)
        return failed
    except GitscaleError as exc:
        failed = DemandReading(retry_at=exc.until if isinstance(exc, RateLimited) else None)
        failed.errors = {runner_set.name: str(exc) for runner_set in sets}
        return failed


def secret_error(config: Config, runner_set: RunnerSetConfig, exc: SecretError) -> str:
    """``exc`` at the line of ``runner_set``'s source that names the credential (``token:
    {env: GITHUB_TOKN}``), or at its ``source:`` line when the credential is the default."""
    line = config.secret_line(runner_set.name, exc.ref) if exc.ref is not None else None
    if line is not None:
        return str(ConfigError(config.path, f"runner set {runner_set.name!r}: {exc}", line))
    if isinstance(exc, CredentialRefused):  # (it names the credential: said to be the default)
        return str(config.blame(runner_set.name, "source", exc.with_default()))
    default = f" (the default, {{{exc.ref.kind}: {exc.ref.where}}})" if exc.ref else ""
    return str(config.blame(runner_set.name, "source", f"{exc}{default}"))
