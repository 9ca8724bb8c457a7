"""Post the notifications after a push: one short attempt each, never an exception.

A failure (no secret, connection refused, a timeout, a non-2xx answer) is one line on stderr
(in `run` and `serve`, once per streak of the same failure: ``failures``) naming the target by kind and host, and the cause when there was no answer (the one HTTP
client's, ``gitscale.clients.http``); the secret, the signature and a Flux hook path never
appear.

Each target's secret is read at each send, never kept: ``{file: PATH}``, or ``{env: NAME}``
through ``NAME_FILE`` (``config/secrets.py``; the in-cluster scaler's pods point
``FLUX_RECEIVER_TOKEN_FILE`` / ``ARGOCD_WEBHOOK_SECRET_FILE`` into the Secret volume of
``gitscale-notify``). A rotated file therefore signs the next notification of a running ``run``
or ``serve``, with no stat check needed (a notification follows a push: a small read per push).
An engine that refuses the request (401/403, or Flux's and Argo CD's 400 for a signature that
does not verify) is one line, never retried: the next push reads the file again.
"""
from __future__ import annotations

import re
from typing import Protocol, Sequence
from urllib.parse import urlsplit

from gitscale import logline
from gitscale.clients.errors import Unreachable
from gitscale.clients.http import HttpClient, tls_context
from gitscale.config.secrets import SecretError, SecretRef, declared, read_secret, secret_file, via
from gitscale.notify.failures import POLL_STILL, NotifyStreaks
from gitscale.notify.payloads import NotReady, Pushed, Request, request
from gitscale.redact import redact
from gitscale.config.notify_targets import Target

class Log(Protocol):
    """Where the lines go (``logline.log``): a failure at level "warning" (in a JSON log)."""

    def __call__(self, message: str, *, level: logline.Level | None = None) -> None: ...


def notify_all(targets: Sequence[Target], pushed: Pushed, *, log: Log = logline.log,
               told: NotifyStreaks | None = None) -> tuple[str, ...]:
    """Notify every target in order; returns the labels of those that accepted. ``told``: a
    long-running process's streaks, so a failure that repeats is said once per streak (none:
    each failure is said)."""
    accepted = []
    # Loading CA certificates costs 0.1-0.4 s: only when a target speaks https and verifies
    # it, once a process. With none, no verified TLS can happen (redirects are not followed).
    tls = any(t.url.lower().startswith("https:") and t.verify_tls for t in targets)
    client = HttpClient(name="notify", retries=0, follow_redirects=False,
                        verify=tls_context() if tls else False)
    # insecureSkipTLSVerify: a client of its own, so no other target loses verification
    unverified = HttpClient(name="notify", retries=0, follow_redirects=False, verify=False) \
        if any(not t.verify_tls for t in targets) else None
    try:
        for target in targets:
            try:
                problem = _notify(client if target.verify_tls or unverified is None
                                  else unverified, target, pushed)
            except Exception as exc:  # noqa: BLE001 - a courtesy call must not fail a pass
                problem = f"unexpected {type(exc).__name__} (a bug: please report it)"
            if problem is None:
                accepted.append(target.label)
                said = told.sent(target.label) if told is not None else None
            else:
                said = told.failed(target.label, problem) if told is not None else \
                    f"notify {target.label} failed: {problem}; {POLL_STILL}"
            if said is not None:  # a failing target degrades the push: a warning in JSON
                log(said, level="info" if problem is None else "warning")
    finally:
        client.close()
        if unverified is not None:
            unverified.close()
    return tuple(accepted)


def _notify(client: HttpClient, target: Target, pushed: Pushed) -> str | None:
    secret: str | None = None
    try:
        if target.secret is not None:
            what = "token" if target.kind == "flux" else "secret"
            secret = read_secret(target.secret, what)
        req = request(target, pushed, secret)
    except SecretError as exc:  # at the config line that names it
        return f"{target.where}: {exc}" if target.where else str(exc)
    except NotReady as exc:
        return str(exc)
    try:
        answer = client.send("POST", req.url, content=req.body, headers=req.headers,
                             timeout=target.timeout)
    except Unreachable as exc:
        if exc.overdue:  # (it answered, too slowly)
            return _clean(f"answer too slow ({exc.cause})", secret, req)
        if exc.timed_out:
            return _clean(f"no answer within {target.timeout:g}s ({exc.cause})", secret, req)
        return _clean(f"cannot connect ({exc.cause})", secret, req)
    if 200 <= answer.status < 300:
        return None
    if answer.status in (301, 302, 303, 307, 308) and "location" in answer.headers:
        return (f"HTTP {answer.status}: redirected (to https?); give the final URL "
                "(gitscale does not follow redirects with a signed body)")
    # cleaned before it is cut: a cut could leave the start of a signature no longer whole
    text = _clean(" ".join(answer.text.split()), secret, req)
    if len(text) > ANSWER_SHOWN:
        text = text[:ANSWER_SHOWN] + "…"
    return f"HTTP {answer.status}" + (f": {text}" if text else "") + _refused(target, answer.status)


def _refused(target: Target, status: int) -> str:
    """For a refusal (401/403; a 400, Argo CD's and Flux's answer to a signature that does not
    verify) of a target with a secret: which one, as gitscale.yaml declares it and where (the
    person paged must not map a URL back to a credential by hand)."""
    if status not in (400, 401, 403) or target.secret is None:
        return ""
    ref = SecretRef.parse(target.secret)
    what = "token" if target.kind == "flux" else "secret"
    # (a 400 may be something else: said as a possibility)
    lead = f" (if the signature did not verify: the {what}" if status == 400 else f" (the {what}"
    at = f" at {target.where}" if target.where else ""
    # (a variable's value is the process's: reading it again is no fix)
    if secret_file(ref) is None:
        return (f"{lead} from {declared(ref)}{at}: an environment variable, "
                "a new value needs a restart)")
    return f"{lead} from {declared(ref)}{via(ref)}{at}, read again for each notification)"


ANSWER_SHOWN = 160  # characters of an error answer in the log line
# A run of hex digits: an echoed signature, whole or cut (shorter runs say nothing of it).
_HEX_RUN = re.compile(r"[0-9a-fA-F]{8,}")


def _clean(message: str, secret: str | None, req: Request) -> str:
    """No secret, no URL path and no signature we sent in a log line, whatever a server or
    library echoed back (Argo CD and Flux quote the signature they could not verify). The
    secret, and every other the process holds, in each form an echo may take (JSON- or
    Python-escaped: ``redact``); the URL and its path first, as they were sent."""
    message = message.replace(req.url, "<url>")
    path = urlsplit(req.url).path
    if len(path) > 1:
        message = message.replace(path, "/<path>")
    message = redact(message, [secret] if secret else [])
    digests = [value.partition("=")[2].lower() or value.lower()
               for name, value in req.headers.items() if "signature" in name.lower()]
    if digests:
        message = _HEX_RUN.sub(lambda m: "***" if any(m.group().lower() in d for d in digests)
                               else m.group(), message)
    return message
