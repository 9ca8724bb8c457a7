"""The ``notify:`` entries of gitscale.yaml, checked beyond their JSON Schema."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Literal, Mapping
from urllib.parse import urlsplit

from gitscale.errors import ConfigError
from gitscale.yamlio.read import Document

Kind = Literal["flux", "argocd", "webhook"]
DEFAULT_TIMEOUT = 5.0  # seconds per request: a pass must not wait long for a courtesy call
FLUX_HOOK = "/hook/"  # notification-controller's receiver path prefix
ARGOCD_HOOK = "/api/webhook"


@dataclass(frozen=True)
class Target:
    kind: Kind
    url: str  # where to POST; for flux with ``receiver``, the webhook-receiver's base URL
    secret: Mapping[str, str] | None  # {env: NAME} or {file: PATH}; read at send time
    receiver: tuple[str, str] | None = None  # flux: (name, namespace) → the path is derived
    repo_url: str | None = None  # argocd: the repo URL the Application uses
    timeout: float = DEFAULT_TIMEOUT
    where: str | None = None  # FILE:LINE of the secret's reference, for an error reading it
    verify_tls: bool = True  # False: insecureSkipTLSVerify, for this entry alone

    @property
    def label(self) -> str:
        """How logs name the target: kind and host only. A Flux hook path is derived from the
        receiver's token, so no path is ever printed."""
        parts = urlsplit(self.url)
        return f"{self.kind} ({parts.scheme}://{parts.netloc})"


def parse_targets(document: Document, source: str) -> tuple[Target, ...]:
    """``document.data["notify"]`` (already schema-valid) as Targets."""
    targets = []
    for index, item in enumerate(document.data.get("notify") or []):
        (kind, settings), = item.items()

        def fail(key: str, message: str, kind: str = kind, index: int = index) -> ConfigError:
            return ConfigError(source, f"notify[{index}] {kind}.{key}: {message}",
                               document.line_of(["notify", index, kind, key]))

        target = _target(kind, settings, fail)
        insecure = settings.get("insecureSkipTLSVerify", False)
        if insecure and urlsplit(target.url).scheme != "https":
            raise fail("insecureSkipTLSVerify", "applies to an https:// url only (plain http "
                       "has no certificate to verify)")
        key = "token" if kind == "flux" else "secret"
        line = document.line_of(["notify", index, kind, key]) if key in settings else None
        targets.append(replace(target, where=f"{source}:{line}" if line else None,
                               verify_tls=not insecure))
    return tuple(targets)


def _target(kind: Kind, raw: Mapping[str, Any], fail: Any) -> Target:
    url = raw["url"]
    path = urlsplit(url).path
    timeout = float(raw["timeout"][:-1]) if "timeout" in raw else DEFAULT_TIMEOUT
    if kind == "flux":
        receiver = raw.get("receiver")
        if receiver is not None:
            if path not in ("", "/"):
                raise fail("url", "give either the Receiver's full /hook/… URL or `receiver:` "
                           "with the webhook-receiver's base URL (no path), not both")
            return Target(kind, url.rstrip("/"), raw["token"],
                          receiver=(receiver["name"], receiver["namespace"]), timeout=timeout)
        if not path.startswith(FLUX_HOOK) or len(path) <= len(FLUX_HOOK):
            raise fail("url", "must be the Receiver's webhook URL (…/hook/<digest>: `kubectl get "
                       "receiver NAME -o jsonpath={.status.webhookPath}`), or add `receiver: "
                       "{name: …, namespace: …}` to derive the path from the token")
        return Target(kind, url, raw["token"], timeout=timeout)
    if kind == "argocd":
        repo_url = raw.get("repoURL")
        if repo_url is not None:
            if re.search(r"://[^/]*@", repo_url) and not repo_url.startswith("ssh://"):
                raise fail("repoURL", "must not carry credentials (Argo CD matches host and path "
                           "only)")
            if web_url(repo_url) is None:
                raise fail("repoURL", f"{repo_url!r} is not a git URL (https://host/org/repo.git, "
                           "ssh://git@host/org/repo.git or git@host:org/repo.git)")
        if path in ("", "/"):
            url = url.rstrip("/") + ARGOCD_HOOK
        return Target(kind, url, raw.get("secret"), repo_url=repo_url, timeout=timeout)
    return Target(kind, url, raw.get("secret"), timeout=timeout)


_SCP = re.compile(r"^(?:[\w.-]+@)?(?P<host>[\w.-]+):(?!//)(?P<path>[^\s]+)$")


def web_url(repo_url: str) -> str | None:
    """The repository's web address as a GitHub push event's ``html_url`` gives it
    (``https://host/org/repo``, no ``.git``, no user), or None if ``repo_url`` is not a URL.

    Argo CD turns that address into a pattern of host and path that also matches the ssh and
    ``.git`` spellings of the same repository, so one form serves every Application."""
    parts = urlsplit(repo_url)
    if parts.scheme in ("http", "https", "ssh", "git") and parts.hostname:
        scheme = parts.scheme if parts.scheme in ("http", "https") else "https"
        port = f":{parts.port}" if parts.port and scheme == parts.scheme else ""
        host, path = f"{parts.hostname}{port}", parts.path
    else:
        match = _SCP.match(repo_url)
        if match is None:
            return None
        scheme, host, path = "https", match.group("host"), "/" + match.group("path")
    path = path.rstrip("/").removesuffix(".git").rstrip("/")
    if path in ("", "/"):
        return None
    return f"{scheme}://{host}{path}"


def without_credentials(url: str) -> str:
    """``url`` with any user:password@ of an http(s) URL removed (ssh users are not secrets)."""
    return re.sub(r"(?i)^(https?://)[^/@]*@", r"\1", url)
