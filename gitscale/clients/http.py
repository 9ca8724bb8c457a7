"""The one HTTP client: JSON requests with timeouts, retries, ``Link`` paging, ETag
revalidation, rate limits, and errors that name the URL and the cause, never a credential.

One ``HttpClient`` per API and credential, thread-safe. GETs are revalidated from its
``EtagCache`` (``etags.py``: in memory, or a file kept between runs). No answer at all is
``Unreachable`` with its cause (``no_answer.py``); GETs and other idempotent requests are
tried again on no answer or a 5xx, a POST never is.

Rate limits, as GitHub and Buildkite state them: a 403 or 429 with ``retry-after`` (seconds or
an HTTP date); with no requests left (``x-ratelimit-remaining: 0``), until
``x-ratelimit-reset`` (GitHub, epoch seconds) or ``ratelimit-reset`` (Buildkite, seconds from
now); a secondary limit without either, a minute. A 403 that is none of these is a refusal.
A limit no longer than ``max_wait`` is waited for; a longer one raises ``RateLimited`` and the
client sends nothing more to that API until it lifts.
"""
from __future__ import annotations

import functools
import ssl
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Callable, Mapping

import httpx

from gitscale.clients.errors import ApiError, RateLimited, Unreachable
from gitscale.clients.etags import EtagCache as EtagCache
from gitscale.clients.etags import cache_file as cache_file
from gitscale.clients.no_answer import describe
from gitscale.redact import redact
from gitscale.timeutil import format_time

USER_AGENT = "gitscale (+https://gitscale.dev)"
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "private-token"})
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})  # retried on no answer/5xx
SECONDARY_WAIT = 60.0  # seconds: a secondary limit that says nothing more (GitHub's docs)


