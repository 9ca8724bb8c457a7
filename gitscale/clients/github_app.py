"""A GitHub App's installation token, for the polling source and the controller alike.

A JWT signed with the app's private key (RS256; issued 60 s in the past against clock drift,
valid 9 minutes: GitHub refuses more than 10) is exchanged at
``POST {api}/app/installations/{id}/access_tokens`` for an installation token, which is reused
until 5 minutes before it expires. One exchange at a time, however many threads ask: the others
wait for it and use its token — or, when it failed, its error (a revoked key refused once per
moment, GitHub down asked once, not once per thread that was waiting).

What the credentials' owner must fix — a key that cannot sign, an installation that cannot be
found, a refusal (401, 403) — raises the caller's credentials error (a ``GitscaleError``).
GitHub failing is not that, and must not send anyone to rotate a good key: a 5xx or no answer
at the exchange (or at the installation's look-up) raises the client's own ``ApiError`` (status
5xx) or ``Unreachable`` (``errors.py``), an answer that is not GitHub's (a 2xx whose body is a
proxy's or captive portal's page, or JSON without ``token`` and ``expires_at``) ``BadAnswer``
(its status and content type said), and a rate limit ``RateLimited``, which every caller
already takes for GitHub being unavailable (the controller's ``PlatformOutage``, a source that
could not be read). A refresh GitHub fails that way, while the
token held is still valid for more than ``LAST_MINUTE``, raises nothing: that token is used
meanwhile (said once in the log), and the exchange is tried again ``OUTAGE_RETRY`` seconds later
— an outage of a few minutes must not stop every call that a valid token would serve. A refusal
at the refresh raises as always (a revoked key: its tokens are not to be used). Every message names the URL (and the cause,
when there was no answer), never the key or a token. Each JWT signed and each token minted is
held for masking (``gitscale.redact``): the JWT is a credential too (it mints tokens for its
minutes), and a bug's message, not only this client's errors, may quote it. The requests go through the one HTTP client (``http.py``).

https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-an-installation-access-token-for-a-github-app
"""
from __future__ import annotations

import logging
import re
import threading
import time
from email.utils import parsedate_to_datetime
from typing import Any, Callable

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

from gitscale.clients.answers import Answer
from gitscale.clients.errors import ApiError, BadAnswer, RateLimited, Unreachable
from gitscale.clients.http import HttpClient
from gitscale.errors import GitscaleError
from gitscale.redact import header_problem, hold, redact
from gitscale.timeutil import parse_time

log = logging.getLogger("gitscale.clients")

