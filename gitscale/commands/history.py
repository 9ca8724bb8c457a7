"""`gitscale history`: the scaling commits as a table or JSON, and optionally a chart."""
from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from typing import Any

import click

from gitscale.commands import EXIT_OK, RepoOptions
from gitscale.errors import InputError
from gitscale.history import Entry, between, read_history
from gitscale.progress import Progress
from gitscale.timeutil import parse_time
from gitscale.workspace import open_workspace


def run_history(opts: RepoOptions, *, only: str | None, since: str | None, output: str,
                chart: str | None, until: str | None = None, tz: str = "utc") -> int:
    start, end = _time("--since", since), _time("--until", until)
    if start and end and start > end:
        raise InputError("--since", f"{since} is after --until {until}")
    zone = resolve_zone(tz)
    chart_path = Path(chart) if chart else None
    if chart_path is not None:
        from gitscale.chart import require

        require(chart_path)  # a bad suffix or a missing matplotlib fails before any git work
    with open_workspace(opts.repo, opts.branch, history=True) as ws, \
            Progress("reading scaling commits", None, show=output == "text") as bar:
        everything = read_history(ws.git, only=only, progress=bar.if_shown())
    entries = between(everything, start, end)
    if chart_path is not None:
        _write_chart(everything, chart_path, only, start, end, zone)
    if output == "json":
        click.echo(json.dumps([asdict(e) for e in entries], indent=2))
    else:
        click.echo(history_text(entries, zone), nl=False)
    return EXIT_OK


def _write_chart(entries: list[Entry], path: Path, only: str | None, start: datetime | None,
                 end: datetime | None, zone: tzinfo) -> None:
    """Every entry is drawn, not only those inside the window: a count set before --since
    still holds at its start."""
    from gitscale.chart import render
    from gitscale.history_chart import TITLE, choose_window, history_panels

    if not entries:
        which = f" of set {only!r}" if only else ""
        raise InputError("--chart", f"{path}: no scaling commits{which} to draw")
    window = choose_window(entries, start, end, zone)
    render(history_panels(entries), path, title=TITLE, tz=zone, start=window.start,
           end=window.end, note=window.note)


def _time(option: str, text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return parse_time(text)
    except ValueError as exc:
        raise InputError(option, str(exc)) from None


def resolve_zone(name: str) -> tzinfo:
    """``utc``, ``local`` (this machine's zone, daylight saving included) or an IANA name."""
    if name.lower() == "utc":
        return timezone.utc
    if name.lower() == "local":
        from dateutil.tz import tzlocal

        local: tzinfo = tzlocal()  # asks the C library, so it follows daylight saving
        return local
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder such as Europe
        raise InputError("--tz", f"{name!r} is not utc, local or a time zone name such as "
                                 "Europe/Berlin") from None


def history_text(entries: list[Entry], zone: tzinfo = timezone.utc) -> str:
    rows: list[list[Any]] = [["TIME", "COMMIT", "SET", "OLD→NEW", "PATCH", "DEMAND", "REASON"]]
    for e in entries:
        demand = "-" if e.queued is None else f"{e.queued}q+{e.running}r"
        old = "-" if e.previous is None else str(e.previous)
        when = e.time if zone is timezone.utc else e.when.astimezone(zone).isoformat()
        rows.append([when, e.commit[:10], e.set, f"{old}→{e.replicas}",
                     "-" if e.patch is None else e.patch, demand, e.reason])
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    if len(rows) == 1:
        lines.append("(no scaling commits)")
    return "\n".join(lines) + "\n"
