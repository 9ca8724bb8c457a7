"""The one HTTP client: JSON requests with timeouts, retries, ``Link`` paging, ETag
revalidation, rate limits, and errors that name the URL and the cause, never a credential.

One ``HttpClient`` per API and credential, thread-safe. GETs are revalidated from its
``EtagCache`` (``etags.py``: in memory, or a file kept between runs). No answer at all is
``Unreachable`` with its cause (``no_answer.py``); GETs and other idempotent requests are
tried again on no answer or a 5xx, a POST never is.

Rate limits, as GitHub and Buildkite state them: a 403 or 429 with ``retry-after`` (seconds or
an HTTP date); with no requests left (``x-ratelimit-remaining: 0``), until
``x-ratelimit-reset`` (GitHub, epoch seconds) or ``ratelimit-reset`` (Buildkite, seconds from
now); a secondary limit without either, or an end that is already past by this host's clock
(a server clock behind it, ``retry-after: 0``), a minute. A 403 that is none of these is a refusal
(read by ``answers.py``: ``limit_until``, with the answer's JSON and the API's own words).
A limit no longer than ``max_wait`` is waited for; a longer one raises ``RateLimited`` and the
client sends nothing more to that API until it lifts.

What is sent and followed stays with the API: a ``Link: rel="next"`` page and a redirect are
followed only on the origin (scheme, host and port) of the request that led there, or its
upgrade from http to https on the same host (``urls.same_api``) — a next page
or a redirect elsewhere is an ``ApiError`` and nothing, the credential least, is sent there
(GitHub pages and redirects a renamed repo within its own API). A credential that cannot be a
header's value (a newline, a byte that is not ASCII) is refused before anything is sent
(``Unsendable``). An
answer's body is read streamed, at most ``MAX_BODY`` bytes (a larger one is an ``ApiError``), and
a JSON body nested too deep to parse is "invalid JSON" like any other.
"""
from __future__ import annotations

import functools
import ssl
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

import httpx

from gitscale.clients import deadline
from gitscale.clients.answers import Answer, Budget, detail_of, json_of, limit_until, number_of
from gitscale.clients.errors import ApiError, RateLimited, Unreachable, Unsendable
from gitscale.clients.etags import EtagCache as EtagCache
from gitscale.clients.etags import cache_file as cache_file
from gitscale.clients.no_answer import Overdue, describe
from gitscale.clients.urls import next_link, origin_text, same_api, with_params
from gitscale.redact import header_problem, redact
from gitscale.timeutil import format_time

USER_AGENT = "gitscale (+https://gitscale.dev)"
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "private-token"})
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})  # retried on no answer/5xx
# The largest answer body read: a page of 100 GitHub jobs is ~0.5 MB, and GitHub caps even a
# webhook payload at 25 MB (``webhooks/delivery.py``). Larger is a broken or hostile server.
MAX_BODY = 32 * 1024 * 1024
MAX_REDIRECTS = 20  # httpx's own bound
# The headers of a refusal an ``ApiError`` keeps: the server's clock (a JWT refused as issued in
# the future) and the permissions GitHub wanted (a 403 "Resource not accessible by integration").
EXPLAINING = ("date", "x-accepted-github-permissions")
COURTESY_BODY = 64 * 1024  # what ``send`` keeps of an answer: its caller shows a line of it
# A request's deadline, in timeouts: connecting, the headers and the body may each take one
# (httpx's timeouts are per operation: a server trickling its answer never trips them).
DEADLINE_TIMEOUTS = 3


@dataclass
class Stats:
    requests: int = 0
    not_modified: int = 0
    retries: int = 0



@functools.cache
def tls_context() -> ssl.SSLContext:
    """The CA certificates, loaded once a process (0.1–0.4 s): for clients made often."""
    return httpx.create_ssl_context()


