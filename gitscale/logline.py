"""The line gitscale writes on stderr for what happens while it runs on (``run``, ``serve``, a
notification after a push): the time it happened, RFC 3339 in UTC, then what happened. One
format, so a log collector reads every such line alike; and one boundary, so no line shows a
credential, whatever brought it into the message (``gitscale.redact``).

``GITSCALE_LOG_FORMAT=json`` (read by ``start``: `run`, `serve` and the controller) makes each
line one JSON object instead (``json_line``): a message that spans lines (a failure and its
``hint:`` lines, a crash report) stays one entry in Loki or Elasticsearch, with its level.
"""
from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from typing import Literal

from gitscale.errors import InputError
from gitscale.redact import redact
from gitscale.timeutil import format_time, utcnow

FORMAT_ENV = "GITSCALE_LOG_FORMAT"
FORMATS = ("text", "json")  # the first is the default
Level = Literal["info", "warning", "error"]
WARNING = "warning: "  # a message that says so is logged at level "warning"
# Who logs, in a JSON line's "component": the command that started the process's log
# (``start``). One per process, as Python's own logging configuration is: every thread of
# `serve` logs as "serve" without each call site passing it. None: no command started it (a
# one-shot `reconcile`'s notification line), which logs text whatever the variable says.
_component: dict[str, str | None] = {"name": None}


def start(component: str) -> str:
    """Check ``GITSCALE_LOG_FORMAT`` when a long-running command starts (an unknown value is an
    error naming the variable, before anything is logged) and name the process's component.
    Returns the format."""
    chosen = log_format(strict=True)
    _component["name"] = component
    return chosen


def log_format(*, strict: bool = False) -> str:
    """``GITSCALE_LOG_FORMAT``: "text" (unset or empty too) or "json". An unknown value is
    ``strict``'s error, else "text" (a command that never ``start``-ed its log)."""
    value = os.environ.get(FORMAT_ENV, "").strip().lower() or FORMATS[0]
    if value in FORMATS:
        return value
    if strict:
        raise InputError(FORMAT_ENV, f"{value!r} is not a log format: use "
                         + " or ".join(FORMATS) + f" (default {FORMATS[0]})")
    return FORMATS[0]


def _json() -> str | None:
    """The component to log JSON as, or None for text."""
    component = _component["name"]
    return component if component is not None and log_format() == "json" else None


def level_of(message: str) -> Level:
    """The level a message says it has: "warning" when it starts with ``warning:``, else
    "info" (a caller that knows a failure passes ``level="error"``)."""
    return "warning" if message.startswith(WARNING) else "info"


def json_line(when: datetime, level: Level, component: str, message: str,
              **fields: str) -> str:
    """One JSON object on one line: ``time`` (RFC 3339, UTC, milliseconds), ``level``,
    ``component``, ``msg`` (its line breaks kept as ``\\n``) and ``fields``, each value
    masked (``redact``) before it is encoded."""
    stamp = when.astimezone(timezone.utc)
    record = {"time": stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z",
              "level": level, "component": component, "msg": redact(message),
              **{name: redact(value) for name, value in fields.items()}}
    return json.dumps(record)  # (ASCII: \u escapes survive any stderr encoding)


def log(message: str, *, level: Level | None = None, runner_set: str | None = None) -> None:
    """One timestamped line on stderr, credentials masked: a message formed from what a
    client sent (a delivery id), a server answered or a library raised is masked here too,
    not only where it was formed. In JSON, ``level`` (default: ``level_of``) and the set the
    message is about (``runner_set``, the object's ``set``) are fields of their own."""
    import click  # (not on every import of a module that may log)

    now, component = utcnow(), _json()
    if component is not None:
        fields = {"set": runner_set} if runner_set is not None else {}
        click.echo(json_line(now, level or level_of(message), component, message, **fields),
                   err=True)
        return
    click.echo(f"{format_time(now)} {redact(message)}", err=True)


def warn(message: str) -> None:
    """A warning said outside the log's flow (a cache not loaded or not written): ``warning:
    message`` on stderr, untimed, as every command says one; a JSON object of level "warning"
    in a JSON log."""
    import click

    if _json() is not None:
        log(WARNING + message, level="warning")
    else:
        click.echo(WARNING + message, err=True)


def last_words(message: str) -> None:
    """What a command says as it ends on an error or a crash (``error: …``, ``gitscale
    crashed: …``): as it is on stderr, or, in a JSON log, one object of level "error" (a
    collector that parses every line of a `run` pod found this last one plain)."""
    import click

    if _json() is not None:
        log(message, level="error")
    else:
        click.echo(message, err=True)

