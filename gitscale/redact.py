"""Credentials out of every message gitscale prints: URLs' user info (``https://user:pw@…`` and
scp-style ``user:pw@host:repo``), credential-like query parameters (``?token=…``), and the
values of the secrets gitscale holds, wherever a server or git echoes them back — as they are,
or escaped the way Python, JSON or an HTTP library shows them (``'ghp_a\\nb'``, ``b'\\xc3'``,
``\\u00e9``). Also what makes a credential unfit for an HTTP header, said without its value."""
from __future__ import annotations

import json
import re
from typing import Iterable

MASK = "***"
_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]*@")
# scp-style: user:secret@host:path (the user name is kept, the secret is not)
_SCP_USERINFO = re.compile(r"(?<![\w.+/:-])(?P<user>[\w.+-]+):[^\s/@:]+@(?=[\w.-]+:)")
# ?token=, &access_token=, ?private_token=, ?api_key=, ?sig= (signed URLs), ?password= ...
_QUERY_SECRET = re.compile(
    r"(?i)(?P<name>[?&;][\w.-]*(?:token|secret|passw(?:or)?d|pwd|key|sig|signature|auth"
    r"|credential)s?[\w.-]*=)[^&#\s'\"<>]+")
SHORTEST = 4  # shorter "secrets" would mask ordinary words


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with user info, credential query values and each of ``secrets`` masked."""
    text = _USERINFO.sub(rf"\g<scheme>{MASK}@", text)
    text = _SCP_USERINFO.sub(rf"\g<user>:{MASK}@", text)
    text = _QUERY_SECRET.sub(rf"\g<name>{MASK}", text)
    forms = {form for secret in secrets for form in secret_forms(secret)}
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, MASK)
    return text


def secret_forms(secret: str) -> set[str]:
    """Every way ``secret`` may show in an error's text: itself, its ``repr()`` and
    ``ascii()`` (an exception that quotes a header, ``'Bearer ghp_a\\nb'``), the repr of its
    UTF-8 bytes (``b'ghp_\\xc3\\xa9'``: h11 and httpx quote bytes), its JSON string, and each line
    of one that spans lines. Forms shorter than ``SHORTEST`` are left out: they would mask
    ordinary words."""
    if len(secret) < SHORTEST:
        return set()
    forms = {secret, repr(secret)[1:-1], ascii(secret)[1:-1], json.dumps(secret)[1:-1],
             repr(secret.encode("utf-8", "surrogateescape"))[2:-1]}
    forms.update(line for line in secret.splitlines() if len(line) >= 2 * SHORTEST)
    return {form for form in forms if len(form) >= SHORTEST}


def header_problem(value: str) -> str | None:
    """What keeps ``value`` (a token) out of an HTTP header, in words that do not show it:
    "contains a newline", "is not ASCII"…; None when it may be sent. A header's value is
    visible ASCII; a token has no whitespace either (a pasted line break or a space is a
    broken token, and a newline would end the header)."""
    for char in value:
        if char == "\n":
            return "contains a newline"
        if char == "\r":
            return "contains a carriage return"
        if not char.isascii():
            return "is not ASCII"
        if char in " \t":
            return "contains whitespace"
        if not char.isprintable():
            return "contains a control character"
    return None


def has_credentials(url: str) -> bool:
    """Does this repo URL carry a credential (user info with a password, a bare user name over
    HTTP(S) — often a token —, or a credential query parameter)?"""
    if re.match(r"(?i)^https?://[^/]*@", url) or re.search(r"://[^/@]*:[^/@]*@", url):
        return True
    if _SCP_USERINFO.match(url):
        return True
    return bool(_QUERY_SECRET.search(url))
