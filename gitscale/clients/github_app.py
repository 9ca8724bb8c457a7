"""A GitHub App's installation token, for the polling source and the controller alike.

A JWT signed with the app's private key (RS256; issued 60 s in the past against clock drift,
valid 9 minutes: GitHub refuses more than 10) is exchanged at
``POST {api}/app/installations/{id}/access_tokens`` for an installation token, which is reused
until 5 minutes before it expires. One exchange at a time, however many threads ask: the others
wait for it and use its token. Anything wrong — a key that cannot sign, an installation that
cannot be found, a refusal, an answer without a token, no answer — raises the caller's
credentials error (a ``GitscaleError``) naming the URL (and the cause, when there was no
answer), never the key or a token. Each token minted is held for masking (``gitscale.redact``).
The requests go through the one HTTP client (``http.py``).

https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-an-installation-access-token-for-a-github-app
"""
from __future__ import annotations

import re
import threading
import time
from typing import Any, Callable

import jwt

from gitscale.clients.answers import Answer
from gitscale.clients.errors import ApiError, Unreachable
from gitscale.clients.http import HttpClient
from gitscale.errors import GitscaleError
from gitscale.redact import header_problem, hold, redact
from gitscale.timeutil import parse_time

REFRESH_BEFORE = 300.0  # seconds before its expiry a token is replaced
# A token refused (401: revoked, or the App's key or installation changed) is exchanged again,
# but not one this young: every request of a pass refused at once must not each exchange one.
REFUSED_AGE = 30.0
LIFETIME = 3600.0  # how long an installation token lives when the answer does not say
HEADERS = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}


class InstallationToken:
    """One app installation's token, cached and refreshed early. Thread-safe.

    ``private_key`` is called for each exchange (a rotated key is picked up). Without
    ``installation``, the installation is looked up once at ``GET {api}/{owner}/installation``
    (``owner``: ``orgs/NAME`` or ``repos/OWNER/REPO``). ``error`` is the exception raised,
    ``key_name`` names the key in its messages, ``installation_name`` where the installation's
    id was written (a value that is not a number is refused before any request: GitHub would
    answer 404, which says nothing of where the id came from).
    """

    def __init__(self, api: str, app_id: str, private_key: Callable[[], str], *,
                 installation: str | None, error: type[GitscaleError], key_name: str,
                 installation_name: str = "the installation id",
                 owner: str | None = None, timeout: float = 10.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.api = api.rstrip("/")
        self.app_id = app_id
        self._private_key = private_key
        self._installation = installation
        self._configured = installation is not None  # else looked up (and again, if it goes)
        self._owner = owner
        self._error = error
        self._key_name = key_name
        self._installation_name = installation_name
        self._clock = clock
        self._lock = threading.Lock()
        self._token: tuple[str, float] | None = None  # token, expiry (epoch seconds)
        self._minted = 0.0  # when the token was exchanged (``clock``)
        self._assertion = ""  # the JWT of the exchange under way
        self._http = HttpClient(name=f"github app {app_id}", retries=0, timeout=timeout,
                                headers=lambda: {**HEADERS,
                                                 "Authorization": f"Bearer {self._assertion}"})

    def close(self) -> None:
        self._http.close()

    def get(self) -> str:
        """A token valid for at least 5 more minutes; exchanges a new one when needed."""
        with self._lock:  # held through the exchange: one exchange, the others wait for it
            if self._token is None or self._token[1] - self._clock() <= REFRESH_BEFORE:
                self._token = self._exchange()
                self._minted = self._clock()
            return self._token[0]

    def refused(self) -> None:
        """The API refused the token (401): the next ``get`` exchanges another, reading the
        private key again — unless it was exchanged less than ``REFUSED_AGE`` seconds ago."""
        with self._lock:
            if self._token is not None and self._clock() - self._minted >= REFUSED_AGE:
                self._token = None

    def _exchange(self) -> tuple[str, float]:
        if self._installation is not None and not is_id(self._installation):
            raise self._error(f"{self._installation_name} is {self._installation[:40]!r}, not "
                              "a number: the id of the App's installation (the number at the "
                              "end of its settings page's URL, .../settings/installations/ID)")
        now = int(self._clock())
        try:
            self._assertion = jwt.encode({"iat": now - 60, "exp": now + 540,
                                          "iss": self.app_id},
                                         self._private_key(), algorithm="RS256")
        except (ValueError, TypeError, jwt.PyJWTError) as exc:
            raise self._error(f"{self._key_name}: cannot sign a JWT ({type(exc).__name__}): "
                              "not a PEM RSA private key") from None
        installation = self._installation or self._look_up()
        self._installation = installation
        url = f"{self.api}/app/installations/{installation}/access_tokens"
        try:
            answer = self._call("POST", url, "could not get an installation token")
        except Exception:  # (``error``: the caller's own class)
            if not self._configured:  # (the App may have been installed again, under a new id: ask again)
                self._installation = None
            raise
        body: dict[str, Any] = answer.body if isinstance(answer.body, dict) else {}
        token = body.get("token")
        if answer.status != 201 or not isinstance(token, str) or not token:
            raise self._error(f"github app {self.app_id}: POST {url} answered {answer.status} "
                              "with no token in its body: could not get an installation token")
        problem = header_problem(token)
        if problem is not None:  # said before any request carries it, never shown
            raise self._error(f"github app {self.app_id}: POST {url} answered {answer.status} "
                              f"with a token that {problem}: could not get an installation "
                              "token")
        # Held for masking in every message of the process, not only this client's: one an
        # hour per installation, which the registry's bound (the most recent) keeps finite.
        return hold(token), _epoch(body.get("expires_at")) or now + LIFETIME

    def _look_up(self) -> str:
        if self._owner is None:
            raise self._error(f"github app {self.app_id}: no installation id")
        url = f"{self.api}/{self._owner}/installation"
        answer = self._call("GET", url, f"it is not installed on {self._owner}")
        found = answer.body.get("id") if isinstance(answer.body, dict) else None
        if not isinstance(found, int) or isinstance(found, bool):
            raise self._error(f"github app {self.app_id} is not installed on {self._owner}: "
                              f"GET {url} answered {answer.status} with no installation id")
        return str(found)

    def _call(self, method: str, url: str, meaning: str) -> Answer:
        """The answer; a refusal, no answer or a body that is not JSON is ``error``."""
        try:
            return self._http.request(method, url)
        except Unreachable as exc:
            raise self._error(self._masked(str(exc))) from None
        except ApiError as exc:
            if exc.status < 400:  # a body that is not JSON: no token (or id) in it
                return Answer(exc.status, {}, None)
            said = f" ({exc.detail})" if exc.detail else ""
            raise self._error(self._masked(f"github app {self.app_id}: {method} {redact(url)} "
                                           f"answered {exc.status}{said}: {meaning}")) from None

    def _masked(self, text: str) -> str:
        """``text`` without the JWT of this exchange or a token sent before (an endpoint, or a
        proxy before it, may echo the ``Authorization`` header in its error)."""
        return redact(text, [self._assertion, *self._http.credentials()])


def is_id(value: str) -> bool:
    """A GitHub numeric id (an installation's, an App's): ASCII digits only."""
    return re.fullmatch(r"[1-9][0-9]{0,19}", value) is not None


def _epoch(text: Any) -> float | None:
    try:
        return parse_time(str(text)).timestamp() if text else None
    except ValueError:
        return None
