"""One error family. Every user-facing failure is a GitscaleError carrying its exit code.

Messages name the source (a file and line, a URL without credentials, a command) and say what to
do. Anything that is *not* a GitscaleError reaching the CLI is a bug and is reported as such.
"""
from __future__ import annotations


class GitscaleError(Exception):
    """A failure the user can act on. ``exit_code`` is what the CLI returns."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InputError(GitscaleError):
    """Bad input: a config file, manifest, demand file or option. ``source`` names where."""

    def __init__(self, source: str, message: str, line: int | None = None) -> None:
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {message}")
        self.source = source
        self.line = line
        self.detail = message


class ConfigError(InputError):
    """gitscale.yaml or a policy preset is invalid."""


class ManifestError(InputError):
    """A managed manifest cannot be read or edited."""


class DemandError(InputError):
    """Demand for a set could not be read; the set must not be scaled down on a guess."""


class ValidationError(GitscaleError):
    """An edited manifest fails schema validation; nothing is committed."""


class WriteError(GitscaleError):
    """A file of the config repo's checkout could not be written (a full disk, a read-only
    mount, a quota): nothing was committed. The message names the file and the cause."""


class GitError(GitscaleError):
    """A git command failed. The message shows the command (credentials redacted) and output."""


class PushRejected(GitError):
    """The remote refused the push for a reason retrying cannot fix (hook, branch protection).
    Its message is `reconcile`'s, which gives up ("not retried"); ``retried()`` is the same
    refusal as said by a loop that tries again (`run`, `serve`)."""

    FINAL = "; not retried."

    def retried(self) -> str:
        return str(self).replace(self.FINAL, ".", 1)


class PushRaced(GitError):
    """The remote moved (non-fast-forward): fetch, recompute and retry."""


class GitStopped(GitError):
    """A git command that talks to a remote was ended (or not started) because the process is
    stopping and its stop deadline passed (``repo.deadline.StopDeadline``): what it was doing
    is left to the next start. ``verb``: the command (``push``); ``begun``: it was under way
    when ended (a push may then have landed: the remote may have taken it and not answered),
    not refused before it started."""

    def __init__(self, message: str, verb: str = "", *, begun: bool = False) -> None:
        super().__init__(message)
        self.verb, self.begun = verb, begun

    def may_have_landed(self) -> bool:
        """A push ended before the remote answered: its commit may be on the remote."""
        return self.verb == "push" and self.begun


SHOWN = 80  # characters of a value an error message quotes


def shown_as_yaml(value: object) -> str:
    """``value`` as the YAML it was read from says it: ``null``, ``true``, ``false`` (not
    Python's ``None`` and ``True``), anything else as ``shown``."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return shown(value)


def shown(value: object, limit: int = SHOWN) -> str:
    """``value`` as an error message quotes it: its ``repr``, cut to about ``limit``
    characters. A message names what is wrong; a 200,000-character name pasted into a config
    is better said as its start and its length than echoed whole (and every message passes
    through the secret masking, whose work grows with its length)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f"{len(value):,} characters" if isinstance(value, (str, bytes)) else \
        f"{len(text):,} characters as text"
    return f"{text[:limit]}… ({size})"
