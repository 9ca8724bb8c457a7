"""The scaling history: gitscale's commits read back from their ``Gitscale-Set`` trailers."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterable, Iterator

from gitscale.commitmsg import body_details, parse_trailer
from gitscale.git import Git
from gitscale.progress import Progress
from gitscale.timeutil import format_time, parse_time

# The committer date as gitscale writes times (RFC 3339, UTC, "Z"), formatted by git; trailers
# are read here: git's trailer parser took a third of the log.
_FORMAT = "%H%x1f%cd%x1f%B%x1e"
_DATE = "--date=format-local:%Y-%m-%dT%H:%M:%SZ"
_SET_TRAILER = re.compile(r"^[ \t]*gitscale-set[ \t]*:(.*)$", re.MULTILINE | re.IGNORECASE)
MARGIN = timedelta(days=1)  # history_since: commits dated this much out of order still show


@dataclass(frozen=True)
class Entry:
    """One set's line in one scaling commit. ``time`` is RFC 3339 UTC (the commit date)."""

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

    @property
    def when(self) -> datetime:
        return parse_time(self.time)


def iter_history(repo_git: Git, *, only: str | None = None,
                 progress: Progress | None = None) -> Iterator[Entry]:
    """Every scaling commit reachable from HEAD, newest first, as git walks them (the first
    rows of a long history come at once); ``only`` keeps one set. With ``progress`` the
    commits are listed first, then read with a bar that knows their number."""
    utc = Git(repo_git.cwd, {**repo_git.env, "TZ": "UTC"})
    records: Iterable[str] = utc.records("log", f"--format={_FORMAT}", _DATE,
                                         "--grep=^Gitscale-Set: ", separator="\x1e")
    if progress is not None:
        records = progress.each([r for r in records if r.strip()], "reading scaling commits")
    for record in records:
        fields = record.strip("\n").split("\x1f")
        if len(fields) != 3:
            continue
        sha, when, body = fields
        details = body_details(body)
        for value in set_trailers(body):
            line = parse_trailer(value, "")
            if line is None or (only and line.name != only):
                continue
            yield Entry(sha, when, line.name, line.previous,
                        line.replicas, line.patch, line.queued, line.running, line.reason,
                        details.get(line.name, ""))


def set_trailers(message: str) -> list[str]:
    """The values of the ``Gitscale-Set:`` trailers: lines of the message's last paragraph
    (a value continued on an indented line is joined, as git does)."""
    last = message.rstrip("\n").rsplit("\n\n", 1)[-1]
    if "\n " not in last and "\n\t" not in last:  # no continued value: one regex
        return [v.strip() for v in _SET_TRAILER.findall(last)]
    values: list[list[str]] = []
    continues = False
    for line in last.split("\n"):
        if continues and line[:1] in (" ", "\t"):
            values[-1].append(line.strip())
            continue
        key, colon, value = line.partition(":")
        continues = bool(colon) and key.strip().lower() == "gitscale-set"
        if continues:
            values.append([value.strip()])
    return [" ".join(parts) for parts in values]


def history_since(since: datetime | None) -> str | None:
    """The git date from which a clone fetches commits for ``since`` (with ``MARGIN``)."""
    return None if since is None else format_time(since - MARGIN)


def read_history(repo_git: Git, *, only: str | None = None, since: str | None = None,
                 progress: Progress | None = None) -> list[Entry]:
    """``iter_history`` as a list; ``since`` (RFC 3339) keeps the entries from then on."""
    entries = list(iter_history(repo_git, only=only, progress=progress))
    return between(entries, parse_time(since), None) if since else entries


def between(entries: list[Entry], since: datetime | None, until: datetime | None) -> list[Entry]:
    """The entries dated within [since, until] (both ends included, either may be open).

    Filtered here rather than by ``git log --since``, which stops walking at the first older
    commit and so can miss commits whose dates are out of order.
    """
    return [e for e in entries if within(e, since, until)]


def within(entry: Entry, since: datetime | None, until: datetime | None) -> bool:
    # entry.time and format_time are both "YYYY-MM-DDTHH:MM:SSZ": they sort as the times do
    return (since is None or entry.time >= format_time(since)) and \
        (until is None or entry.time <= format_time(until))
