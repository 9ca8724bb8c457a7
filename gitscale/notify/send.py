"""Post the notifications after a push: one short attempt each, never an exception.

A failure (no secret, connection refused, a timeout, a non-2xx answer) is one line on stderr
naming the target by kind and host; the secret, the signature and a Flux hook path never appear.
"""
from __future__ import annotations

import functools
import ssl
from typing import Callable, Sequence
from urllib.parse import urlsplit

import click
import httpx

from gitscale.config.secrets import SecretError, read_secret
from gitscale.notify.payloads import NotReady, Pushed, request
from gitscale.config.notify_targets import Target
from gitscale.timeutil import format_time, utcnow

Log = Callable[[str], None]


def _stderr(message: str) -> None:
    click.echo(f"{format_time(utcnow())} {message}", err=True)


def notify_all(targets: Sequence[Target], pushed: Pushed, *,
               log: Log = _stderr) -> tuple[str, ...]:
    """Notify every target in order; returns the labels of those that accepted."""
    accepted = []
    # Loading CA certificates costs 0.1-0.4 s: only when a target speaks https, once a process.
    # With no https target no TLS can happen (redirects are not followed), so none is loaded.
    tls = any(t.url.lower().startswith("https:") for t in targets)
    with httpx.Client(follow_redirects=False, verify=_tls() if tls else False) as client:
        for target in targets:
            try:
                problem = _notify(client, target, pushed)
            except Exception as exc:  # noqa: BLE001 - a courtesy call must not fail a pass
                problem = f"unexpected {type(exc).__name__} (a bug: please report it)"
            if problem is None:
                accepted.append(target.label)
            else:
                log(f"notify {target.label} failed: {problem}; the engine's own poll still "
                    "applies")
    return tuple(accepted)


@functools.cache
def _tls() -> ssl.SSLContext:
    return httpx.create_ssl_context()


def _notify(client: httpx.Client, target: Target, pushed: Pushed) -> str | None:
    secret: str | None = None
    try:
        if target.secret is not None:
            what = "token" if target.kind == "flux" else "secret"
            secret = read_secret(target.secret, what)
        req = request(target, pushed, secret)
    except (SecretError, NotReady) as exc:
        return str(exc)
    try:
        response = client.post(req.url, content=req.body, headers=req.headers,
                               timeout=httpx.Timeout(target.timeout))
    except httpx.TimeoutException:
        return f"no answer within {target.timeout:g}s"
    except httpx.ConnectError as exc:
        return _clean(f"cannot connect ({_reason(exc)})", secret, req.url)
    except httpx.HTTPError as exc:
        return _clean(f"{type(exc).__name__}: {_reason(exc)}", secret, req.url)
    if 200 <= response.status_code < 300:
        return None
    if response.is_redirect:
        return (f"HTTP {response.status_code}: redirected (to https?); give the final URL "
                "(gitscale does not follow redirects with a signed body)")
    text = " ".join(response.text.split())[:160]
    return _clean(f"HTTP {response.status_code}" + (f": {text}" if text else ""), secret, req.url)


def _reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def _clean(message: str, secret: str | None, url: str) -> str:
    """No secret and no URL path in a log line, whatever a server or library echoed back."""
    message = message.replace(url, "<url>")
    path = urlsplit(url).path
    if len(path) > 1:
        message = message.replace(path, "/<path>")
    if secret and len(secret) >= 4:
        message = message.replace(secret, "***")
    return message
