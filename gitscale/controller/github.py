"""GitHub's side of a runner: just-in-time registration, the runner list, unregistration.

The only module that talks to GitHub's REST API (httpx). The API base comes from the RunnerSet's
``configURL``: github.com → api.github.com, ``*.ghe.com`` → ``api.<host>``, any other host is
GitHub Enterprise Server (``<host>/api/v3``); tests point ``configURL`` at a loopback server.
Credentials come from the Secret named in ``spec.github.credentialsSecret`` with the key names
actions-runner-controller uses (``github_token``, or ``github_app_id``,
``github_app_installation_id`` and ``github_app_private_key``). They are never logged, and no
message built here contains a header or a token.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urlsplit

import httpx

from gitscale.controller.errors import (
    CredentialsError,
    InvalidRunnerSet,
    PlatformError,
    RunnerBusy,
    RunnerNameTaken,
)
from gitscale.controller.platform import LIST_MAX_AGE, Registration
from gitscale.clients.github_app import InstallationToken

HEADERS = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28",
           "User-Agent": "gitscale-controller"}


@dataclass(frozen=True)
class Scope:
    """Where runners register: ``orgs/NAME``, ``repos/OWNER/REPO`` or ``enterprises/NAME``."""

    api: str
    path: str

    @property
    def runners_url(self) -> str:
        return f"{self.api}/{self.path}/actions/runners"


def scope_of(config_url: str) -> Scope:
    url = urlsplit(config_url)
    parts = [p for p in url.path.split("/") if p]
    host = url.netloc.lower()
    if host in ("github.com", "www.github.com"):
        api = "https://api.github.com"
    elif host.endswith(".ghe.com"):
        api = f"{url.scheme}://api.{host}"
    else:
        api = f"{url.scheme}://{url.netloc}/api/v3"
    if len(parts) == 2 and parts[0] == "enterprises":
        return Scope(api, f"enterprises/{parts[1]}")
    if len(parts) == 1:
        return Scope(api, f"orgs/{parts[0]}")
    if len(parts) == 2:
        return Scope(api, f"repos/{parts[0]}/{parts[1]}")
    raise InvalidRunnerSet(f"spec.github.configURL {config_url!r} is not an organization, "
                           "repository or enterprise URL (e.g. https://github.com/acme)")


@dataclass(frozen=True)
class Credentials:
    token: str | None = field(default=None, repr=False)
    app_id: str | None = None
    installation_id: str | None = None
    private_key: str | None = field(default=None, repr=False)


def credentials_from(data: Mapping[str, str], source: str) -> Credentials:
    """Read credentials from a Secret's (decoded) data; ``source`` names it in errors."""
    if data.get("github_token"):
        return Credentials(token=data["github_token"].strip())
    app = {k: data.get(f"github_app_{k}", "").strip()
           for k in ("id", "installation_id", "private_key")}
    if app["id"] and app["private_key"]:
        return Credentials(app_id=app["id"], installation_id=app["installation_id"] or None,
                           private_key=app["private_key"])
    raise CredentialsError(f"{source}: needs the key github_token, or github_app_id and "
                           "github_app_private_key (and optionally github_app_installation_id)")


@dataclass(frozen=True)
class RegisteredRunner:
    id: int
    name: str
    online: bool
    busy: bool
    labels: tuple[str, ...] = ()


