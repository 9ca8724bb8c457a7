"""Credentials out of every message gitscale prints: URLs' user info (``https://user:pw@…`` and
scp-style ``user:pw@host:repo``), credential-like query parameters (``?token=…``), tokens known
by their shape (GitHub's ``ghp_…``, Buildkite's ``bkua_…``, JWTs), and the
values of the secrets gitscale holds, wherever a server or git echoes them back — as they are,
or escaped the way Python, JSON, an HTTP library or a URL shows them (``'ghp_a\\nb'``,
``b'\\xc3'``, ``\\u00e9``, ``a%2Fb``). Also what makes a credential unfit for an HTTP header,
said without its value.

The secrets are one registry for the process: the variables gitscale documents as credentials
(read at each call: whether or not this process used them, a server hook may echo one), the
content of the file each one's ``_FILE`` variable names (``GITSCALE_GIT_TOKEN_FILE``,
``GITHUB_TOKEN_FILE``…), and every value read as a secret (``hold``: what
gitscale.yaml names, ``serve``'s webhook secret, the controller's credentials Secrets, a GitHub
App's installation tokens). What ``hold`` keeps is bounded: the ``HELD`` values held most
recently (a value held again counts as new), so that a long-running process that re-reads
rotated secrets, or mints an App token an hour, does not grow without end; the secrets in use
are held again each time they are read (each pass, each credentials re-read), and stay.
Git's output, logs, errors and crash reports are all masked through ``redact``.
"""
from __future__ import annotations

import functools
import json
import os
import re
import stat
import threading
from typing import Iterable
from urllib.parse import quote, quote_plus

MASK = "***"
# (anchored at "://", not at the scheme: a scheme pattern is tried at every letter of a long
# word and scans it to its end each time, which made masking a 200,000-letter message take
# minutes; the scheme itself is kept as it is)
_USERINFO = re.compile(r"(?<=://)[^/@\s]*@")
# scp-style: user:secret@host:path (the user name is kept, the secret is not)
_SCP_USERINFO = re.compile(r"(?<![\w.+/:-])(?P<user>[\w.+-]+):[^\s/@:]+@(?=[\w.-]+:)")
# ?token=, &access_token=, ?private_token=, ?api_key=, ?sig= (signed URLs), ?password= ...
_QUERY_SECRET = re.compile(
    r"(?i)(?P<name>[?&;][\w.-]*(?:token|secret|passw(?:or)?d|pwd|key|sig|signature|auth"
    r"|credential)s?[\w.-]*=)[^&#\s'\"<>]+")
# Tokens known by their shape, masked even when this process never read them (a token pasted
# into a wrong option, a server's echo of another credential): GitHub's (ghp_, gho_, ghu_,
# ghs_, ghr_ and fine-grained github_pat_), Buildkite's API access tokens (bkua_), and JWTs (a
# GitHub App's, a Kubernetes service account's: base64url of '{"' starts header and payload).
# At a word's start, or right after an escape that glues it to a word: a URL's or a form's %XX
# (``Bearer%20ghp_…``, ``token%3Aghp_…``) and a repr's ``\n``, ``\r`` or ``\t``
_TOKEN_SHAPES = re.compile(
    r"(?:\b|(?<=%[0-9A-Fa-f]{2})|(?<=\\[nrt]))(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{30,}|bkua_[A-Za-z0-9]{30,}"
    r"|eyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]{8,})")
SHORTEST = 4  # shorter "secrets" would mask ordinary words
# The variables gitscale documents as holding a credential (README, "Help"), and the one that
# names a file holding one.
SECRET_ENV = ("GITSCALE_GIT_TOKEN", "GITHUB_TOKEN", "BUILDKITE_AGENT_TOKEN",
              "GITHUB_WEBHOOK_SECRET")
SECRET_FILE_ENV = "GITSCALE_GIT_TOKEN_FILE"
# ... and the ``_FILE`` of each (``files.variable_file``: ``NAME_FILE`` names a file holding
# NAME's value), the git token's among them
SECRET_FILES = tuple(f"{name}_FILE" for name in SECRET_ENV)
_FILE_LIMIT = 64 * 1024  # a token file is small; a bigger "token" is not read for masking
HELD = 256  # distinct secrets ``hold`` keeps, the most recently held
# The secret values this process has read (``hold``), the least recently held first; a lock:
# ``hold`` is called from worker threads, and its eviction is more than one step.
_held: dict[str, None] = {}
_lock = threading.Lock()


