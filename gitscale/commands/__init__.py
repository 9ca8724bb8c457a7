"""One module per command; each is a typed function returning an exit code."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from gitscale.errors import InputError
from gitscale.timeutil import format_time, parse_time, utcnow

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CHANGES = 2


@dataclass(frozen=True)
class RepoOptions:
    """The options every command takes: where the config repo is and which file configures it."""

    repo: str
    branch: str | None
    config: str


def resolve_now(now: str | None) -> tuple[datetime, str | None]:
    """The pass clock, and the git date to stamp commits with when the clock is pinned."""
    if now is None:
        return utcnow(), None
    try:
        value = parse_time(now)
    except ValueError as exc:
        raise InputError("--now", str(exc)) from None
    return value, format_time(value)


def demand_path(demand: str | None) -> Path | None:
    return Path(demand).expanduser().resolve() if demand else None