class GitHub:
    """One scope and one set of credentials. Thread-safe: passes share it."""

    def __init__(self, scope: Scope, credentials: Credentials, *, timeout: float = 15.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.scope = scope
        self._credentials = credentials
        self._clock = clock
        self._http = httpx.Client(headers=HEADERS, timeout=timeout)
        self._lock = threading.Lock()
        self._app = None if credentials.token else InstallationToken(
            scope.api, credentials.app_id or "", lambda: credentials.private_key or "",
            installation=credentials.installation_id, owner="/".join(scope.path.split("/")[:3]),
            error=CredentialsError, key_name="github_app_private_key", timeout=timeout,
            clock=clock)
        self._groups: dict[str, int] = {}
        self._listed: tuple[float, dict[int, RegisteredRunner]] | None = None

    def close(self) -> None:
        self._http.close()

    # -- verbs --------------------------------------------------------------------------------
    def register(self, name: str, labels: Sequence[str], group: str | None) -> Registration:
        """A JIT config for runner ``name``. A stale registration of that name (left by a pod
        that was never created) is removed and the call made once more."""
        body = {"name": name, "runner_group_id": self._group_id(group),
                "labels": list(labels), "work_folder": "_work"}
        try:
            data = self._call("POST", f"{self.scope.runners_url}/generate-jitconfig", json=body)
        except RunnerNameTaken:
            stale = self.find(name)
            if stale is None:
                raise
            self.unregister(stale.id)  # RunnerBusy if a live runner owns the name: let it be
            data = self._call("POST", f"{self.scope.runners_url}/generate-jitconfig", json=body)
        try:
            return Registration(int(data["runner"]["id"]), str(data["encoded_jit_config"]))
        except (KeyError, TypeError, ValueError):
            raise PlatformError(f"GitHub POST {self.scope.runners_url}/generate-jitconfig: "
                                "the answer has no runner.id or encoded_jit_config") from None

    def unregister(self, runner_id: int) -> None:
        """Remove a registration; already gone is fine. ``RunnerBusy`` when it runs a job."""
        self._call("DELETE", f"{self.scope.runners_url}/{runner_id}", missing_ok=True)
        with self._lock:
            if self._listed is not None:
                self._listed[1].pop(runner_id, None)

    def find(self, name: str) -> RegisteredRunner | None:
        data = self._call("GET", self.scope.runners_url, params={"name": name})
        found = [r for r in _runners(data) if r.name == name]
        return found[0] if found else None

    def runners(self, max_age: float = LIST_MAX_AGE) -> dict[int, RegisteredRunner]:
        """Every runner of the scope by id (status and busy), reused for ``max_age`` seconds."""
        with self._lock:
            if self._listed is not None and self._clock() - self._listed[0] < max_age:
                return self._listed[1]
        found: dict[int, RegisteredRunner] = {}
        page = 1
        while True:
            data = self._call("GET", self.scope.runners_url,
                              params={"per_page": 100, "page": page})
            batch = _runners(data)
            found.update((r.id, r) for r in batch)
            if len(batch) < 100:
                break
            page += 1
        with self._lock:
            self._listed = (self._clock(), found)
        return found

    # -- plumbing -----------------------------------------------------------------------------
    def _group_id(self, group: str | None) -> int:
        if not group or group == "Default" or self.scope.path.startswith("repos/"):
            return 1
        with self._lock:
            if group in self._groups:
                return self._groups[group]
        owner = "/".join(self.scope.path.split("/")[:2])
        data = self._call("GET", f"{self.scope.api}/{owner}/actions/runner-groups",
                          params={"per_page": 100, "visible_to_repository": None})
        groups = {g.get("name"): g.get("id") for g in data.get("runner_groups", [])
                  if isinstance(g, dict) and isinstance(g.get("id"), int)}
        found: int | None = groups.get(group)
        if found is None:
            raise InvalidRunnerSet(f"spec.github.runnerGroup {group!r} does not exist in "
                                   f"{self.scope.path}")
        with self._lock:
            self._groups[group] = found
        return found

    def _call(self, method: str, url: str, *, missing_ok: bool = False,
              **kw: Any) -> dict[str, Any]:
        if "params" in kw:
            kw["params"] = {k: v for k, v in kw["params"].items() if v is not None}
        where = f"GitHub {method} {url}"
        auth = self._auth()
        try:
            response = self._http.request(method, url, headers=auth, **kw)
        except httpx.HTTPError as exc:
            raise PlatformError(f"{where}: {type(exc).__name__}: no answer") from None
        if response.status_code == 404 and missing_ok:
            return {}
        if response.status_code == 422 and method == "DELETE":
            raise RunnerBusy(f"{where}: 422 {_message(response)}")
        if response.status_code == 409:
            raise RunnerNameTaken(f"{where}: 409 {_message(response)}")
        if response.status_code in (401, 403):
            raise CredentialsError(f"{where}: {response.status_code} {_message(response)}")
        if response.status_code >= 400:
            raise PlatformError(f"{where}: {response.status_code} {_message(response)}")
        if response.status_code == 204 or not response.content:
            return {}
        try:
            data = response.json()
        except ValueError:
            raise PlatformError(f"{where}: the answer is not JSON") from None
        return data if isinstance(data, dict) else {"items": data}

    def _auth(self) -> dict[str, str]:
        if self._credentials.token:
            return {"Authorization": f"Bearer {self._credentials.token}"}
        assert self._app is not None
        return {"Authorization": f"Bearer {self._app.get()}"}


def _runners(data: Mapping[str, Any]) -> list[RegisteredRunner]:
    out = []
    for raw in data.get("runners", []):
        if isinstance(raw, dict) and isinstance(raw.get("id"), int):
            labels = tuple(str(label.get("name")) for label in raw.get("labels") or []
                           if isinstance(label, dict) and label.get("name"))
            out.append(RegisteredRunner(raw["id"], str(raw.get("name", "")),
                                        raw.get("status") == "online", bool(raw.get("busy")),
                                        labels))
    return out


def _message(response: httpx.Response) -> str:
    try:
        message = response.json().get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message or response.reason_phrase)[:200]
