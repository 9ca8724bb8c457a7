"""What an exception that is not a ``GitscaleError`` is: a bug in gitscale, and what to report.

The rule, for every command (README, "When something goes wrong"): a ``GitscaleError`` is the
user's to act on and its message says what; anything else is a bug. A one-shot command exits 1
on the first and 70 on the second, with a crash report in a file. A long-running process (`run`,
`serve`, `controller`) outlives both: the pass, batch or delivery fails, is logged, and is tried
again with backoff; a bug is logged with the same report (its log is what is kept).
"""
from __future__ import annotations

import sys

from gitscale import __version__
from gitscale.redact import redact
from gitscale.repo.git import version

EXIT_CRASH = 70  # EX_SOFTWARE: a bug in gitscale, never a user error


def versions() -> str:
    """What a bug report needs besides the traceback: gitscale's, git's and Python's versions."""
    import platform  # (platform, traceback, tempfile: imported when a crash is reported)

    return (f"gitscale {__version__}\n{version()}\nPython {platform.python_version()} "
            f"({platform.platform()})\nargv: {redact(' '.join(sys.argv[1:]))}")


def summary(exc: BaseException) -> str:
    """One line for a log or a health endpoint."""
    return f"unexpected {type(exc).__name__}: {redact(str(exc))} (a bug: please report it)"


def report() -> str:
    """The versions and the traceback of the exception being handled, credentials redacted."""
    import traceback

    return versions() + "\n\n" + redact(traceback.format_exc())


def write_report() -> str | None:
    """``report()`` in a new file; its path. None when no file can be written: a read-only
    root filesystem with no writable temporary directory (the controller's Deployment mounts
    none), where the caller prints the report instead."""
    import tempfile

    try:
        with tempfile.NamedTemporaryFile("w", prefix="gitscale-crash-", suffix=".txt",
                                         delete=False) as out:
            out.write(report())
    except OSError:
        return None
    return out.name
