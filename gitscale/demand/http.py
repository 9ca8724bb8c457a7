"""The HTTP side of the polling sources: JSON GETs with ETag revalidation, pagination,
rate-limit awareness and errors that name the URL (never a credential).

One ``JsonClient`` per API and credential. Its ``EtagCache`` is keyed by the full URL and can be
kept on disk between runs (a cron job's second pass then costs 304s, which GitHub does not count
against the rate limit).
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Callable, Mapping

import httpx

from gitscale.redact import redact
from gitscale.demand import RateLimited as RateLimited
from gitscale.demand import SourceError as SourceError
from gitscale.timeutil import format_time

USER_AGENT = "gitscale (+https://gitscale.dev)"
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "private-token"})


@dataclass
class Stats:
    requests: int = 0
    not_modified: int = 0
    retries: int = 0


MAX_AGE = 86_400.0  # seconds: an entry no pass has used for a day is dropped on save


@dataclass
class EtagCache:
    """URL → (ETag, JSON body), and the page's ``Link`` header: a 304 need not repeat it
    (GitHub's do; a proxy's may not), and without it the next pages would never be read. No
    credential is stored, but the bodies may describe private repos, so the file is written
    owner-only (0600).

    Every workflow run that ever queued leaves its jobs URL behind; entries no pass has used
    for ``max_age`` are dropped on save, so the file stays the size of what is polled."""

    path: Path | None = None
    entries: dict[str, tuple[str, Any]] = field(default_factory=dict)
    dirty: bool = False
    used: dict[str, float] = field(default_factory=dict)  # URL → when a pass last used it
    links: dict[str, str] = field(default_factory=dict)  # URL → its Link header ("" if none)
    max_age: float = MAX_AGE

    @classmethod
    def load(cls, path: Path | None) -> "EtagCache":
        cache = cls(path)
        if path is not None and path.is_file():
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
                now = time.time()
                cache.entries = {k: (v[0], v[1]) for k, v in raw.items()}
                cache.used = {k: float(v[2]) if len(v) > 2 else now for k, v in raw.items()}
                # an entry saved without its Link is revalidated by a plain GET (see JsonClient)
                cache.links = {k: v[3] for k, v in raw.items()
                               if len(v) > 3 and isinstance(v[3], str)}
            except (OSError, ValueError, TypeError, IndexError, AttributeError):
                cache.entries, cache.used, cache.links = {}, {}, {}  # only a slower pass
        return cache

    def store(self, url: str, etag: str, body: Any, link: str = "") -> None:
        self.entries[url] = (etag, body)
        self.links[url] = link
        self.used[url] = time.time()
        self.dirty = True

    def touch(self, url: str) -> None:
        """``url`` was revalidated. The file is rewritten for this only now and then, so a pass
        of nothing but 304s usually writes nothing."""
        now = time.time()
        if now - self.used.get(url, 0.0) > self.max_age / 24:
            self.used[url] = now
            self.dirty = True

    def prune(self) -> None:
        oldest = time.time() - self.max_age
        for url in [u for u in self.entries if self.used.get(u, 0.0) < oldest]:
            del self.entries[url]
            self.used.pop(url, None)
            self.links.pop(url, None)
            self.dirty = True

    def save(self) -> None:
        self.prune()
        if self.path is None or not self.dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        # The bodies are private repos' run lists (names, branches, commit titles, actors):
        # readable by the owner only, whatever the umask.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # an old tmp file left by a crash keeps its mode otherwise
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(json.dumps({k: [*v, round(self.used.get(k, 0.0)), self.links.get(k)]
                                  for k, v in self.entries.items()}))
        os.replace(tmp, self.path)
        self.dirty = False


def cache_file(cache_dir: Path | None, api: str, identity: str) -> Path | None:
    """Where one API+credential's cache lives; the credential only enters as a hash."""
    if cache_dir is None:
        return None
    digest = hashlib.sha256(f"{api}\0{identity}".encode()).hexdigest()[:16]
    return cache_dir / f"etags-{digest}.json"


