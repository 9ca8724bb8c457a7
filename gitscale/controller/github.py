"""GitHub's side of a runner, for the controller: a RunnerSet's scope and credentials,
just-in-time registration, the runner list (reused for as long as its reader allows, longer
while the rate limit runs low), unregistration.

The requests go through the GitHub client (``gitscale.clients.github``: every page by ``Link``,
rate limits, errors naming the URL and the cause); its errors become the controller's here, so
the decision code branches on a class: 401/403 ``CredentialsError``, 409 from generate-jitconfig
``RunnerNameTaken``, 422 from a delete ``RunnerBusy`` (the runner runs a job), a rate limit,
no answer, a 5xx or an App's token exchange answered with a page that is not GitHub's
(``BadAnswer``) ``PlatformOutage``, anything else (an odd answer) ``PlatformError``. After
a 5xx or no answer GitHub is asked again by no set of the client before a wait, then once
(``outage.py``). A rate limit of at most
``MAX_WAIT`` seconds is waited for; a longer one is reported, and nothing more is asked of
GitHub before it lifts.

The API base comes from the RunnerSet's ``configURL``: github.com → api.github.com,
``*.ghe.com`` → ``api.<host>``, any other host is GitHub Enterprise Server (``<host>/api/v3``);
tests point ``configURL`` at a loopback server. Credentials come from the Secret named in
``spec.github.credentialsSecret`` with the key names actions-runner-controller uses
(``github_token``, or ``github_app_id``, ``github_app_installation_id`` and
``github_app_private_key``). They are never logged, and no message contains a token: the token
and the private key are held for masking (``gitscale.redact``) as they are read (the ids are
not secrets: held, they would mask every number that happens to equal them), and an App's
installation tokens as they are minted (``github_app.py``).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, TypeVar

from gitscale.clients.errors import ApiError, BadAnswer, RateLimited, Unreachable, Unsendable
from gitscale.clients.github import PER_PAGE
from gitscale.clients.github import GitHub as GitHubAPI
from gitscale.clients.github_app import InstallationToken, is_id
from gitscale.controller.errors import (
    CredentialsError,
    CredentialsMissing,
    InvalidRunnerSet,
    PlatformError,
    PlatformOutage,
    RunnerBusy,
    RunnerNameTaken,
)
from gitscale.controller.outage import Outage
from gitscale.controller.platform import LIST_MAX_AGE, Registered, Registration
from gitscale.controller.platform_github import where
from gitscale.controller.refusals import CREDENTIALS_RETRY, StillRefused
from gitscale.redact import hold

MAX_WAIT = 10.0  # seconds a rate limit may hold a pass before it is reported instead
# The runner list costs a request per 100 runners of the scope (the whole org's, not only the
# controller's), and registrations — what the rate limit is for — must not starve. A list of
# P pages is reused at least P × 3600 / LIST_BUDGET seconds, so that reading it costs at most
# LIST_BUDGET requests an hour however large the org (a quarter of a token's 5,000; an App
# has 15,000 or more). And with less than LOW_BUDGET of the hour's requests left
# (x-ratelimit-remaining of x-ratelimit-limit), a list is reused 4 times as long; with less
# than SCARCE_BUDGET, until the limit refills (x-ratelimit-reset).
LIST_BUDGET = 1200
LOW_BUDGET = 0.25
SCARCE_BUDGET = 0.05
T = TypeVar("T")


@dataclass(frozen=True)
class Scope:
    """Where runners register: ``orgs/NAME``, ``repos/OWNER/REPO`` or ``enterprises/NAME``."""

    api: str
    path: str

    @property
    def runners_url(self) -> str:
        return f"{self.api}/{self.path}/actions/runners"


def scope_of(config_url: str) -> Scope:
    """The API and scope of a RunnerSet's ``configURL`` (``platform_github.where``)."""
    return Scope(*where(config_url))


@dataclass(frozen=True)
class Credentials:
    token: str | None = field(default=None, repr=False)
    app_id: str | None = None
    installation_id: str | None = None
    private_key: str | None = field(default=None, repr=False)
    source: str = ""  # where they were read ("Secret NS/NAME"), for messages