REFRESH_BEFORE = 300.0  # seconds before its expiry a token is replaced
# A token refused (401: revoked, or the App's key or installation changed) is exchanged again,
# but not one this young: every request of a pass refused at once must not each exchange one.
REFUSED_AGE = 30.0
LIFETIME = 3600.0  # how long an installation token lives when the answer does not say
# Said after a 5xx or no answer at the exchange: an on-call engineer must not rotate a good key.
NOT_REFUSED = "GitHub unavailable; the credentials were not refused: nothing to rotate"
# A token with no more than this left is not served when its refresh failed: GitHub failing
# raises then, as it does with no token at all (a call made with it might outlive it).
LAST_MINUTE = 60.0
# While GitHub fails the refresh and the old token serves, the exchange is tried again this often
# (not by every call: an exchange that times out would hold every caller for its timeout).
OUTAGE_RETRY = 30.0
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
        self._exchanges = 0  # exchanges ended so far
        # what the last one raised, when it failed (made again for each thread that waited)
        self._failure: Callable[[], Exception] | None = None
        self._skew = 0.0  # GitHub's clock minus ours, once a refusal said (its ``Date``)
        # While a refresh failed for an outage and the old token serves: when to try again
        # (``clock``); None: no such outage. ``_warned``: its last minute was said.
        self._retry_at: float | None = None
        self._warned = False
        self._http = HttpClient(name=f"github app {app_id}", retries=0, timeout=timeout,
                                headers=lambda: {**HEADERS,
                                                 "Authorization": f"Bearer {self._assertion}"})

    def close(self) -> None:
        self._http.close()

    def get(self) -> str:
        """A token valid for at least 5 more minutes; exchanges a new one when needed. A
        caller that waited for an exchange that failed gets its error, not another exchange —
        or, when GitHub failed (not refused) it and the token held has more than
        ``LAST_MINUTE`` left, that token."""
        asked = self._exchanges  # (read before waiting: an exchange ending meanwhile answers)
        with self._lock:  # held through the exchange: one exchange, the others wait for it
            # (``expires_at`` is on GitHub's clock: compared on it)
            held = self._token
            left = 0.0 if held is None else held[1] - (self._clock() + self._skew)
            if held is None or left <= REFRESH_BEFORE:
                if held is not None and self._retry_at is not None and \
                        self._clock() < self._retry_at and left > LAST_MINUTE:
                    return held[0]  # (GitHub failed its refresh just now)
                if self._failure is not None and self._exchanges != asked:
                    raise self._failure()
                try:
                    held = self._token = self._exchange()
                except RateLimited as exc:
                    self._failure = None  # (the HTTP client keeps it: nothing is sent)
                    return self._outage(exc, left)
                except self._error as exc:
                    said = str(exc)
                    self._failure = lambda: self._error(said)
                    self._retry_at = None
                    raise
                except ApiError as exc:  # GitHub failing (a 5xx, no answer, not its answer)
                    self._failure = _again(exc)
                    return self._outage(exc, left)
                except BaseException:
                    self._failure = None
                    raise
                finally:
                    self._exchanges += 1
                if self._retry_at is not None:
                    log.info("github app %s: an installation token was exchanged again: GitHub "
                             "answers", self.app_id)
                self._failure = None
                self._retry_at = None
                self._warned = False
                self._minted = self._clock()
            return held[0]

    def _outage(self, exc: ApiError, left: float) -> str:
        """The token held, when GitHub failing ``exc`` refreshed none and it has more than
        ``LAST_MINUTE`` left (said once; the exchange tried again in ``OUTAGE_RETRY`` s); else
        ``exc`` raised, as with no token."""
        if self._token is None or left <= LAST_MINUTE:
            if self._token is not None and not self._warned:
                self._warned = True
                log.warning("%s: the installation token held expires in %.0f s: not used any "
                            "longer", exc, max(left, 0.0))
            self._retry_at = None
            raise exc
        if self._retry_at is None:
            log.info("%s: the installation token held, valid %.0f s more, is used meanwhile "
                     "(the exchange tried again every %.0f s)", exc, left, OUTAGE_RETRY)
        self._retry_at = self._clock() + OUTAGE_RETRY
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
        key = self._signing_key()
        now = int(self._clock())
        installation = self._installation or self._look_up(key)
        self._installation = installation
        url = f"{self.api}/app/installations/{installation}/access_tokens"
        try:
            answer = self._call("POST", url, "could not get an installation token", key)
        except self._error:  # (refused: the App may have been installed again, under a new
            if not self._configured:  # id: asked again; GitHub failing keeps the id it gave)
                self._installation = None
            raise
        body: dict[str, Any] = answer.body if isinstance(answer.body, dict) else {}
        token = body.get("token")
        if not isinstance(token, str) or not token or "expires_at" not in body:
            raise self._not_github("POST", url, answer, _lacks(answer.body, "token", "expires_at"),
                                   "could not get an installation token")
        problem = header_problem(token)
        if problem is not None:  # said before any request carries it, never shown
            raise self._error(f"github app {self.app_id}: POST {url} answered {answer.status} "
                              f"with a token that {problem}: could not get an installation "
                              "token")
        # Held for masking in every message of the process, not only this client's: one an
        # hour per installation, which the registry's bound (the most recent) keeps finite.
        return hold(token), _epoch(body.get("expires_at")) or now + self._skew + LIFETIME

    def _signing_key(self) -> RSAPrivateKey:
        """The App's private key, loaded; what is wrong with it, said without showing it."""
        text = self._private_key().strip()
        problem = key_problem(text)
        if problem is None:
            try:
                key = serialization.load_pem_private_key(text.encode(), password=None)
            except TypeError:  # (cryptography: "Password was not given but … is encrypted")
                problem = ("an encrypted private key (it asks for a passphrase): GitHub's are "
                           "not; give the .pem file the App's settings page downloaded as it is")
            except (ValueError, UnicodeError):
                problem = "not a PEM private key (its content cannot be read)"
            else:
                if isinstance(key, RSAPrivateKey):
                    return key
                problem = "not an RSA private key: a GitHub App's key is RSA"
        raise self._error(f"{self._key_name}: cannot sign a JWT: {problem} (the value "
                          "is not shown)")

    def _jwt(self, key: RSAPrivateKey) -> str:
        """The App's JWT on GitHub's clock (``_skew``, once a refusal told it): issued 60 s
        in the past, valid 9 minutes — GitHub refuses an ``iat`` in its future and an ``exp``
        more than 10 minutes ahead."""
        now = int(self._clock() + self._skew)
        return jwt.encode({"iat": now - 60, "exp": now + 540, "iss": self.app_id}, key,
                          algorithm="RS256")

    def _look_up(self, key: RSAPrivateKey) -> str:
        if self._owner is None:
            raise self._error(f"github app {self.app_id}: no installation id")
        url = f"{self.api}/{self._owner}/installation"
        answer = self._call("GET", url, f"could not look up its installation on {self._owner}",
                            key)
        found = answer.body.get("id") if isinstance(answer.body, dict) else None
        if not isinstance(found, int) or isinstance(found, bool):
            raise self._not_github("GET", url, answer, _lacks(answer.body, "id"),
                                   f"could not look up its installation on {self._owner}")
        return str(found)

    def _not_github(self, method: str, url: str, answer: Answer, what: str,
                    meaning: str) -> BadAnswer:
        """An answer that is not GitHub's (a proxy's or captive portal's page, JSON without
        what GitHub always sends): GitHub not answering properly, as with a 5xx — never the
        credentials' fault. Says the status and the content type, never the body."""
        kind = (answer.headers.get("content-type") or "").strip()[:100] or "no Content-Type"
        return BadAnswer(self._masked(
            f"github app {self.app_id}: {method} {redact(url)} answered {answer.status} "
            f"({kind}) with {what}, not GitHub's answer (a proxy or captive portal before it?): "
            f"{meaning} ({NOT_REFUSED})"), method=method, url=url, status=answer.status,
            headers={"content-type": kind})

    def _call(self, method: str, url: str, meaning: str, key: RSAPrivateKey, *,
              failed: str = "") -> Answer:
        """The answer. A refusal is ``error`` (``meaning`` says what it means); GitHub failing —
        a 5xx, no answer — is the client's ``ApiError`` or ``Unreachable`` (``failed`` says what
        could not be done; ``meaning`` when it is not given), a rate limit ``RateLimited`` (the
        client asks nothing more before it lifts): GitHub being unavailable, not a refusal. A
        JWT refused for its times is signed again on GitHub's clock (its answer's ``Date``) and
        sent once more."""
        for attempt in (1, 2):
            self._assertion = hold(self._jwt(key))  # (a credential: masked everywhere)
            try:
                return self._http.request(method, url)
            except Unreachable as exc:
                raise Unreachable(self._masked(f"{exc}: {failed or meaning} ({NOT_REFUSED})"),
                                  cause=exc.cause, method=method, url=url,
                                  timed_out=exc.timed_out) from None
            except RateLimited as exc:
                raise RateLimited(self._masked(f"{exc}: {meaning}"),  # ("github app ID: …")
                                  exc.until, method=method, url=url,
                                  status=exc.status) from None
            except ApiError as exc:
                if exc.status < 400:  # a body that is not JSON: not GitHub's answer
                    page = "an HTML page" if "an HTML page" in str(exc) else "a body that " \
                        "is not JSON"
                    raise self._not_github(method, url, Answer(exc.status, exc.headers), page,
                                           failed or meaning) from None
                if exc.status >= 500:
                    raise ApiError(self._masked(f"{exc}: {failed or meaning} ({NOT_REFUSED})"),
                                   method=method, url=url, status=exc.status) from None
                if attempt == 1 and self._clock_told(exc):
                    continue
                said = f" ({exc.detail})" if exc.detail else ""
                raise self._error(self._masked(
                    f"github app {self.app_id}: {method} {redact(url)} answered {exc.status}"
                    f"{said}: {meaning}{self._hint(exc)}")) from None
        raise AssertionError("unreachable")  # (the loop returns or raises)

    def _clock_told(self, exc: ApiError) -> bool:
        """Whether ``exc`` refused the JWT for its times and gave GitHub's clock, which is
        now used (this host's clock is off)."""
        github = _date(exc.headers.get("date"))
        if exc.status != 401 or not _times_refused(exc.detail) or github is None:
            return False
        self._skew = github - self._clock()
        return True

    def _hint(self, exc: ApiError) -> str:
        """What to check, for the refusals a credential's owner can fix."""
        detail = exc.detail.lower()
        if exc.status == 401 and _times_refused(exc.detail):
            off = f"{abs(self._skew):.0f} s {'behind' if self._skew > 0 else 'ahead of'}"
            return (f" (GitHub refused the JWT's times: this host's clock is {off} GitHub's "
                    "Date, after one correction; synchronise it, e.g. with NTP)")
        if exc.status == 401:
            return (f" (GitHub could not verify the JWT: {self._key_name} is not a private "
                    f"key of GitHub App {self.app_id}, or the app id is not the App's — the "
                    "App's settings page shows its id and its keys' fingerprints)")
        if exc.status == 404 and exc.url.endswith("/installation"):  # (a 401 is the key's)
            return (f" (it is not installed on {self._owner}, or "
                    f"{self._installation_name} is not set to its id)")
        if exc.status == 404 and "/access_tokens" in exc.url:
            return (f" (installation {self._installation} is not an installation of GitHub App "
                    f"{self.app_id}: check {self._installation_name})")
        if exc.status == 403 and "suspend" in detail:
            return (" (an organization owner can unsuspend it: the organization's Settings → "
                    "GitHub Apps → the App → Unsuspend)")
        return ""

    def _masked(self, text: str) -> str:
        """``text`` without the JWT of this exchange or a token sent before (an endpoint, or a
        proxy before it, may echo the ``Authorization`` header in its error)."""
        return redact(text, [self._assertion, *self._http.credentials()])


