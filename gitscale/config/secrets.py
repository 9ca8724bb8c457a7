"""Credentials named in gitscale.yaml as ``{env: NAME}`` or ``{file: PATH}``: read, never logged.
An ``{env: NAME}`` is read from the file ``NAME_FILE`` names when only that is set (the
``_FILE`` convention: a Kubernetes Secret volume, a Docker secret).

Every value read here is held in ``gitscale.redact``'s registry, so that no output masked
through it (git's, a server's answer, an error, a crash report) shows it; ``hold_named`` holds
those a config names before they are needed (a server hook may echo a token the pass never
used).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Literal

from gitscale import files
from gitscale.files import FILE_SUFFIX, variable_file
from gitscale.errors import GitscaleError, InputError
from gitscale.redact import header_problem, hold

# What GitHub's tokens (classic, OAuth, user-to-server, server-to-server, refresh,
# fine-grained) and Buildkite's API tokens begin with.
TOKEN_PREFIXES = r"^(gh[pousr]_|github_pat_|bkua_)"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"

# The JSON Schema of a reference, as gitscale.yaml writes it.
SECRET_REF: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "minProperties": 1,
    "maxProperties": 1,
    "properties": {"env": {"type": "string", "pattern": ENV_NAME,
                           # a token pasted where its variable's name belongs: GitHub's
                           # prefixed tokens and Buildkite's API tokens
                           "not": {"pattern": TOKEN_PREFIXES}},
                   "file": {"type": "string", "minLength": 1}},
}


def env_name_problem(name: str) -> str | None:
    """Why ``name``, given where the name of a secret's environment variable belongs (an
    option such as `serve --secret-env`), is not one, in words that do not show it: it may be
    the secret itself, pasted there. None for a name."""
    if re.match(TOKEN_PREFIXES, name):
        return ("a token, not the name of the environment variable that holds it (the value "
                "is not shown)")
    if not re.fullmatch(ENV_NAME, name):
        return ("not the name of an environment variable: letters, digits and _ (the value "
                "is not shown)")
    return None


@dataclass(frozen=True)
class SecretRef:
    """``{env: NAME}`` or ``{file: PATH}`` as written in gitscale.yaml: where, not what."""

    kind: Literal["env", "file"]
    where: str

    @classmethod
    def parse(cls, raw: Any) -> "SecretRef":
        """A schema-valid ``{env: NAME}`` or ``{file: PATH}`` mapping."""
        ((kind, where),) = raw.items()
        return cls(kind, str(where))

    @property
    def mapping(self) -> dict[str, str]:
        return {self.kind: self.where}


class SecretError(GitscaleError):
    """A credential could not be read. The message names where it was looked for, not its value;
    ``ref`` is the reference that failed, so a caller can name the config line that wrote it."""

    def __init__(self, message: str, ref: SecretRef | None = None) -> None:
        super().__init__(message)
        self.ref = ref


def read_secret(ref: Any, what: str) -> str:
    """The value ``ref`` names, stripped and held for masking. ``{env: NAME}`` follows the
    ``_FILE`` convention (``files.variable_file``): with ``NAME_FILE`` set and ``NAME`` not,
    the value is read from that file (and rotates as a ``{file: PATH}`` one does,
    ``config/rotating.py``); with both set it is an error naming both."""
    if isinstance(ref, SecretRef):
        ref = ref.mapping
    parsed = SecretRef.parse(ref) if isinstance(ref, dict) and len(ref) == 1 else None
    if isinstance(ref, dict) and "env" in ref:
        name = str(ref["env"])
        try:
            named = variable_file(name)
        except InputError as exc:
            raise SecretError(f"{what}: {exc}", parsed) from None
        if named is not None:
            return _read_file(Path(named), f"{name}{FILE_SUFFIX}={named}", what, parsed)
        raw = os.environ.get(name)
        if raw is None:
            raise SecretError(f"{what}: environment variable {name} is not set", parsed)
        value = raw.strip()
        if not value:
            raise SecretError(f"{what}: environment variable {name} is empty", parsed)
        return hold(value)
    if isinstance(ref, dict) and "file" in ref:
        file = Path(str(ref["file"])).expanduser()
        return _read_file(file, str(file), what, parsed)
    raise SecretError(f"{what}: expected {{env: NAME}} or {{file: PATH}}")


def secret_file(ref: SecretRef) -> Path | None:
    """The file ``ref``'s value is read from: ``{file: PATH}``'s, or ``NAME_FILE``'s for an
    ``{env: NAME}`` (None: a variable's, fixed for the life of the process). Both ``NAME`` and
    ``NAME_FILE`` set is not decided here: ``read_secret`` says so."""
    if ref.kind == "file":
        return Path(ref.where).expanduser()
    try:
        path = variable_file(ref.where)
    except InputError:
        return None
    return None if path is None else Path(path)


def declared(ref: SecretRef) -> str:
    """``ref`` as gitscale.yaml writes it: ``{file: PATH}``, ``{env: NAME}`` (never a value)."""
    return f"{{{ref.kind}: {ref.where}}}"


def via(ref: SecretRef) -> str:
    """`` (NAME_FILE=PATH)`` for an ``{env: NAME}`` read from the file ``NAME_FILE`` names,
    else nothing: where the value came from, when the declaration does not say."""
    path = secret_file(ref) if ref.kind == "env" else None
    return "" if path is None else f" ({ref.where}{FILE_SUFFIX}={path})"


def source_of(ref: SecretRef) -> str:
    """Where ``ref``'s value is read from, in words that name no value."""
    if ref.kind == "file":
        return str(Path(ref.where).expanduser())
    path = secret_file(ref)
    if path is not None:
        return f"{ref.where}{FILE_SUFFIX}={path}"
    return f"environment variable {ref.where}"


def _read_file(path: Path, label: str, what: str, parsed: SecretRef | None) -> str:
    try:  # a regular file of bounded size: a FIFO or /dev/zero would never end
        value = files.read_bytes(path, label, InputError,
                                 limit=SECRET_FILE_LIMIT).decode("utf-8").strip()
    except InputError as exc:
        raise SecretError(f"{what}: {exc}", parsed) from None
    except OSError as exc:  # (the OS's words: they hold no byte of the file)
        hint = files.mounted_secret_hint(path) if isinstance(exc, FileNotFoundError) else ""
        raise SecretError(f"{what}: cannot read {label}: {exc.strerror or type(exc).__name__}"
                          f"{hint}", parsed) from None
    except UnicodeDecodeError:  # (its text would quote the bytes: never shown)
        raise SecretError(f"{what}: cannot read {label}: not UTF-8 text", parsed) from None
    if not value:
        raise SecretError(f"{what}: {label} is empty", parsed)
    return hold(value)


SECRET_FILE_LIMIT = 1024 * 1024  # a token or a private key is a few kilobytes


def hold_named(refs: Iterable[SecretRef]) -> None:
    """Read what ``refs`` name, where it can be read, only to hold it for masking: one that
    cannot be read now is said so by the pass that needs it."""
    for ref in set(refs):
        try:
            read_secret(ref, "secret")
        except SecretError:
            pass


def read_token(ref: Any, what: str) -> str:
    """A credential sent in an HTTP header (an API token), checked before any request: one
    that cannot be a header's value (a newline, a space, a byte that is not ASCII — a paste
    gone wrong) is a ``SecretError`` naming the variable or file, never the value, instead of
    an HTTP library's error that quotes it (and of retries that cannot help)."""
    value = read_secret(ref, what)
    problem = header_problem(value)
    if problem is not None:
        parsed = SecretRef.parse(ref.mapping if isinstance(ref, SecretRef) else ref)
        raise SecretError(f"{what}: {source_of(parsed)} {problem}", parsed)
    return value


def identity(ref: Any) -> str:
    """A stable, secret-free name for a credential reference (for cache keys)."""
    if isinstance(ref, dict):
        return ",".join(f"{k}={ref[k]}" for k in sorted(ref))
    return repr(ref)