def credentials_from(data: Mapping[str, str], source: str) -> Credentials:
    """Read credentials from a Secret's (decoded) data; ``source`` names it in errors. The
    token or the private key is held for masking (each read: the most recent stay held)."""
    if data.get("github_token"):
        return Credentials(token=hold(data["github_token"]).strip(), source=source)
    app = {k: data.get(f"github_app_{k}", "").strip()
           for k in ("id", "installation_id", "private_key")}
    if app["id"] and app["private_key"]:
        installation = app["installation_id"]
        if installation and not is_id(installation):
            # GitHub would answer 404 for it; the key is optional: without it, looked up
            raise CredentialsMissing(
                f"{source}: key github_app_installation_id is {installation[:40]!r}, not a "
                "number: the id of the App's installation (.../settings/installations/ID), or "
                "leave the key out and the controller looks the installation up")
        return Credentials(app_id=app["id"], installation_id=installation or None,
                           private_key=hold(app["private_key"]), source=source)
    raise CredentialsMissing(f"{source}: needs the key github_token, or github_app_id and "
                           "github_app_private_key (and optionally github_app_installation_id)")


def _key(credentials: Credentials, key: str) -> str:
    """``key`` of the Secret the credentials were read from, in words for a message."""
    return f"{credentials.source}: key {key}" if credentials.source else f"key {key}"


