"""What an API said, as our errors: raised by the clients (``http.py`` and the clients built
on it), importable without loading an HTTP library. Every message names the method and the URL
(without credentials) and never holds a credential the client sent."""
from __future__ import annotations

from datetime import datetime
from typing import Mapping

from gitscale.errors import GitscaleError


class ApiError(GitscaleError):
    """An API refused or failed. ``status`` is its HTTP status (0: no answer), ``detail`` its
    own words (the ``message`` of a JSON error body; "" when it gave none), ``headers`` the
    refusal's headers that explain it (``date``: the server's clock, for a JWT refused as not
    yet valid; ``x-accepted-github-permissions``: what GitHub wanted; ``content-type``: of a
    body that is not JSON), lower-case."""

    def __init__(self, message: str, *, method: str = "", url: str = "", status: int = 0,
                 detail: str = "", headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.method = method
        self.url = url
        self.status = status
        self.detail = detail
        self.headers: Mapping[str, str] = headers or {}


class Unsendable(ApiError):
    """A credential that cannot be a header's value (a newline, a byte that is not ASCII): the
    request was not sent. Fixing the credential is the only cure: it is not retried."""


class Unreachable(ApiError):
    """No answer: ``cause`` says why (DNS, refused, TLS, proxy, timeout, a cut connection);
    ``timed_out`` when it was a timeout, ``overdue`` when that was the request's deadline (the
    server answered, too slowly to finish in time)."""

    def __init__(self, message: str, *, cause: str, method: str = "", url: str = "",
                 timed_out: bool = False, overdue: bool = False) -> None:
        super().__init__(message, method=method, url=url)
        self.cause = cause
        self.timed_out = timed_out
        self.overdue = overdue


class BadAnswer(ApiError):
    """The API's address answered, but not as the API does: a 2xx (or 3xx) whose body is not
    its JSON — a proxy's or a captive portal's HTML page, JSON without what the API always
    sends. Not a refusal: the API did not answer properly (as with a 5xx). ``status`` is the
    answer's, ``headers`` hold its ``content-type``."""


class RateLimited(ApiError):
    """The API refused because of a rate limit; ``until`` is when it lifts (if known). The
    client that raised it sends nothing more to that API before then."""

    def __init__(self, message: str, until: datetime | None, *, method: str = "",
                 url: str = "", status: int = 0) -> None:
        super().__init__(message, method=method, url=url, status=status)
        self.until = until
