"""Times and durations as gitscale reads and writes them: RFC 3339 in UTC, durations like ``90s``
or ``14d``."""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone


# ASCII digits only: ``\d`` alone also takes other scripts' digits (``١٠m``).
_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", re.ASCII)
MAX_DURATION = timedelta(days=366)
FIRST_YEAR, LAST_YEAR = 1970, 9000


def parse_duration(text: str) -> timedelta:
    """Parse ``90s``, ``10m``, ``1h``, ``1h30m``, ``14d``, ``1d12h`` (a day is 24 hours).
    Raises ValueError with a readable message."""
    match = _DURATION.fullmatch(text.strip())
    if not text.strip() or not match or not any(match.groups()):
        raise ValueError(f"{text!r} is not a duration (use forms like 90s, 10m, 1h, 1h30m, 14d)")
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    try:
        value = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    except OverflowError:
        value = timedelta.max
    if value > MAX_DURATION:
        raise ValueError(f"{text!r} is longer than a year")
    return value


def parse_time(text: str) -> datetime:
    """Parse an RFC 3339 time. A time without an offset is refused: the clock must be unambiguous."""
    try:
        value = datetime.fromisoformat(text.strip())
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"{text!r} is not an RFC 3339 time (e.g. 2026-11-21T09:00:00Z)") from exc
    if value.tzinfo is None:
        raise ValueError(f"{text!r} has no UTC offset (add Z or +01:00)")
    # Far from now, adding a delay or a duration (at most a year) would overflow later.
    if not FIRST_YEAR <= value.year <= LAST_YEAR:
        raise ValueError(f"{text!r} is not between the years {FIRST_YEAR} and {LAST_YEAR}")
    return value.astimezone(timezone.utc)


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z``, second precision: what gitscale writes into manifests."""
    return value.astimezone(timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(value: datetime) -> str:
    """RFC 3339 in UTC with microseconds: a Kubernetes ``MicroTime`` (a Lease's renewTime, an
    Event's eventTime)."""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def backoff(base: float, failures: int, cap: float) -> float:
    """After ``failures`` failed passes in a row: ``base`` doubled that many times, up to
    ``cap`` (the exponent bounded: after a thousand failures a float would overflow)."""
    return min(cap, base * float(2 ** min(failures, 32)))
