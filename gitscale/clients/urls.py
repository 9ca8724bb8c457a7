"""Where a request may go: a URL with its query (``with_params``), a URL's origin, whether a
credential sent to one URL may be sent to another (``same_api``: the same origin, or its
upgrade from http to https), and the next page a ``Link`` header names (``next_link``). The
one HTTP client (``http.py``) follows a next page or a redirect only where ``same_api`` allows.
"""
from __future__ import annotations

from typing import Any, Mapping

import httpx


def with_params(url: str, params: Mapping[str, Any] | None) -> str:
    kept = {k: v for k, v in (params or {}).items() if v is not None}
    return str(httpx.URL(url, params=kept)) if kept else url


def origin(url: str) -> tuple[str, str, int]:
    """A URL's origin: scheme, host and port (the scheme's default when none is written)."""
    parsed = httpx.URL(url)
    return parsed.scheme, parsed.host, parsed.port or (443 if parsed.scheme == "https" else 80)


def same_api(target: str, source: str) -> bool:
    """Whether ``target`` may be sent what ``source`` was: the same origin, or the same host
    upgraded from http to https on the default ports (a server that redirects plain http to
    TLS, as GitHub Enterprise Server does; httpx keeps the credential there too). Never the
    other way: a credential is not downgraded to plain http."""
    to, came = origin(target), origin(source)
    return to == came or (came == ("http", to[1], 80) and to == ("https", came[1], 443))


def origin_text(url: str) -> str:
    """``scheme://host:port`` of ``url``: never its path, query or user info."""
    scheme, host, port = origin(url)
    return f"{scheme}://{host}:{port}"


def next_link(link: str, base: str) -> str | None:
    """The ``rel="next"`` target of a ``Link`` header, resolved against ``base``."""
    for part in link.split(","):
        section = part.split(";")
        if len(section) < 2:
            continue
        target = section[0].strip().strip("<>")
        if any(p.strip().replace(" ", "") in ('rel="next"', "rel=next") for p in section[1:]):
            return str(httpx.URL(base).join(target))
    return None
