"""The line gitscale writes on stderr for what happens while it runs on (``run``, ``serve``, a
notification after a push): the time it happened, RFC 3339 in UTC, then what happened. One
format, so a log collector reads every such line alike."""
from __future__ import annotations

from gitscale.timeutil import format_time, utcnow


def log(message: str) -> None:
    """One timestamped line on stderr."""
    import click  # (not on every import of a module that may log)

    click.echo(f"{format_time(utcnow())} {message}", err=True)