def _mask(exc: SourceError, secrets: list[str]) -> None:
    """Clear ``secrets`` from the error's message (what ``str()`` shows) and its args."""
    exc.message = redact(exc.message, secrets)
    exc.args = (exc.message,)


class JsonClient:
    def __init__(self, *, name: str, headers: Callable[[], Mapping[str, str]],
                 cache: EtagCache, timeout: float = 10.0, retries: int = 2,
                 transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.name = name
        self.headers = headers
        self.cache = cache
        self.retries = retries
        self.sleep = sleep
        self.stats = Stats()
        self.lock = threading.Lock()  # repos are polled from several threads at once
        self.limited: RateLimited | None = None  # set once the API says stop
        # masked in every message built from an answer; the last few (an app's token changes)
        self.sent_secrets: dict[str, None] = {}
        self.http = httpx.Client(timeout=timeout, transport=transport, follow_redirects=True,
                                 headers={"User-Agent": USER_AGENT})

    def close(self) -> None:
        self.http.close()

    def get(self, url: str, params: Mapping[str, Any] | None = None) -> tuple[Any, httpx.Headers]:
        """GET ``url`` as JSON, revalidating a cached copy. Raises SourceError / RateLimited,
        their messages cleared of the credentials this client sends (a server or a proxy in
        front of it may echo them: ``{"message": "Bad credentials: <token>"}``)."""
        try:
            return self._get(url, params)
        except SourceError as exc:
            _mask(exc, self.credentials())
            raise

    def credentials(self) -> list[str]:
        """The credentials this client has sent (an app's tokens change: all of them)."""
        return list(self.sent_secrets)

    def _remember_secrets(self, headers: Mapping[str, str]) -> None:
        for name, value in headers.items():
            if name.lower() in SECRET_HEADERS:
                for secret in (value, value.split(None, 1)[-1]):
                    self.sent_secrets.pop(secret, None)
                    self.sent_secrets[secret] = None
        while len(self.sent_secrets) > 16:
            self.sent_secrets.pop(next(iter(self.sent_secrets)), None)

    def _get(self, url: str, params: Mapping[str, Any] | None) -> tuple[Any, httpx.Headers]:
        full = str(httpx.URL(url, params=params)) if params else url
        limited = self.limited
        if limited is not None and (limited.until is None
                                    or limited.until > datetime.now(timezone.utc)):
            raise limited  # other threads already hit the limit: send nothing more
        for attempt in range(self.retries + 1):
            headers = dict(self.headers())
            self._remember_secrets(headers)
            cached = self.cache.entries.get(full)
            if cached and full not in self.cache.links:
                cached = None  # its Link is unknown: a 304 could not say where the next page is
            if cached:
                headers["If-None-Match"] = cached[0]
            with self.lock:
                self.stats.requests += 1
            try:
                response = self.http.get(full, headers=headers)
            except httpx.TimeoutException:
                problem = "timed out"
            except httpx.HTTPError as exc:
                problem = f"failed: {type(exc).__name__}"
            else:
                if response.status_code == 304 and cached:
                    answer = httpx.Headers(response.headers)
                    with self.lock:
                        self.stats.not_modified += 1
                        self.cache.touch(full)
                        if "link" in answer and answer["link"] != self.cache.links.get(full):
                            self.cache.links[full] = answer["link"]
                            self.cache.dirty = True
                        elif self.cache.links.get(full):
                            answer["link"] = self.cache.links[full]
                    return cached[1], answer
                if response.status_code < 300:
                    body = _json(response, self.name, full)
                    etag = response.headers.get("etag")
                    if etag:
                        with self.lock:
                            self.cache.store(full, etag, body, response.headers.get("link", ""))
                    return body, response.headers
                try:
                    _raise_for_limits(response, self.name, full)
                except RateLimited as exc:
                    self.limited = exc
                    raise
                if response.status_code < 500:
                    raise SourceError(f"{self.name}: GET {full} answered {response.status_code}"
                                      f"{_message(response)}")
                problem = f"answered {response.status_code}"
            if attempt < self.retries:
                with self.lock:
                    self.stats.retries += 1
                self.sleep(0.2 * 2 ** attempt)
        raise SourceError(f"{self.name}: GET {full} {problem} (after {self.retries + 1} tries)")

    def paginate(self, url: str, params: Mapping[str, Any] | None, key: str,
                 limit: int = 1000) -> list[Any]:
        """Every item of a paginated list, following ``Link: rel="next"`` to the end."""
        try:
            return self._paginate(url, params, key, limit)
        except SourceError as exc:
            _mask(exc, self.credentials())
            raise

    def _paginate(self, url: str, params: Mapping[str, Any] | None, key: str,
                  limit: int) -> list[Any]:
        items: list[Any] = []
        next_url: str | None = str(httpx.URL(url, params=params)) if params else url
        pages = 0
        while next_url:
            body, headers = self.get(next_url)
            page = body.get(key) if isinstance(body, dict) else body
            if not isinstance(page, list):
                raise SourceError(f"{self.name}: GET {next_url}: expected a list"
                                  f"{f' under {key!r}' if key else ''}")
            items.extend(page)
            pages += 1
            if pages >= limit:
                raise SourceError(f"{self.name}: GET {url}: more than {limit} pages")
            next_url = _next_link(headers.get("link", ""), next_url)
        return items


def _next_link(link: str, base: str) -> str | None:
    for part in link.split(","):
        section = part.split(";")
        if len(section) < 2:
            continue
        target = section[0].strip().strip("<>")
        if any(p.strip().replace(" ", "") in ('rel="next"', "rel=next") for p in section[1:]):
            return str(httpx.URL(base).join(target))
    return None


def _json(response: httpx.Response, name: str, url: str) -> Any:
    kind = response.headers.get("content-type", "")
    try:
        return response.json()
    except ValueError:
        what = "an HTML page" if "html" in kind or response.text.lstrip().startswith("<") \
            else "invalid or truncated JSON"
        raise SourceError(f"{name}: GET {url} returned {what} "
                          f"(status {response.status_code}, {len(response.content)} bytes)") from None


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return ""
    message = body.get("message") if isinstance(body, dict) else None
    return f": {str(message)[:200]}" if message else ""


def _raise_for_limits(response: httpx.Response, name: str, url: str) -> None:
    """GitHub's rules: ``retry-after`` if given; else the reset time when no requests remain;
    else (a secondary limit) at least a minute. A 403 that is none of these is a permission
    error, not a limit."""
    status = response.status_code
    if status not in (403, 429):
        return
    remaining = response.headers.get("x-ratelimit-remaining")
    reset = response.headers.get("x-ratelimit-reset")
    retry_after = (response.headers.get("retry-after") or "").strip()
    secondary = "rate limit" in _message(response).lower()
    if status == 403 and remaining != "0" and not retry_after and not secondary:
        return  # a plain permission error, not a limit
    until: datetime | None = None
    if retry_after.isascii() and retry_after.isdigit():
        until = _timestamp(time.time() + _number(retry_after))
    elif retry_after:
        try:
            parsed = parsedate_to_datetime(retry_after)
            until = (parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)) \
                .astimezone(timezone.utc)
        except (TypeError, ValueError):
            until = None
    if until is None and remaining == "0" and reset and reset.isascii() and reset.isdigit():
        until = _timestamp(_number(reset))
    if until is None:
        until = datetime.fromtimestamp(time.time() + 60, timezone.utc)
    raise RateLimited(f"{name}: rate limited until {format_time(until)} (GET {url} answered "
                      f"{status}); sets fed by it are not scaled this pass", until)


def _number(digits: str) -> int:
    """A header's digits as an int; one too long to be real (int() refuses 4,300 digits) is
    simply very large."""
    return int(digits) if len(digits) <= 15 else 10**15


def _timestamp(seconds: float) -> datetime | None:
    """None for a time datetime cannot hold: the caller falls back to its default wait."""
    try:
        return datetime.fromtimestamp(seconds, timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