@dataclass
class Stats:
    requests: int = 0
    not_modified: int = 0
    retries: int = 0


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


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The CA certificates, loaded once a process (0.1–0.4 s): for clients made often."""
    return httpx.create_ssl_context()


class HttpClient:
    """One API and credential. ``headers`` is called for every request (a token that changes,
    such as an App's, is picked up); the secrets it sends are masked in every message built
    from an answer, as a server or a proxy in front of it may echo them
    (``{"message": "Bad credentials: <token>"}``)."""

    def __init__(self, *, name: str, headers: Callable[[], Mapping[str, str]] = dict,
                 cache: EtagCache | None = None, timeout: float = 10.0, retries: int = 2,
                 max_wait: float = 0.0, follow_redirects: bool = True,
                 verify: ssl.SSLContext | bool = True,
                 transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.name = name
        self.headers = headers
        self.cache = cache if cache is not None else EtagCache()
        self.timeout = timeout
        self.retries = retries
        self.max_wait = max_wait
        self.sleep = sleep
        self.stats = Stats()
        self.lock = threading.Lock()  # one client serves several threads
        self.limited: RateLimited | None = None  # set once the API says stop
        self.budget: Budget | None = None  # the rate limit, as the last answer stated it
        # masked in every message built from an answer; the last few (an app's token changes)
        self.sent_secrets: dict[str, None] = {}
        self.http = httpx.Client(timeout=timeout, transport=transport, verify=verify,
                                 follow_redirects=follow_redirects,
                                 headers={"User-Agent": USER_AGENT})

    def close(self) -> None:
        self.http.close()

    def save(self) -> None:
        """Keep the ETag cache (a no-op for one in memory)."""
        self.cache.save()

    def credentials(self) -> list[str]:
        """The credentials this client has sent (an app's tokens change: all of them)."""
        return list(self.sent_secrets)

    # -- verbs --------------------------------------------------------------------------------
    def get(self, url: str, params: Mapping[str, Any] | None = None) -> Answer:
        """GET ``url`` as JSON, revalidating a cached copy (``If-None-Match``)."""
        return self._call("GET", url, params=params)

    def request(self, method: str, url: str, *, params: Mapping[str, Any] | None = None,
                json: Any = None) -> Answer:
        """Any method, a JSON body in and out, no cache. A status of 400 or more raises
        ``ApiError`` (``status`` says which), after retries for idempotent methods (5xx)."""
        return self._call(method.upper(), url, params=params, body=json, cached=False)

    def paginate(self, url: str, params: Mapping[str, Any] | None, key: str,
                 limit: int = 1000) -> list[Any]:
        """Every item of a paginated list (under ``key`` of each page, or the page itself when
        ``key`` is ""), following ``Link: rel="next"`` to the end."""
        items: list[Any] = []
        next_url: str | None = _with_params(url, params)
        pages = 0
        while next_url:
            answer = self.get(next_url)
            body = answer.body
            page = body.get(key) if isinstance(body, dict) and key else body
            if not isinstance(page, list):
                raise self._error(ApiError, f"GET {redact(next_url)}: expected a list"
                                            f"{f' under {key!r}' if key else ''}",
                                  method="GET", url=next_url, status=answer.status)
            items.extend(page)
            pages += 1
            next_url = next_link(answer.headers.get("link", ""), next_url)
            if next_url and pages >= limit:
                raise self._error(ApiError, f"GET {redact(url)}: more than {limit} pages",
                                  method="GET", url=url, status=answer.status)
        return items

    def send(self, method: str, url: str, *, content: bytes, headers: Mapping[str, str],
             timeout: float | None = None) -> Answer:
        """One attempt, whatever the answer's status (a courtesy call such as a notification:
        the caller reads the status). Only no answer at all raises: ``Unreachable``."""
        full = str(httpx.URL(url))
        wait = httpx.Timeout(self.timeout if timeout is None else timeout)
        try:
            response = self.http.request(method, full, content=content, headers=dict(headers),
                                         timeout=wait)
        except httpx.HTTPError as exc:
            cause = describe(exc, full, wait.read or self.timeout)
            raise self._error(Unreachable, f"{method} {redact(full)} failed: {cause}",
                              method=method, url=full, cause=cause,
                              timed_out=isinstance(exc, httpx.TimeoutException)) from None
        return Answer(response.status_code, response.headers, None, response.content)

    # -- one request, its retries and its limits ----------------------------------------------
    def _call(self, method: str, url: str, *, params: Mapping[str, Any] | None = None,
              body: Any = None, cached: bool = True) -> Answer:
        full = _with_params(url, params)
        self._respect_limit()
        tries = self.retries + 1 if method in IDEMPOTENT else 1
        waited = 0.0
        attempt = 0
        while True:
            headers = dict(self.headers())
            self._remember_secrets(headers)
            entry = self._entry(full) if cached and method == "GET" else None
            if entry:
                headers["If-None-Match"] = entry[0]
            with self.lock:
                self.stats.requests += 1
            try:
                response = self.http.request(method, full, headers=headers, json=body)
            except httpx.HTTPError as exc:
                problem = f"failed: {describe(exc, full, self.timeout)}"
                status = 0
            else:
                status = response.status_code
                self._note_budget(response.headers)
                if status == 304 and entry:
                    return self._revalidated(full, entry, response)
                if status < 400:
                    return self._answer(method, full, response, cached)
                until = _limit(response)
                if until is not None:
                    wait = max(0.0, (until - datetime.now(timezone.utc)).total_seconds())
                    if waited + wait <= self.max_wait:
                        waited += wait
                        self.sleep(wait)
                        continue
                    limited = self._error(
                        RateLimited, f"rate limited until {format_time(until)} ({method} "
                        f"{redact(full)} answered {status}); no request is sent before then",
                        until=until, method=method, url=full, status=status)
                    self.limited = limited
                    raise limited
                detail = _detail(response)
                if status < 500:
                    raise self._error(ApiError, f"{method} {redact(full)} answered {status}"
                                                f"{f': {detail}' if detail else ''}",
                                      method=method, url=full, status=status, detail=detail)
                problem = f"answered {status}"
            attempt += 1
            if attempt >= tries:
                break
            with self.lock:
                self.stats.retries += 1
            self.sleep(0.2 * 2 ** (attempt - 1))
        after = f" (after {tries} tries)" if tries > 1 else ""
        if status:
            raise self._error(ApiError, f"{method} {redact(full)} {problem}{after}", method=method,
                              url=full, status=status)
        cause = problem.removeprefix("failed: ")
        raise self._error(Unreachable, f"{method} {redact(full)} {problem}{after}", method=method,
                          url=full, cause=cause)

    def _note_budget(self, headers: Mapping[str, str]) -> None:
        remaining, limit = headers.get("x-ratelimit-remaining"), headers.get("x-ratelimit-limit")
        if remaining and limit and remaining.isdigit() and limit.isdigit():
            reset = (headers.get("x-ratelimit-reset") or "").strip()
            self.budget = Budget(_number(remaining), _number(limit),
                                 float(_number(reset)) if reset.isdigit() else 0.0)

    def _respect_limit(self) -> None:
        """Another request hit a limit that has not lifted yet: wait for it when it is short,
        otherwise send nothing (GitHub may ban a client that keeps asking)."""
        limited = self.limited
        if limited is None:
            return
        left = None if limited.until is None else (
            limited.until - datetime.now(timezone.utc)).total_seconds()
        if left is not None and left <= 0:
            self.limited = None
        elif left is not None and left <= self.max_wait:
            self.sleep(left)
        else:
            raise limited

    def _entry(self, url: str) -> tuple[str, Any] | None:
        cached = self.cache.entries.get(url)
        if cached and url not in self.cache.links:
            return None  # its Link is unknown: a 304 could not say where the next page is
        return cached

    def _revalidated(self, url: str, entry: tuple[str, Any], response: httpx.Response) -> Answer:
        headers = httpx.Headers(response.headers)
        with self.lock:
            self.stats.not_modified += 1
            self.cache.touch(url)
            if "link" in headers and headers["link"] != self.cache.links.get(url):
                self.cache.links[url] = headers["link"]
                self.cache.dirty = True
            elif self.cache.links.get(url):
                headers["link"] = self.cache.links[url]
        return Answer(304, headers, entry[1])

    def _answer(self, method: str, url: str, response: httpx.Response, cached: bool) -> Answer:
        body = None
        if response.content:
            try:
                body = response.json()
            except ValueError:
                kind = response.headers.get("content-type", "")
                what = "an HTML page" if "html" in kind or response.text.lstrip().startswith(
                    "<") else "invalid or truncated JSON"
                raise self._error(ApiError, f"{method} {redact(url)} returned {what} (status "
                                            f"{response.status_code}, {len(response.content)} "
                                            "bytes)", method=method, url=url,
                                  status=response.status_code) from None
        etag = response.headers.get("etag")
        if cached and method == "GET" and etag:
            with self.lock:
                self.cache.store(url, etag, body, response.headers.get("link", ""))
        return Answer(response.status_code, response.headers, body)

    def _error(self, kind: type[Any], message: str, **fields: Any) -> Any:
        """``kind`` with this client's name, and no credential it has sent, in its message."""
        error = kind(redact(f"{self.name}: {message}", self.credentials()), **fields)
        if isinstance(error, ApiError) and error.detail:
            error.detail = redact(error.detail, self.credentials())
        return error

    def _remember_secrets(self, headers: Mapping[str, str]) -> None:
        with self.lock:
            for name, value in headers.items():
                if name.lower() in SECRET_HEADERS:
                    for secret in (value, value.split(None, 1)[-1]):
                        self.sent_secrets.pop(secret, None)
                        self.sent_secrets[secret] = None
            while len(self.sent_secrets) > 16:
                self.sent_secrets.pop(next(iter(self.sent_secrets)), None)


def _with_params(url: str, params: Mapping[str, Any] | None) -> str:
    kept = {k: v for k, v in (params or {}).items() if v is not None}
    return str(httpx.URL(url, params=kept)) if kept else url


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


def _detail(response: httpx.Response) -> str:
    """The API's own words: a JSON body's ``message`` (GitHub, Buildkite), cut at 200."""
    try:
        body = response.json()
    except ValueError:
        return ""
    message = body.get("message") if isinstance(body, dict) else None
    return str(message)[:200] if message else ""


def _limit(response: httpx.Response) -> datetime | None:
    """When a rate limit answered by ``response`` lifts; None when it is not one."""
    status = response.status_code
    if status not in (403, 429):
        return None
    headers = response.headers
    remaining = headers.get("x-ratelimit-remaining", headers.get("ratelimit-remaining"))
    retry_after = (headers.get("retry-after") or "").strip()
    secondary = "rate limit" in _detail(response).lower()
    if status == 403 and remaining != "0" and not retry_after and not secondary:
        return None  # a plain permission error, not a limit
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
    if until is None and remaining == "0":
        reset = (headers.get("x-ratelimit-reset") or "").strip()  # GitHub: epoch seconds
        relative = (headers.get("ratelimit-reset") or "").strip()  # Buildkite: seconds left
        if reset.isascii() and reset.isdigit():
            until = _timestamp(_number(reset))
        elif relative.isascii() and relative.isdigit():
            until = _timestamp(time.time() + _number(relative))
    return until or datetime.fromtimestamp(time.time() + SECONDARY_WAIT, timezone.utc)


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
