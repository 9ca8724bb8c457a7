"""`gitscale history`: the scaling commits, parsed from their trailers."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import click

from gitscale.commands import EXIT_OK, RepoOptions
from gitscale.commitmsg import body_details, parse_trailer
from gitscale.errors import InputError
from gitscale.git import Git
from gitscale.timeutil import format_time, parse_time
from gitscale.workspace import open_workspace

_FORMAT = "%H%x1f%cI%x1f%B%x1f%(trailers:key=Gitscale-Set,valueonly,separator=%x1d)%x1e"


@dataclass(frozen=True)
class Entry:
    commit: str
    time: str
    set: str
    previous: int | None
    replicas: int
    patch: int | None
    queued: int | None
    running: int | None
    reason: str
    detail: str


def read_history(repo_git: Git, *, only: str | None = None, since: str | None = None) -> list[Entry]:
    args = ["log", f"--format={_FORMAT}", "--grep=^Gitscale-Set: "]
    if since:
        args.append(f"--since={since}")
    out = repo_git.run(*args).stdout
    entries = []
    for record in out.split("\x1e"):
        fields = record.strip("\n").split("\x1f")
        if len(fields) != 4:
            continue
        sha, when, body, trailers = fields
        details = body_details(body)
        for value in trailers.split("\x1d"):
            line = parse_trailer(value, "")
            if line is None or (only and line.name != only):
                continue
            entries.append(Entry(sha, format_time(parse_time(when)), line.name, line.previous,
                                 line.replicas, line.patch, line.queued, line.running,
                                 line.reason, details.get(line.name, "")))
    return entries


def run_history(opts: RepoOptions, *, only: str | None, since: str | None, output: str,
                chart: str | None) -> int:
    if since is not None:
        try:
            since = format_time(parse_time(since))
        except ValueError as exc:
            raise InputError("--since", str(exc)) from None
    with open_workspace(opts.repo, opts.branch, history=True) as ws:
        entries = read_history(ws.git, only=only, since=since)
    if chart:
        from gitscale.chart import write_chart

        write_chart(entries, chart)
    if output == "json":
        click.echo(json.dumps([asdict(e) for e in entries], indent=2))
    else:
        click.echo(history_text(entries), nl=False)
    return EXIT_OK


def history_text(entries: list[Entry]) -> str:
    rows: list[list[Any]] = [["TIME", "COMMIT", "SET", "OLD→NEW", "PATCH", "DEMAND", "REASON"]]
    for e in entries:
        demand = "-" if e.queued is None else f"{e.queued}q+{e.running}r"
        old = "-" if e.previous is None else str(e.previous)
        rows.append([e.time, e.commit[:10], e.set, f"{old}→{e.replicas}",
                     "-" if e.patch is None else e.patch, demand, e.reason])
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    if len(rows) == 1:
        lines.append("(no scaling commits)")
    return "\n".join(lines) + "\n"