def _again(exc: ApiError) -> Callable[[], ApiError]:
    """GitHub's failure ``exc`` made again, for each thread that waited for the exchange that
    raised it."""
    message, method, url, status = str(exc), exc.method, exc.url, exc.status
    if isinstance(exc, BadAnswer):
        headers = dict(exc.headers)
        return lambda: BadAnswer(message, method=method, url=url, status=status,
                                 headers=headers)
    if isinstance(exc, Unreachable):
        cause, timed_out = exc.cause, exc.timed_out
        return lambda: Unreachable(message, cause=cause, method=method, url=url,
                                   timed_out=timed_out)
    return lambda: ApiError(message, method=method, url=url, status=status)


def _lacks(body: Any, *keys: str) -> str:
    """What an answer's JSON body lacks of ``keys`` (GitHub's always has them), in words."""
    if body is None:
        return "an empty body"
    if not isinstance(body, dict):
        return f"JSON that is not an object (a {type(body).__name__})"
    missing = [k for k in keys if k not in body]
    if missing:
        return f"JSON without {' or '.join(missing)}"
    value = body[keys[0]]
    return f"JSON whose {keys[0]} is {'empty' if not value else f'a {type(value).__name__}'}"


def is_id(value: str) -> bool:
    """A GitHub numeric id (an installation's, an App's): ASCII digits only."""
    return re.fullmatch(r"[1-9][0-9]{0,19}", value) is not None


