"""Credentials out of every message gitscale prints: URLs' user info (``https://user:pw@…`` and
scp-style ``user:pw@host:repo``), credential-like query parameters (``?token=…``), and the
values of the secrets gitscale holds, wherever a server or git echoes them back."""
from __future__ import annotations

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
    for secret in sorted({s for s in secrets if len(s) >= SHORTEST}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def has_credentials(url: str) -> bool:
    """Does this repo URL carry a credential (user info with a password, a bare user name over
    HTTP(S) — often a token —, or a credential query parameter)?"""
    if re.match(r"(?i)^https?://[^/]*@", url) or re.search(r"://[^/@]*:[^/@]*@", url):
        return True
    if _SCP_USERINFO.match(url):
        return True
    return bool(_QUERY_SECRET.search(url))