def hold(value: str) -> str:
    """Remember ``value``, a secret this process has read, so that every ``redact`` masks it
    from now on (in each of its ``secret_forms``), until ``HELD`` other values have been held
    since (the least recently held goes first). Returns it."""
    secret = value.strip()
    if len(secret) >= SHORTEST:
        with _lock:
            _held.pop(secret, None)  # held again: the most recent
            _held[secret] = None
            while len(_held) > HELD:
                del _held[next(iter(_held))]
    return value


def forget_held() -> None:
    """Forget what ``hold`` remembered (tests: each starts from a process that read none)."""
    with _lock:
        _held.clear()


def known_secrets() -> set[str]:
    """Every secret ``redact`` masks: those held, the documented variables' values and the
    content of the files their ``_FILE`` variables name."""
    with _lock:
        found = set(_held)
    found.update(os.environ.get(name, "").strip() for name in SECRET_ENV)
    for name in SECRET_FILES:
        path = os.environ.get(name)
        if path:
            found.add(_small_file(path).strip())
    return {s for s in found if len(s) >= SHORTEST}


# path → (what its stat said, its text): ``redact`` runs on every message, and the token files
# of the variables above are read again only when their stat changes (a Secret volume's swap
# changes the resolved file; a rewrite its size or time).
_file_texts: dict[str, tuple[tuple[int, int, int, int], str]] = {}


def _small_file(path: str) -> str:
    """A small regular file's text, or "" (never blocks: the path may name a FIFO). Not
    ``gitscale.files.read_bytes``: this module sits below it (every layer masks secrets)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return ""
    seen = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    with _lock:
        kept = _file_texts.get(path)
    if kept is not None and kept[0] == seen:
        return kept[1]
    text = _read_small_file(path)
    with _lock:
        _file_texts[path] = (seen, text)
    return text


def _read_small_file(path: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _FILE_LIMIT:
            return ""
        return os.read(fd, _FILE_LIMIT).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with user info, credential query values, every known secret
    (``known_secrets``) and each of ``secrets`` masked."""
    text = _USERINFO.sub(f"{MASK}@", text)
    text = _SCP_USERINFO.sub(rf"\g<user>:{MASK}@", text)
    text = _QUERY_SECRET.sub(rf"\g<name>{MASK}", text)
    every = known_secrets().union(secrets)
    forms = {form for secret in every for form in secret_forms(secret)}
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, MASK)
    return _TOKEN_SHAPES.sub(MASK, text)  # (after the known ones: theirs are the longer forms)


# Asked for each known secret on every ``redact``: room for all of them (those held, the
# variables, the token file, a client's own), or a cycle through more than it holds would
# compute every one each time.
@functools.lru_cache(maxsize=2 * HELD)
def secret_forms(secret: str) -> frozenset[str]:
    """Every way ``secret`` may show in an error's text: itself, its ``repr()`` and
    ``ascii()`` (an exception that quotes a header, ``'Bearer ghp_a\\nb'``), the repr of its
    UTF-8 bytes (``b'ghp_\\xc3\\xa9'``: h11 and httpx quote bytes), its JSON string, its
    percent-encoded forms (a server that echoes it in a URL or a form: ``a%2Fb``, ``a+b``, hex
    digits in either case), and each line of one that spans lines. Forms shorter than
    ``SHORTEST`` are left out: they would mask ordinary words."""
    if len(secret) < SHORTEST:
        return frozenset()
    forms = {secret, repr(secret)[1:-1], ascii(secret)[1:-1], json.dumps(secret)[1:-1],
             repr(secret.encode("utf-8", "surrogateescape"))[2:-1]}
    raw = secret.encode("utf-8", "surrogateescape")
    for encoded in (quote(raw, safe=""), quote(raw, safe="~"), quote_plus(raw)):
        forms.update((encoded, re.sub(r"%[0-9A-F]{2}", lambda m: m[0].lower(), encoded)))
    forms.update(line for line in secret.splitlines() if len(line) >= 2 * SHORTEST)
    return frozenset(form for form in forms if len(form) >= SHORTEST)


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
    HTTP(S) — often a token —, or a credential query parameter)? Blanks around it are no
    cover: ``" https://TOKEN@host/…"`` (a variable's stray space) is still a URL to gitscale,
    and git would get it in its argv before refusing its scheme."""
    url = url.strip()
    if re.match(r"(?i)^https?://[^/]*@", url) or re.search(r"://[^/@]*:[^/@]*@", url):
        return True
    if _SCP_USERINFO.match(url):
        return True
    return bool(_QUERY_SECRET.search(url))