class HttpClient:
    """One API and credential. ``headers`` is called for every request (a token that changes,
    such as an App's, is picked up); the secrets it sends are masked in every message built
    from an answer, as a server or a proxy in front of it may echo them
    (``{"message": "Bad credentials: <token>"}``). ``refused`` is told the status of a
    request the API refused (401, or a 403 that is no rate limit) — the credential may have
    been rotated: it reads it again — and the request is sent once more when ``headers`` then
    gives another credential."""

    def __init__(self, *, name: str, headers: Callable[[], Mapping[str, str]] = dict,
                 refused: Callable[[int], Any] | None = None,
                 cache: EtagCache | None = None, timeout: float = 10.0, retries: int = 2,
                 max_wait: float = 0.0, follow_redirects: bool = True,
                 verify: ssl.SSLContext | bool = True,
                 transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 resolve: deadline.Resolve = deadline.getaddrinfo) -> None:
        self.name = name
        self.headers = headers
        self.refused = refused
        self.cache = cache if cache is not None else EtagCache()
        self.timeout = timeout
        self.retries = retries
        self.max_wait = max_wait
        self.follow_redirects = follow_redirects
        self.sleep = sleep
        self.stats = Stats()
        self.lock = threading.Lock()  # one client serves several threads
        self.limited: RateLimited | None = None  # set once the API says stop
        self.budget: Budget | None = None  # the rate limit, as the last answer stated it
        # masked in every message built from an answer; the last few (an app's token changes)
        self.sent_secrets: dict[str, None] = {}
        # every connection: a deadline per request, a name resolved within the timeout
        self.http = deadline.bound(httpx.Client(timeout=timeout, transport=transport,
                                                verify=verify,
                                                follow_redirects=False,  # by _exchange
                                                headers={"User-Agent": USER_AGENT}), resolve)

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

    def cached(self) -> list[str]:
        """The URLs whose answers the ETag cache holds."""
        with self.lock:
            return list(self.cache.entries)

    def forget(self, gone: Callable[[str], bool]) -> None:
        """Drop the cached answers of the URLs ``gone`` names (``EtagCache.forget``)."""
        with self.lock:
            self.cache.forget(gone)

    def request(self, method: str, url: str, *, params: Mapping[str, Any] | None = None,
                json: Any = None) -> Answer:
        """Any method, a JSON body in and out, no cache. A status of 400 or more raises
        ``ApiError`` (``status`` says which), after retries for idempotent methods (5xx)."""
        return self._call(method.upper(), url, params=params, body=json, cached=False)

    def paginate(self, url: str, params: Mapping[str, Any] | None, key: str,
                 limit: int = 1000, seen: Callable[[Any], None] | None = None) -> list[Any]:
        """Every item of a paginated list (under ``key`` of each page, or the page itself when
        ``key`` is ""), following ``Link: rel="next"`` to the end. ``seen`` is given each
        page's whole body (what an envelope says beside its list, such as a total count)."""
        items: list[Any] = []
        next_url: str | None = with_params(url, params)
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
            if seen is not None:
                seen(body)
            pages += 1
            current, next_url = next_url, next_link(answer.headers.get("link", ""), next_url)
            if next_url and not same_api(next_url, current):
                raise self._error(ApiError, f"GET {redact(current)}: its next page is on "
                                            f"another origin ({origin_text(next_url)}): not "
                                            "followed, nothing is sent there",
                                  method="GET", url=current, status=answer.status)
            if next_url and pages >= limit:
                raise self._error(ApiError, f"GET {redact(url)}: more than {limit} pages",
                                  method="GET", url=url, status=answer.status)
        return items

    def send(self, method: str, url: str, *, content: bytes, headers: Mapping[str, str],
             timeout: float | None = None) -> Answer:
        """One attempt, whatever the answer's status (a courtesy call such as a notification:
        the caller reads the status and the first ``COURTESY_BODY`` bytes of the body). Only
        no answer at all raises, ``Unreachable`` (and a credential header that cannot be sent,
        ``Unsendable``)."""
        full = str(httpx.URL(url))
        wait = httpx.Timeout(self.timeout if timeout is None else timeout)
        self._remember_secrets(headers)
        self._check_headers(method, full, headers)
        try:
            response, body = self._exchange(method, full, dict(headers), content=content,
                                            timeout=wait, keep=COURTESY_BODY)
        except httpx.HTTPError as exc:
            cause = describe(exc, full, wait.read or self.timeout)
            raise self._error(Unreachable, f"{method} {redact(full)} failed: {cause}",
                              method=method, url=full, cause=cause,
                              timed_out=isinstance(exc, httpx.TimeoutException),
                              overdue=isinstance(exc, Overdue)) from None
        return Answer(response.status_code, response.headers, None, body)

    # -- one request, its retries and its limits ----------------------------------------------
    def _call(self, method: str, url: str, *, params: Mapping[str, Any] | None = None,
              body: Any = None, cached: bool = True) -> Answer:
        full = with_params(url, params)
        self._respect_limit()
        tries = self.retries + 1 if method in IDEMPOTENT else 1
        waited = 0.0
        attempt = 0
        renewed = False  # a refused credential was read again and sent once more
        while True:
            headers = dict(self.headers())
            self._remember_secrets(headers)
            self._check_headers(method, full, headers)
            entry = self._entry(full) if cached and method == "GET" else None
            if entry:
                headers["If-None-Match"] = entry[0]
            with self.lock:
                self.stats.requests += 1
            try:
                response, content = self._exchange(method, full, headers, body=body)
            except httpx.HTTPError as exc:
                problem = f"failed: {describe(exc, full, self.timeout)}"
                status = 0
            else:
                status = response.status_code
                self._note_budget(response.headers)
                if status == 304 and entry:
                    return self._revalidated(full, entry, response)
                if status < 400:
                    return self._answer(method, full, response, content, cached)
                until = limit_until(status, response.headers, content)
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
                if status in (401, 403) and not renewed and self._renewed(status, headers):
                    renewed = True
                    continue
                detail = detail_of(content, self.credentials())
                if status < 500:
                    raise self._error(ApiError, f"{method} {redact(full)} answered {status}"
                                                f"{f': {detail}' if detail else ''}",
                                      method=method, url=full, status=status, detail=detail,
                                      headers={k: response.headers[k] for k in EXPLAINING
                                               if k in response.headers})
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

    def _renewed(self, status: int, sent: Mapping[str, str]) -> bool:
        """Whether the credential, read again after a refusal, is another than ``sent``'s
        (another thread may have read the new one first: compared with what was sent)."""
        if self.refused is None:
            return False
        self.refused(status)
        now = {k.lower(): v for k, v in self.headers().items() if k.lower() in SECRET_HEADERS}
        return now != {k.lower(): v for k, v in sent.items() if k.lower() in SECRET_HEADERS}

    def _note_budget(self, headers: Mapping[str, str]) -> None:
        remaining, limit = headers.get("x-ratelimit-remaining"), headers.get("x-ratelimit-limit")
        if remaining and limit and remaining.isdigit() and limit.isdigit():
            reset = (headers.get("x-ratelimit-reset") or "").strip()
            self.budget = Budget(number_of(remaining), number_of(limit),
                                 float(number_of(reset)) if reset.isdigit() else 0.0)

    def _exchange(self, method: str, url: str, headers: Mapping[str, str], *,
                  body: Any = None, content: bytes | None = None,
                  timeout: httpx.Timeout | None = None,
                  keep: int | None = None) -> tuple[httpx.Response, bytes]:
        """One request, its redirects (on ``url``'s origin only) and its body (streamed, at most
        ``MAX_BODY`` bytes; with ``keep``, its first ``keep`` bytes and no error), all within
        ``DEADLINE_TIMEOUTS`` timeouts (``Overdue`` past them). The response returned is
        closed; its body is the bytes."""
        seconds = DEADLINE_TIMEOUTS * (self.timeout if timeout is None or timeout.read is None
                                       else timeout.read)
        ends = time.monotonic() + seconds
        try:
            with deadline.until(ends):
                return self._exchange_once(method, url, headers, body=body, content=content,
                                           timeout=timeout, keep=keep)
        except httpx.TimeoutException as exc:
            if time.monotonic() < ends:
                raise
            raise Overdue(seconds) from exc

    def _exchange_once(self, method: str, url: str, headers: Mapping[str, str], *,
                       body: Any = None, content: bytes | None = None,
                       timeout: httpx.Timeout | None = None,
                       keep: int | None = None) -> tuple[httpx.Response, bytes]:
        request = self.http.build_request(
            method, url, headers=headers, json=body, content=content,
            timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout)
        for _ in range(MAX_REDIRECTS + 1):
            response = self.http.send(request, stream=True, follow_redirects=False)
            try:
                if not (self.follow_redirects and response.next_request is not None):
                    return response, self._read(method, url, response, keep)
                request = response.next_request
                if not same_api(str(request.url), url):
                    raise self._error(ApiError, f"{method} {redact(url)} answered "
                                                f"{response.status_code}, a redirect to another "
                                                f"origin ({origin_text(str(request.url))}): not "
                                                "followed, nothing is sent there",
                                      method=method, url=url, status=response.status_code)
            finally:
                response.close()
        raise self._error(ApiError, f"{method} {redact(url)}: more than {MAX_REDIRECTS} "
                                    "redirects", method=method, url=url)

    def _read(self, method: str, url: str, response: httpx.Response,
              keep: int | None = None) -> bytes:
        """The body, refused past ``MAX_BODY`` bytes (as sent, or once decoded) before it is
        all in memory; with ``keep``, its first ``keep`` bytes (the rest is not read)."""
        if keep is not None:
            kept = bytearray()
            for chunk in response.iter_bytes():
                kept += chunk[:keep - len(kept)]
                if len(kept) >= keep:
                    break
            return bytes(kept)
        declared = response.headers.get("content-length", "")
        size = int(declared) if declared.isascii() and declared.isdigit() \
            and len(declared) < 20 else 0
        chunks: list[bytes] = []
        held = 0
        if size <= MAX_BODY:
            for chunk in response.iter_bytes():
                held += len(chunk)
                if held > MAX_BODY:
                    break
                chunks.append(chunk)
        if size > MAX_BODY or held > MAX_BODY:
            raise self._error(ApiError, f"{method} {redact(url)} answered "
                                        f"{response.status_code} with a body over "
                                        f"{MAX_BODY // 2**20} MiB (the most gitscale reads of "
                                        "an API's answer)", method=method, url=url,
                              status=response.status_code)
        return b"".join(chunks)

    def _check_headers(self, method: str, url: str, headers: Mapping[str, str]) -> None:
        """A credential that cannot be a header's value is refused before anything is sent:
        the HTTP library's error would quote it, and retrying cannot help."""
        for name, value in headers.items():
            if name.lower() not in SECRET_HEADERS:
                continue
            scheme, space, credential = value.partition(" ")
            problem = header_problem(credential if space and scheme.isalpha() else value)
            if problem is not None:
                raise self._error(Unsendable, f"{method} {redact(url)} not sent: the credential "
                                            f"of its {name} header {problem}", method=method,
                                  url=url)

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

    def _answer(self, method: str, url: str, response: httpx.Response, content: bytes,
                cached: bool) -> Answer:
        body = None
        if content:
            try:
                body = json_of(content)
            except ValueError:
                kind = response.headers.get("content-type", "")
                text = content[:64].decode("utf-8", "replace").lstrip()
                what = "an HTML page" if "html" in kind or text.startswith(
                    "<") else "invalid or truncated JSON"
                raise self._error(ApiError, f"{method} {redact(url)} returned {what} (status "
                                            f"{response.status_code}, {len(content)} "
                                            "bytes)", method=method, url=url,
                                  status=response.status_code,
                                  headers={"content-type": kind}) from None
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
