"""The request each engine verifies, built from values only (no I/O, no clock).

- Flux notification-controller, Receiver of type ``generic-hmac``: any body, and
  ``X-Signature: sha256=<hex HMAC-SHA256 of the raw body keyed by the receiver token>``. The
  URL is ``/hook/`` + hex SHA-256 of token + receiver name + namespace (the Receiver's
  ``status.webhookPath``). The JSON body is there for a Receiver's CEL ``resourceFilter``.
- Argo CD ``/api/webhook``: a GitHub ``push`` event (``X-GitHub-Event: push``), signed with
  ``X-Hub-Signature-256`` (and the older ``X-Hub-Signature``, SHA-1, which Argo CD releases
  before the switch to SHA-256 check) by ``webhook.github.secret``. Argo CD reads ``ref`` (the
  branch), ``repository.html_url`` (matched against each Application's repoURL by host and
  path), ``repository.default_branch`` (for Applications that track HEAD), ``before``/``after``
  and the files the ``commits`` added, modified or removed (for the
  ``argocd.argoproj.io/manifest-generate-paths`` annotation).
- A plain webhook: the same facts as small JSON; ``X-Gitscale-Signature-256`` when a secret is
  configured.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from dataclasses import dataclass
from typing import Any

from gitscale import __version__
from gitscale.config.notify_targets import FLUX_HOOK, Target, web_url

BOT_NAME, BOT_EMAIL = "gitscale", "gitscale@users.noreply.gitscale.dev"


@dataclass(frozen=True)
class Pushed:
    """What landed: one commit on ``branch`` of ``repo_url``."""

    repo_url: str | None  # the remote pushed to, without credentials; None for a local path
    branch: str
    before: str
    after: str
    subject: str
    time: str  # the commit's date, RFC 3339
    added: tuple[str, ...]
    modified: tuple[str, ...]
    sets: tuple[dict[str, Any], ...] = ()  # name, replicas, previous, patch, reason


@dataclass(frozen=True)
class Request:
    url: str
    headers: dict[str, str]
    body: bytes


class NotReady(Exception):
    """The request cannot be built (no repo URL to announce); the message says what to set."""


def request(target: Target, pushed: Pushed, secret: str | None) -> Request:
    if target.kind == "flux":
        return flux(target, pushed, secret or "")
    if target.kind == "argocd":
        return argocd(target, pushed, secret)
    return webhook(target, pushed, secret)


def sign(key: str, body: bytes, digest: str = "sha256") -> str:
    return f"{digest}=" + hmac.new(key.encode(), body, digest).hexdigest()


def flux_hook_path(token: str, name: str, namespace: str) -> str:
    return FLUX_HOOK + hashlib.sha256(f"{token}{name}{namespace}".encode()).hexdigest()


def flux(target: Target, pushed: Pushed, token: str) -> Request:
    url = target.url
    if target.receiver is not None:
        url += flux_hook_path(token, *target.receiver)
    body = _json(_summary(pushed))
    return Request(url, {**_headers(), "X-Signature": sign(token, body)}, body)


def argocd(target: Target, pushed: Pushed, secret: str | None) -> Request:
    repo = target.repo_url or pushed.repo_url
    html_url = web_url(repo) if repo else None
    if html_url is None:
        raise NotReady("no repository URL to announce: gitscale pushed to a local path; set "
                       "`repoURL:` to the URL of the Argo CD Application's source")
    body = _json(push_event(pushed, html_url, target.repo_url or pushed.repo_url or html_url))
    headers = {**_headers(), "X-GitHub-Event": "push", "X-GitHub-Delivery": str(uuid.uuid4())}
    if secret:
        headers["X-Hub-Signature-256"] = sign(secret, body)
        headers["X-Hub-Signature"] = sign(secret, body, "sha1")
    return Request(target.url, headers, body)


def push_event(pushed: Pushed, html_url: str, clone_url: str) -> dict[str, Any]:
    """A GitHub ``push`` event with the fields Argo CD reads, each of the JSON type GitHub
    sends (Argo CD decodes into typed structs: a number where a string belongs fails)."""
    owner, _, name = html_url.split("://", 1)[1].split("/", 1)[1].rpartition("/")
    person = {"name": BOT_NAME, "email": BOT_EMAIL, "username": BOT_NAME}
    commit = {
        "id": pushed.after, "tree_id": "", "distinct": True, "message": pushed.subject,
        "timestamp": pushed.time, "url": f"{html_url}/commit/{pushed.after}",
        "author": person, "committer": person,
        "added": list(pushed.added), "removed": [], "modified": list(pushed.modified),
    }
    return {
        "ref": f"refs/heads/{pushed.branch}",
        "before": pushed.before,
        "after": pushed.after,
        "created": False,
        "deleted": False,
        "forced": False,
        "base_ref": None,
        "compare": f"{html_url}/compare/{pushed.before[:12]}...{pushed.after[:12]}",
        "commits": [commit],
        "head_commit": commit,
        "repository": {
            "name": name,
            "full_name": f"{owner}/{name}" if owner else name,
            "html_url": html_url,
            "clone_url": clone_url,
            # The branch gitscale pushed is reported as the default one so that Applications
            # tracking HEAD refresh too; for any other Application an extra refresh is harmless.
            "default_branch": pushed.branch,
        },
        "pusher": {"name": BOT_NAME, "email": BOT_EMAIL},
        "sender": {"login": BOT_NAME, "type": "Bot"},
    }


def webhook(target: Target, pushed: Pushed, secret: str | None) -> Request:
    body = _json(_summary(pushed))
    headers = _headers()
    if secret:
        headers["X-Gitscale-Signature-256"] = sign(secret, body)
    return Request(target.url, headers, body)


def _summary(pushed: Pushed) -> dict[str, Any]:
    return {"event": "push", "repository": pushed.repo_url, "branch": pushed.branch,
            "before": pushed.before, "after": pushed.after, "subject": pushed.subject,
            "time": pushed.time, "files": [*pushed.added, *pushed.modified],
            "sets": list(pushed.sets)}


def _headers() -> dict[str, str]:
    return {"Content-Type": "application/json", "User-Agent": f"gitscale/{__version__}"}


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()