def key_problem(text: str) -> str | None:
    """What is wrong with ``text`` as a GitHub App's private key, seen without parsing it (a
    public key pasted instead, line breaks written as ``\\n``); None: it is to be parsed."""
    if not text:
        return "empty"
    if "PUBLIC KEY-----" in text or text.startswith(("ssh-rsa ", "ecdsa-", "ssh-ed25519 ")):
        return ("a public key, not the private key: give the .pem file the App's settings "
                "page downloaded (-----BEGIN RSA PRIVATE KEY-----)")
    if "-----BEGIN" not in text:
        return "not a PEM private key (no -----BEGIN line)"
    if "\n" not in text and "\\n" in text:
        return ("its line breaks are the two characters \\n: write the key with real line "
                "breaks (e.g. from the file, with --from-file or a multi-line secret)")
    return None


def _times_refused(detail: str) -> bool:
    """GitHub's refusal of a JWT's ``iat`` or ``exp`` ("'Issued at' claim ('iat') must be an
    Integer representing a time in the past", "'Expiration time' claim ('exp') is too far in
    the future")."""
    return "('iat')" in detail or "('exp')" in detail


def _date(text: str | None) -> float | None:
    """An HTTP ``Date`` header as epoch seconds."""
    try:
        return parsedate_to_datetime(text).timestamp() if text else None
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _epoch(text: Any) -> float | None:
    try:
        return parse_time(str(text)).timestamp() if text else None
    except ValueError:
        return None
