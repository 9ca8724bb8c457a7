"""What every git call of gitscale's is given, and the token checked before it is used.

- The caller's environment without the GIT_* variables that would steer git at another
  repository (``no_git_env``, as pre-commit's), plus gitscale's identity (``GITSCALE_AUTHOR``)
  and no terminal prompt (``git_env``).
- The git token, which reaches git only through ``GIT_ASKPASS``: a script that holds no secret
  and reads ``GITSCALE_GIT_TOKEN`` or the file ``GITSCALE_GIT_TOKEN_FILE`` names; the token
  checked first (``check_token``), so a missing file or a broken paste is said as such rather
  than as git's "Authentication failed".
- What to say when a server wanted credentials git could not give it (``auth_hint``).
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
from pathlib import Path
from typing import Mapping

from gitscale import files
from gitscale.errors import InputError
from gitscale.redact import header_problem
from gitscale.repo.deadline import low_speed_env
from gitscale.repo import scratch

BOT = ("gitscale", "gitscale@users.noreply.gitscale.dev")


# What the caller's GIT_* variables may still say: how to reach a server (SSH, TLS, proxies,
# credentials) and configuration given on the command line. Everything else (GIT_DIR,
# GIT_WORK_TREE, GIT_INDEX_FILE, GIT_OBJECT_DIRECTORY, GIT_NAMESPACE, GIT_AUTHOR_DATE, ...) is
# dropped: a git hook or `git rebase -x` exports them, and they would point our git at another
# repository (GIT_DIR=/other/.git made a reconcile commit the manifests into /other).
_KEPT_GIT_ENV = frozenset({
    "GIT_EXEC_PATH", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_SSH_VARIANT", "GIT_SSL_CAINFO",
    "GIT_SSL_CAPATH", "GIT_SSL_NO_VERIFY", "GIT_SSL_CERT", "GIT_SSL_KEY",
    "GIT_HTTP_PROXY_AUTHMETHOD", "GIT_PROXY_COMMAND", "GIT_ALLOW_PROTOCOL", "GIT_ASKPASS",
    "GIT_CONFIG_COUNT", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM",
    "GIT_HTTP_LOW_SPEED_LIMIT", "GIT_HTTP_LOW_SPEED_TIME",
})


def no_git_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the GIT_* variables that would steer which repository, index or
    work tree git uses (as pre-commit's ``no_git_env``)."""
    return {k: v for k, v in environ.items()
            if not k.startswith("GIT_") or k in _KEPT_GIT_ENV
            or k.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"))}


def git_env() -> dict[str, str]:
    """Identity and non-interactive settings for every git call gitscale makes."""
    name, email = author()
    env = {
        "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email,
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
        **low_speed_env(os.environ),  # a stalled HTTP(S) transfer ends (``deadline.py``)
    }
    env.update(_askpass_env())
    return env


# "Name <email>": a name without <, > or control characters, an address without blanks either
_AUTHOR = re.compile(r"([^<>\x00-\x1f\x7f]*?[^<>\s\x00-\x1f\x7f])\s*<([^<>\s\x00-\x1f\x7f]+)>")


def author() -> tuple[str, str]:
    """The (name, email) of gitscale's commits: ``GITSCALE_AUTHOR``, else gitscale's own. A
    value that is not ``Name <email>`` is refused, not passed over for the default."""
    configured = os.environ.get("GITSCALE_AUTHOR", "").strip()
    if not configured:
        return BOT
    match = _AUTHOR.fullmatch(configured)
    if match is None:
        raise InputError("GITSCALE_AUTHOR", f'expected "Name <email>", got {configured!r}')
    return match.group(1), match.group(2)


_ASKPASS_SCRIPT = """#!/bin/sh
# Written by gitscale. Holds no secret: git passes the prompt, the secret comes from the env.
case "$1" in
  Username*) printf '%s\\n' "${GITSCALE_GIT_USERNAME:-x-access-token}" ;;
  *) if [ -n "$GITSCALE_GIT_TOKEN_FILE" ]; then cat "$GITSCALE_GIT_TOKEN_FILE";
     else printf '%s\\n' "$GITSCALE_GIT_TOKEN"; fi ;;
esac
"""
_askpass_path: str | None = None


def _askpass_env() -> dict[str, str]:
    """Point GIT_ASKPASS at a secret-free script when a token is configured."""
    global _askpass_path
    if not (os.environ.get("GITSCALE_GIT_TOKEN") or os.environ.get("GITSCALE_GIT_TOKEN_FILE")):
        return {}
    if _askpass_path is None or not Path(_askpass_path).exists():
        directory = str(scratch.make("askpass"))
        atexit.register(shutil.rmtree, directory, True)  # one per process, not one per run
        path = Path(directory) / "askpass.sh"
        path.write_text(_ASKPASS_SCRIPT)
        path.chmod(0o700)
        _askpass_path = str(path)
    return {"GIT_ASKPASS": _askpass_path}


def check_token() -> None:
    """The git token, checked before git talks to a server: ``GITSCALE_GIT_TOKEN_FILE``, when
    set, names a readable, non-empty file, since the askpass script's ``cat`` failing would
    only show as git's "Authentication failed" (and a hint that the token was refused, when
    there was none); and the token (the file's or ``GITSCALE_GIT_TOKEN``) is one line of
    visible ASCII, as the API tokens are (``gitscale.redact.header_problem``): git sends what
    comes before the first line break, so a token broken by a paste would be sent cut and
    blamed on the server. Both set is refused, naming both (``files.variable_file``: the
    ``_FILE`` rule of every credential variable gitscale reads). A file where the in-cluster
    scaler mounts its Secrets is said to be the key of its Secret (``gitscale-git``'s
    ``token``: ``files.mounted_secret_hint``, as for every credential file). Never shown."""
    name = files.variable_file("GITSCALE_GIT_TOKEN")
    if name is None:
        _check_token_text(os.environ.get("GITSCALE_GIT_TOKEN", ""), "GITSCALE_GIT_TOKEN")
        return
    path = Path(name)
    label = f"GITSCALE_GIT_TOKEN_FILE={name}"
    try:  # a regular file of at most a megabyte: a FIFO or a device would hang or never end
        text = files.read_bytes(path, label, InputError, limit=1024 * 1024).decode(
            "utf-8", errors="replace")
    except FileNotFoundError:
        problem = "no such file"
    except IsADirectoryError:
        problem = "is a directory, not a file"
    except OSError as exc:
        problem = f"cannot be read ({exc.strerror or type(exc).__name__})"
    else:
        if text.strip():
            _check_token_text(text, label)
            return
        problem = "is empty"
    raise InputError(label, problem + files.mounted_secret_hint(path))


def _check_token_text(token: str, label: str) -> None:
    """Line breaks at its end are not sent (git reads up to the first), all else is."""
    problem = header_problem(token.rstrip("\r\n")) if token else None
    if problem is not None:
        raise InputError(label, f"the token {problem} (a token is one line of visible ASCII; "
                         "git would send it cut or broken, and the server refuse it)")


def auth_hint(output: str) -> str:
    """Say what to do when the server wanted credentials that git could not give it."""
    if not re.search(r"Authentication failed|could not read (Username|Password)", output):
        return ""
    file = os.environ.get("GITSCALE_GIT_TOKEN_FILE")
    if os.environ.get("GITSCALE_GIT_TOKEN") or file:
        which = ("GITSCALE_GIT_TOKEN (a variable: a new value needs a restart)"
                 if os.environ.get("GITSCALE_GIT_TOKEN") else
                 f"GITSCALE_GIT_TOKEN_FILE={file} (read again for each git command)")
        return (f"\nhint: the server refused the token from {which}: wrong, expired, or "
                "without Contents: Read and write on this repo")
    return ("\nhint: the server wants credentials: set GITSCALE_GIT_TOKEN (or "
            "GITSCALE_GIT_TOKEN_FILE) to a token that may push, or configure a credential helper")
