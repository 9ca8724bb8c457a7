"""An API's answer as the one HTTP client (``http.py``) returns it (``Answer``), and what the
client reads in one: its JSON body (nested too deep to parse is invalid, not a crash), the API's
own words for an error (``detail_of``: masked, then cut), and the rate limit it states
(``limit_until``, as GitHub and Buildkite state it; ``Budget``, the requests left).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Mapping

import httpx

from gitscale.redact import redact

SECONDARY_WAIT = 60.0  # seconds: a secondary limit that says nothing more (GitHub's docs)
DETAIL_CHARS = 200  # an API's own words in an error, at most


@dataclass(frozen=True)
class Budget:
    """A rate limit as the API's last answer stated it (``x-ratelimit-*``): the requests left
    of ``limit``, and when it refills (epoch seconds, 0 when not said)."""

    remaining: int
    limit: int
    reset: float


@dataclass(frozen=True)
class Answer:
    """A successful answer: its status, headers (case-insensitive), JSON body (None when
    empty) and raw bytes (``send`` only; a cached body has none)."""

    status: int
    headers: Mapping[str, str]
    body: Any = None
    content: bytes = b""

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


def json_of(content: bytes) -> Any:
    """A JSON body; ``ValueError`` for one that is not JSON or is nested too deep to parse (a
    ``RecursionError`` is a bad answer, not a bug of ours)."""
    try:
        return json.loads(content)
    except RecursionError:
        raise ValueError("JSON nested too deep") from None


def detail_of(content: bytes, secrets: list[str] | tuple[str, ...] = ()) -> str:
    """The API's own words: a JSON body's ``message`` (GitHub, Buildkite), ``secrets`` masked
    before it is cut at ``DETAIL_CHARS`` (a secret cut in half would not be found)."""
    try:
        body = json_of(content)
    except ValueError:
        return ""
    message = body.get("message") if isinstance(body, dict) else None
    if not message:
        return ""
    return redact(str(message)[:20 * DETAIL_CHARS], secrets)[:DETAIL_CHARS]


def limit_until(status: int, headers: httpx.Headers, content: bytes) -> datetime | None:
    """When a rate limit answered with ``status`` lifts; None when it is not one. An end
    that is not in the future by this host's clock (``retry-after: 0``, a reset or date on a
    server clock behind ours) says nothing of when the API answers again — it has just
    refused — so it is waited for as a limit that states nothing, ``SECONDARY_WAIT``: taken
    at its word, the client sent the request again at once, in a loop without end for as
    long as the API refused (GitHub may ban a client that keeps asking while limited)."""
    if status not in (403, 429):
        return None
    remaining = headers.get("x-ratelimit-remaining", headers.get("ratelimit-remaining"))
    retry_after = (headers.get("retry-after") or "").strip()
    secondary = "rate limit" in detail_of(content).lower()
    if status == 403 and remaining != "0" and not retry_after and not secondary:
        return None  # a plain permission error, not a limit
    until: datetime | None = None
    if retry_after.isascii() and retry_after.isdigit():
        until = _timestamp(time.time() + number_of(retry_after))
    elif retry_after:
        try:
            parsed = parsedate_to_datetime(retry_after)
            until = (parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)) \
                .astimezone(timezone.utc)
        except (TypeError, ValueError):
            until = None
    if until is None and remaining == "0":
        reset = (headers.get("x-ratelimit-reset") or "").strip()  # GitHub: epoch seconds
        relative = (headers.get("ratelimit-reset") or "").strip()  # Buildkite: seconds left
        if reset.isascii() and reset.isdigit():
            until = _timestamp(number_of(reset))
        elif relative.isascii() and relative.isdigit():
            until = _timestamp(time.time() + number_of(relative))
    now = time.time()
    if until is None or until.timestamp() <= now:
        return datetime.fromtimestamp(now + SECONDARY_WAIT, timezone.utc)
    return until


def number_of(digits: str) -> int:
    """A header's digits as an int; one too long to be real (int() refuses 4,300 digits) is
    simply very large."""
    return int(digits) if len(digits) <= 15 else 10**15


def _timestamp(seconds: float) -> datetime | None:
    """None for a time datetime cannot hold: the caller falls back to its default wait."""
    try:
        return datetime.fromtimestamp(seconds, timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
