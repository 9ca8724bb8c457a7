"""The line gitscale writes on stderr for what happens while it runs on (``run``, ``serve``, a
notification after a push): the time it happened, RFC 3339 in UTC, then what happened. One
format, so a log collector reads every such line alike; and one boundary, so no line shows a
credential, whatever brought it into the message (``gitscale.redact``)."""
from __future__ import annotations

from gitscale.redact import redact
from gitscale.timeutil import format_time, utcnow


def log(message: str) -> None:
    """One timestamped line on stderr, credentials masked: a message formed from what a
    client sent (a delivery id), a server answered or a library raised is masked here too,
    not only where it was formed."""
    import click  # (not on every import of a module that may log)

    click.echo(f"{format_time(utcnow())} {redact(message)}", err=True)
