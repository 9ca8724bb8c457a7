"""`gitscale history`: the scaling commits as a table or JSON, and optionally a chart. The rows
of commits by people are ``history_rows``; the table and the JSON, ``history_output``."""
from __future__ import annotations

import itertools
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from typing import Iterable

import click

from gitscale.commands import EXIT_OK, RepoOptions, option_time
from gitscale.commands.history_output import history_lines, json_lines, unread_line
from gitscale.commands.history_rows import Row, config_sets, hand_rows, merged, \
    names_a_set, set_names, unknown_set_error, unseen_note
from gitscale.errors import InputError
from gitscale.record.history import Entry, Skipped, between, history_since, iter_history, \
    read_history, within
from gitscale.progress import Progress
from gitscale.repo.opening import open_workspace


def run_history(opts: RepoOptions, *, only: str | None, since: str | None, output: str,
                chart: str | None, until: str | None = None, tz: str = "utc") -> int:
    start, end = option_time("--since", since), option_time("--until", until)
    if start and end and start > end:
        raise InputError("--since", f"{since} is after --until {until}")
    zone = resolve_zone(tz)
    chart_path = Path(chart) if chart else None
    if chart_path is not None:
        from gitscale.charts.render import require

        require(chart_path)  # a bad suffix or a missing matplotlib fails before any git work
    # over a URL, only commits from a day before --since are fetched (a chart draws the
    # count that holds at the window's start, from before it: it needs them all)
    recent = history_since(start) if chart_path is None else None
    skipped: list[Skipped] = []
    note: str | None = None
    with open_workspace(opts.repo, opts.branch, history=True, since=recent,
                        writes=False) as ws:
        # --set: the config says which names are sets (a broken one is an error at its line,
        # before any row); a set's previousNames: their commits are its history too (shown
        # under their name)
        configured = config_sets(ws, opts.config) if only is not None else None
        names, note = set_names(configured, opts.config, only)
        if chart_path is not None:  # a chart needs every entry first
            with Progress("reading scaling commits", None, show=output == "text") as bar:
                everything = read_history(ws.git, only=names, progress=bar.if_shown(),
                                          skipped=skipped)
            if only is not None and configured is not None and not everything:
                error = unknown_set_error(ws, configured, opts.config, only)
                if error:  # a typo, said as without a chart (not "nothing to draw")
                    raise InputError("--set", error)
            _write_chart(everything, chart_path, only, start, end, zone)
            found: Iterable[Entry] = between(everything, start, end)
        else:
            with Progress("reading scaling commits", None, show=output == "text") as bar:
                shown = bar.if_shown()
                # streamed: the first rows show while git still walks the history; with a
                # bar on the terminal, read under the bar and shown once it is erased
                scaling = iter_history(ws.git, only=names, progress=shown,
                                       details=output == "json", skipped=skipped)
                rows: Iterable[Row] = scaling
                if ws.mode == "checkout":  # commits by people, read alongside (trees here)
                    rows = merged(scaling, hand_rows(ws, opts.config, only))
                else:
                    note = "\n".join(n for n in (note, unseen_note(ws)) if n) or None
                if start or end:
                    rows = (e for e in rows if within(e, start, end))  # type: ignore[arg-type]
                found = rows  # type: ignore[assignment]
                if shown is not None:
                    found = list(found)
            if only is not None and configured is not None \
                    and not names_a_set(configured, only):
                # a name the config does not have: a typo is an error before any output,
                # not after an empty table's header
                remaining = iter(found)
                first = next(remaining, None)
                if first is None:
                    error = unknown_set_error(ws, configured, opts.config, only)
                    if error:
                        raise InputError("--set", error)
                    found = []
                else:
                    found = itertools.chain([first], remaining)
        # (--since/--until filtered here rather than by `git log --since`, which stops walking
        # at the first older commit and so can miss commits whose dates are out of order)
        lines = json_lines(found) if output == "json" else history_lines(
            found, zone, "(no scaling commits)" if only is None
            else f"(no scaling commits of set {only!r})" if names is None or len(names) < 2
            else f"(no scaling commits of set {only!r}, nor of its previousNames: "
                 f"{', '.join(names[1:])})")
        _stream(lines)
    if skipped:
        click.echo(unread_line(skipped), err=True)
    if note:
        click.echo(note, err=True)
    return EXIT_OK


def _stream(lines: Iterable[str]) -> None:
    """Echo ``lines`` as they come: the first ones at once, then in blocks (one write per line
    of a hundred thousand costs more than the formatting)."""
    block: list[str] = []
    for number, line in enumerate(lines):
        block.append(line)
        if number < 100 or len(block) >= 2000:
            click.echo("\n".join(block))
            block = []
    if block:
        click.echo("\n".join(block))


def _write_chart(entries: list[Entry], path: Path, only: str | None, start: datetime | None,
                 end: datetime | None, zone: tzinfo) -> None:
    """Every entry is drawn, not only those inside the window: a count set before --since
    still holds at its start."""
    from gitscale.charts.render import render
    from gitscale.charts.history import TITLE, choose_window, history_panels

    if not entries:
        which = f" of set {only!r}" if only else ""
        raise InputError("--chart", f"{path}: no scaling commits{which} to draw")
    window = choose_window(entries, start, end, zone)
    render(history_panels(entries), path, title=TITLE, tz=zone, start=window.start,
           end=window.end, note=window.note)


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