class GitHub:
    """One scope and one set of credentials. Thread-safe: passes share it."""

    def __init__(self, scope: Scope, credentials: Credentials, *, timeout: float = 15.0,
                 clock: Callable[[], float] = time.time, max_wait: float = MAX_WAIT,
                 sleep: Callable[[float], None] = time.sleep,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.scope = scope
        self._clock = clock  # wall-clock time: tokens, the rate limit's reset
        self._monotonic = monotonic  # the runner list's age
        self._app = None if credentials.token else InstallationToken(
            scope.api, credentials.app_id or "", lambda: credentials.private_key or "",
            installation=credentials.installation_id, owner="/".join(scope.path.split("/")[:3]),
            error=CredentialsError, key_name=_key(credentials, "github_app_private_key"),
            installation_name=_key(credentials, "github_app_installation_id"), timeout=timeout,
            clock=clock)
        token = self._app.get if self._app is not None else (lambda: credentials.token or "")
        # which credential a refusal refused, in its message: where the person paged fixes it
        self._credential = (
            f"the credential of {_key(credentials, 'github_token')}" if credentials.token else
            f"the installation token of GitHub App {credentials.app_id}, minted with "
            f"{_key(credentials, 'github_app_private_key')}")
        # No retries: the controller's next pass is the retry (a POST is never sent twice).
        self._api = GitHubAPI(scope.api, token, timeout=timeout, retries=0, max_wait=max_wait,
                              sleep=sleep)
        self._lock = threading.Lock()
        self._groups: dict[str, int] = {}
        # (when it was read, by id). Passes of several sets read the same list while others
        # unregister runners: a list, once kept here, is never changed — ``unregister`` keeps
        # a new one without the runner (copy on write) — so a pass iterating it never sees it
        # change size under it.
        self._listed: tuple[float, dict[int, Registered]] | None = None
        self._pages = 1  # of the last list
        # GitHub failing (a 5xx, no answer): asked again by no set before a wait, then once.
        self.outage = Outage("GitHub", clock=monotonic)
        # GitHub answered a request with anything but a refusal of the credentials (an App:
        # a token exchanged): they work — for the kinds of call answered, by ``_ask``'s verb
        # (``refusals.Vouched``: "Self-hosted runners: Read" lists runners, registers none)
        self.accepted = False
        self.answered: set[str] = set()
        # refused, by kind of call (None: the credential; the message, until when on
        # ``monotonic``): the calls of the passes under way are refused alike for
        # CREDENTIALS_RETRY seconds, not each sent (an App: not each a token exchange) — every
        # call after a 401, only calls of that kind after a 403 (a refused registration does
        # not stop the list or the unregistrations of other sets); the next client, made
        # after the backoff, asks (``refusals.py``), or is told what to withhold (``withhold``)
        self._refused: dict[str | None, tuple[str, float]] = {}

    def close(self) -> None:
        self._api.close()
        if self._app is not None:
            self._app.close()

    def vouches(self, call: str | None) -> bool:
        """Whether GitHub answered this client anything but a refusal: any call (``call``
        None), or a call of that kind (``refusals.Vouched``)."""
        return self.accepted if call is None else call in self.answered

    def withhold(self, calls: Collection[str], message: str, seconds: float) -> None:
        """Make no call of these kinds for ``seconds``: their permission was refused, and its
        backoff runs (``refusals.Withholding``)."""
        until = self._monotonic() + seconds
        with self._lock:
            for call in calls:
                self._refused[call] = (message, until)

    def take_over(self, old: object) -> None:
        """What the client this one replaces kept (the same scope: its credentials were read
        again): the runner list and its age, the runner groups, ETags, the rate limit last
        stated. The list is not read again because a Secret was."""
        if not isinstance(old, GitHub) or old.scope != self.scope:
            return
        with old._lock:
            listed, pages, groups = old._listed, old._pages, dict(old._groups)
        with self._lock:
            self._listed, self._pages, self._groups = listed, pages, groups
        self._api.http.cache = old._api.http.cache
        self._api.http.budget = old._api.http.budget
        self.outage.take_over(old.outage)

    # -- verbs --------------------------------------------------------------------------------
    def register(self, name: str, labels: Sequence[str], group: str | None) -> Registration:
        """A JIT config for runner ``name``. A stale registration of that name (left by a pod
        that was never created) is removed and the call made once more."""
        body = {"name": name, "runner_group_id": self._group_id(group),
                "labels": list(labels), "work_folder": "_work"}
        path = self.scope.path
        try:
            data = self._ask(self._api.generate_jitconfig, path, body)
        except RunnerNameTaken:
            stale = self.find(name)
            if stale is None:
                raise
            self.unregister(stale)  # RunnerBusy if a live runner owns the name: let it be
            data = self._ask(self._api.generate_jitconfig, path, body)
        try:
            return Registration(int(data["runner"]["id"]), str(data["encoded_jit_config"]))
        except (KeyError, TypeError, ValueError):
            raise PlatformError(f"GitHub POST {self.scope.runners_url}/generate-jitconfig: "
                                "the answer has no runner.id or encoded_jit_config") from None

    def unregister(self, runner_id: int) -> None:
        """Remove a registration; already gone is fine. ``RunnerBusy`` when it runs a job."""
        self._ask(self._api.delete_runner, self.scope.path, runner_id)
        with self._lock:
            if self._listed is not None and runner_id in self._listed[1]:
                read_at, listed = self._listed
                self._listed = (read_at, {i: r for i, r in listed.items() if i != runner_id})

    def find(self, name: str) -> int | None:
        """The id of the runner registered as ``name``, if there is one."""
        found = _runners(self._ask(self._api.runners, self.scope.path, name))
        return next((i for i, r in found.items() if r.name == name), None)

    def runners(self, max_age: float = LIST_MAX_AGE) -> Mapping[int, Registered]:
        """Every runner of the scope by id (status and busy), reused for ``max_age`` seconds
        (longer while the rate limit runs low: ``reuse``). Every page is asked for with its
        ETag: an unchanged page is a 304, which GitHub does not count against the limit."""
        return self.listed(max_age)[0]

    def listed(self, max_age: float = LIST_MAX_AGE) -> tuple[Mapping[int, Registered], float]:
        """``runners``, and how many seconds before now that list was read (from the moment
        its first page was asked for): a runner that came online since is not in it as such.
        The list is read-only, and never changes once returned."""
        with self._lock:
            if self._listed is not None:
                age = self._monotonic() - self._listed[0]
                if age < self.reuse(max_age):
                    return MappingProxyType(self._listed[1]), max(age, 0.0)
        read_at = self._monotonic()
        listed = self._ask(self._api.runners, self.scope.path)
        found = _runners(listed)
        with self._lock:
            self._listed = (read_at, found)
            self._pages = max(1, -(-len(listed) // PER_PAGE))
        return MappingProxyType(found), max(self._monotonic() - read_at, 0.0)

    def reuse(self, max_age: float) -> float:
        """How long a list serves a reader that asks for ``max_age``, given its size and what
        GitHub's last answer said of the rate limit (0: none, it is read now)."""
        if max_age <= 0:
            return 0.0
        age = max(max_age, self._pages * 3600 / LIST_BUDGET)
        budget = self._api.http.budget
        if budget is None or budget.limit <= 0 or budget.remaining >= LOW_BUDGET * budget.limit:
            return age
        if budget.remaining >= SCARCE_BUDGET * budget.limit:
            return age * 4
        return max(age * 4, budget.reset - self._clock())

    # -- plumbing -----------------------------------------------------------------------------
    def _group_id(self, group: str | None) -> int:
        # the Default group is id 1 in every org; `default` written in lower case means it
        if not group or group.lower() == "default" or self.scope.path.startswith("repos/"):
            return 1
        with self._lock:
            if group in self._groups:
                return self._groups[group]
        owner = "/".join(self.scope.path.split("/")[:2])
        groups = {g.get("name"): g.get("id") for g in self._ask(self._api.runner_groups, owner)
                  if isinstance(g, dict) and isinstance(g.get("id"), int)}
        found: int | None = groups.get(group)
        if found is None:
            names = sorted(str(name) for name in groups)
            shown = ", ".join(names[:20]) + (f", … ({len(names)} in all)" if len(names) > 20
                                             else "")
            raise InvalidRunnerSet(f"spec.github.runnerGroup {group!r} does not exist in "
                                   f"{self.scope.path} (its groups, names compared exactly: "
                                   f"{shown})")
        with self._lock:
            self._groups[group] = found
        return found

    def _ask(self, verb: Callable[..., T], *args: Any) -> T:
        """``verb`` of the GitHub client, its errors as the controller's; not sent while GitHub
        is given time after failing (``outage.py``). Any answer but a refusal says the
        credentials work (``accepted``)."""
        call = verb.__name__  # the kind of call: one method and path shape of the scope
        now = self._monotonic()
        for refused in (None, call):
            memo = self._refused.get(refused)
            if memo is not None and now < memo[1]:
                raise StillRefused(memo[0], memo[1] - now, refused)
        try:
            answer = self.outage.ask(lambda: verb(*args),
                                     lambda e: translate(e, call, self._credential))
        except StillRefused:
            raise
        except CredentialsError as exc:
            with self._lock:
                self._refused[exc.call] = (str(exc), self._monotonic() + CREDENTIALS_RETRY)
                # what was refused is not vouched for by an answer before the refusal (this
                # client serves on after a permission refused: ``Platforms.refused``)
                if exc.call is None:
                    self.accepted = False
                else:
                    self.answered = self.answered - {exc.call}
            raise
        except PlatformOutage:
            raise  # (no word on the credentials: a 5xx, no answer, a rate limit)
        except PlatformError:
            self._answered(call)  # a 404, a 409, a 422: answered to credentials that work
            raise
        self._answered(call)
        return answer

    def _answered(self, call: str) -> None:
        self.accepted = True
        if call not in self.answered:
            with self._lock:
                self.answered = {*self.answered, call}  # (copy on write: read unlocked)


def translate(exc: ApiError, call: str | None = None, credential: str = "") -> PlatformError:
    """The client's error as the controller's: the same message, a class to branch on. A 403
    refuses a permission, for ``call`` (the kind of call sent) alone; a 401 the credential. A
    refusal names ``credential`` (which Secret and key), when given."""
    message = str(exc)
    named = f" ({credential})" if credential else ""
    if isinstance(exc, (RateLimited, Unreachable, BadAnswer)) or exc.status >= 500:
        return PlatformOutage(message)
    if exc.status == 403 and "not accessible by" in exc.detail:
        return CredentialsError(message + _permission_hint(exc) + named, call)
    if exc.status == 403 and not isinstance(exc, Unsendable):
        return CredentialsError(message + named, call)
    if exc.status == 401 or isinstance(exc, Unsendable):
        return CredentialsError(message + named)
    if exc.status == 409:
        return RunnerNameTaken(message)
    if exc.status == 422 and exc.method == "DELETE":
        return RunnerBusy(message)
    if exc.status == 404 and exc.url.endswith("/generate-jitconfig"):
        # GitHub's 404 is also its answer to credentials that may not see the scope
        return PlatformError(f"{message} (check the set's spec.github.configURL, and that its "
                             "credentials — the token's owner or the App's installation — can "
                             "see that organization or repository and manage its runners)")
    return PlatformError(message)


def _permission_hint(exc: ApiError) -> str:
    """The permission GitHub's 403 "Resource not accessible by integration" (or "… by personal
    access token") wants, as docs/credentials.md lists it for the scope."""
    wanted = exc.headers.get("x-accepted-github-permissions")
    said = f"; GitHub asked for {wanted}" if wanted else ""
    if "/repos/" in exc.url:
        needed = "the repository permission Administration: Read and write"
    elif "/enterprises/" in exc.url:
        return (f" (enterprise runners take a classic token with manage_runners:enterprise{said}; "
                "docs/credentials.md)")
    else:
        needed = "the organization permission Self-hosted runners: Read and write"
    return (f" (the credentials lack {needed}{said}: grant it to the token, or to the GitHub App "
            "and accept it on the App's installation; docs/credentials.md)")


def _runners(listed: list[Any]) -> dict[int, Registered]:
    """GitHub's runners by id, as the controller's passes read them (the list kept is handed
    to them as it is: no conversion per pass)."""
    out = {}
    for raw in listed:
        if isinstance(raw, dict) and isinstance(raw.get("id"), int):
            labels = tuple(str(label.get("name")) for label in raw.get("labels") or []
                           if isinstance(label, dict) and label.get("name"))
            out[raw["id"]] = Registered(raw.get("status") == "online", bool(raw.get("busy")),
                                        str(raw.get("name", "")), labels)
    return out
