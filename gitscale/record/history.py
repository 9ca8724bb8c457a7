"""The scaling history: gitscale's commits read back from their ``Gitscale-Set`` trailers."""
from __future__ import annotations

import re
import time
from functools import lru_cache
from datetime import datetime, timedelta
from typing import Collection, Iterable, Iterator, NamedTuple

from gitscale.record.commitmsg import WRITTEN, body_details, parse_trailer
from gitscale.repo.git import Git
from gitscale.progress import Progress
from gitscale.timeutil import format_time, parse_time

# What git is asked for, and no more: the commit, its committer time in seconds (formatted
# here: git's date formatting was a sixth of the log) and the raw message (trailers are read
# here: git's trailer parser took a third of the log). --no-mailmap: with log.mailmap (on by
# default) git reads HEAD:.mailmap, which in a clone without trees is a second fetch from the
# remote. The other options keep a user's log.* settings (signatures, decorations, an output
# encoding) out of a format that is parsed.
LOG_ARGS = ("log", "--format=%H%x1f%ct%x1f%B%x1e", "--no-mailmap", "--no-decorate",
        "--no-show-signature", "--encoding=UTF-8", "--fixed-strings", "--grep=Gitscale-Set: ")
_KEY = "Gitscale-Set: "  # a scaling commit has a line starting with it (checked here: the
_LINE_KEY = "\n" + _KEY  # fixed-string grep above also lets through the key inside a line)
# A trailer line, matched from the newline before it: a pattern that starts with a literal is
# searched for that character (a line at a time), one that starts with ^ at every position.
_SET_TRAILER = re.compile(r"\n[ \t]*(?i:gitscale-set)[ \t]*:([^\n]*)")
# A whole record as gitscale writes its commits (``commitmsg.format_message``), read in one
# match: the commit, its seconds, the message (subject and body lines, a blank line, then the last
# paragraph: the first Gitscale-Set trailer's fields in groups, any further ones as written in
# the last group, an optional Gitscale-Events and the Gitscale-Base), the newlines around it and
# the separator. Nearly every scaling commit is one; any other record (a hand-edited trailer,
# another trailer, a continued value, CRLF) goes to the general reader (``_read_record``), whose
# reading of these it must equal: every line of that last paragraph starts with "Gitscale-", so
# it holds no blank line (it is the last paragraph) and no continued value, and only its
# Gitscale-Set lines are trailers the general reader takes, their values as WRITTEN matches them.
_WRITTEN_LINE = "Gitscale-Set: " + WRITTEN.pattern + r"\n"
_RECORD = re.compile(
    r"\n*([0-9a-f]{40}(?:[0-9a-f]{24})?)\x1f([0-9]+)\x1f("  # the commit (SHA-1 or SHA-256),
    # its seconds, then the message:
    r"(?:[^\n\x1e\x1f]*+\n)*?\n"  # its lines up to a blank one (the fewest that do)
    + _WRITTEN_LINE + "((?:" + re.sub(r"\((?!\?)", "(?:", _WRITTEN_LINE) + r")*)"
    r"(?:Gitscale-Events: [^\n\x1e\x1f]*\n)?Gitscale-Base: [^\n\x1e\x1f]*)\n*(?:\x1e|\Z)")
_MORE_WRITTEN = re.compile(_WRITTEN_LINE)
MARGIN = timedelta(days=1)  # history_since: commits dated this much out of order still show


class Entry(NamedTuple):
    """One set's line in one scaling commit. ``time`` is RFC 3339 UTC (the commit date).

    Immutable and typed like a frozen dataclass, but built as a tuple: a long history makes
    one per row, and a frozen dataclass's ``__init__`` (a ``object.__setattr__`` per field)
    was a tenth of the time `history` spent per row."""

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


class Skipped(NamedTuple):
    """A ``Gitscale-Set`` trailer that could not be read: its commit and its value."""

    commit: str
    value: str


Only = str | Collection[str] | None  # one set's name, or its names (``previousNames`` too)


def _wanted(only: Only) -> frozenset[str] | None:
    if not only:
        return None
    return frozenset((only,) if isinstance(only, str) else only)


def iter_history(repo_git: Git, *, only: Only = None, details: bool = True,
                 progress: Progress | None = None,
                 skipped: list[Skipped] | None = None) -> Iterator[Entry]:
    """Every scaling commit reachable from HEAD, newest first, as git walks them (the first
    rows of a long history come at once); ``only`` keeps one set (or the names given: a
    renamed set's old ones too, each row under the name its commit gives); ``details`` False leaves
    ``Entry.detail`` empty (the table does not show it). With ``progress`` the commits are
    listed first, then read with a bar that knows their number. The trailers that could not
    be read go to ``skipped``."""
    # GIT_FLUSH=0: into a pipe git log writes a commit at a time otherwise (for a pager), a
    # write and a wake-up of this reader per commit, which cost more than the log itself;
    # buffered, the first rows still come after git's first few kilobytes.
    buffered = Git(repo_git.cwd, {**repo_git.env, "GIT_FLUSH": "0"})
    if progress is None:  # a block of records at a time: no string per record
        for block in buffered.blocks(*LOG_ARGS, separator="\x1e"):
            yield from parse_block(block, only=only, details=details, skipped=skipped)
        return
    records = buffered.records(*LOG_ARGS, separator="\x1e")
    for record in progress.each([r for r in records if r.strip()], "reading scaling commits"):
        yield from parse_record(record, only=only, details=details, skipped=skipped)


def parse_record(record: str, *, only: Only = None, details: bool = True,
                 skipped: list[Skipped] | None = None) -> list[Entry]:
    """The entries of one ``git log`` record (commit, committer time in seconds, message);
    the ``Gitscale-Set`` trailers it cannot read (of ``only``, or of any set) go to
    ``skipped``."""
    return list(parse_block(record, only=only, details=details, skipped=skipped))


def parse_block(text: str, *, only: Only = None, details: bool = True,
                skipped: list[Skipped] | None = None) -> Iterator[Entry]:
    """The entries of the ``git log`` records in ``text``, each ended by ``\\x1e`` (the last
    may not be), as ``parse_record`` reads each: a record as gitscale writes it in one match
    of ``_RECORD``, any other by the general reader."""
    pos, end = 0, len(text)
    match = _RECORD.match
    wanted = _wanted(only)
    while pos < end:
        found = match(text, pos)
        if found is None:
            stop = text.find("\x1e", pos)
            stop = end if stop < 0 else stop
            yield from _read_record(text[pos:stop], wanted, details, skipped)
            pos = stop + 1
            continue
        pos = found.end()
        groups = found.groups()
        sha, seconds, message, more = groups[0], groups[1], groups[2], groups[10]
        when = utc_text(int(seconds))
        known: dict[str, str] | None = None if details else {}
        for name, replicas, previous, patch, queued, running, reason in (
                [groups[3:10]] if not more else
                [groups[3:10], *(line.groups() for line in _MORE_WRITTEN.finditer(more))]):
            if wanted is not None and name not in wanted:
                continue
            if known is None:
                known = body_details(message)
            yield Entry(sha, when, name, None if previous == "-" else int(previous),
                        int(replicas), None if patch == "-" else int(patch),
                        None if queued == "-" else int(queued),
                        None if running == "-" else int(running), reason, known.get(name, ""))


def _read_record(record: str, wanted: frozenset[str] | None, details: bool,
                 skipped: list[Skipped] | None) -> list[Entry]:
    """The general reader of one record: any message, any spelling of the trailer."""
    fields = record.strip("\n").split("\x1f")
    if len(fields) != 3:
        return []
    sha, seconds, message = fields
    if not (message.startswith(_KEY) or _LINE_KEY in message):
        return []
    when = utc_text(int(seconds))
    found: list[Entry] = []
    known: dict[str, str] | None = None if details else {}
    # the last paragraph (the message has no trailing newline), after a newline of its own
    cut = message.rfind("\n\n")
    last = message[cut + 1:] if cut >= 0 else "\n" + message
    if "\n " in last or "\n\t" in last:  # a value continued on another line
        values = set_trailers(message)
    else:  # set_trailers' own first case, without the call: nearly every commit
        values = [value.strip() for value in _SET_TRAILER.findall(last)]
    for value in values:
        # as gitscale writes it (nearly every line): one match, no SetLine in between
        written = WRITTEN.fullmatch(value)  # set_trailers stripped it
        if written:
            name, replicas, previous, patch, queued, running, reason = written.groups()
            if wanted is not None and name not in wanted:
                continue
            if known is None:
                known = body_details(message)
            found.append(Entry(sha, when, name, None if previous == "-" else int(previous),
                               int(replicas), None if patch == "-" else int(patch),
                               None if queued == "-" else int(queued),
                               None if running == "-" else int(running), reason,
                               known.get(name, "")))
            continue
        line = parse_trailer(value)
        if line is None:
            if skipped is not None and (wanted is None or value.partition(" ")[0] in wanted):
                skipped.append(Skipped(sha, value))
            continue
        if wanted is not None and line.name not in wanted:
            continue
        if known is None:
            known = body_details(message)
        found.append(Entry(sha, when, line.name, line.previous, line.replicas, line.patch,
                           line.queued, line.running, line.reason, known.get(line.name, "")))
    return found


def utc_text(seconds: int) -> str:
    """``seconds`` since the epoch as RFC 3339 UTC (``2026-11-21T09:00:00Z``), as git's
    ``--date=format-local:%Y-%m-%dT%H:%M:%SZ`` prints it in UTC: a time past the C library's
    years as the epoch. The hour is formatted once (commits come newest first, many an hour),
    minutes and seconds are looked up."""
    hour, rest = divmod(seconds, 3600)
    prefix = _hour(hour)
    return "1970-01-01T00:00:00Z" if prefix is None else prefix + _MINUTES_SECONDS[rest]


@lru_cache(maxsize=256)
def _hour(hour: int) -> str | None:
    try:
        return time.strftime("%Y-%m-%dT%H:", time.gmtime(hour * 3600))
    except (OverflowError, OSError, ValueError):
        return None


_MINUTES_SECONDS = tuple(f"{minute:02d}:{second:02d}Z" for minute in range(60)
                         for second in range(60))


def set_trailers(message: str) -> list[str]:
    """The values of the ``Gitscale-Set:`` trailers: lines of the message's last paragraph
    (a value continued on an indented line is joined, as git does)."""
    last = message.rstrip("\n").rsplit("\n\n", 1)[-1]
    if "\n " not in last and "\n\t" not in last:  # no continued value: one regex
        return [v.strip() for v in _SET_TRAILER.findall("\n" + last)]
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


def read_history(repo_git: Git, *, only: Only = None, since: str | None = None,
                 progress: Progress | None = None,
                 skipped: list[Skipped] | None = None) -> list[Entry]:
    """``iter_history`` as a list; ``since`` (RFC 3339) keeps the entries from then on."""
    entries = list(iter_history(repo_git, only=only, progress=progress, skipped=skipped))
    return between(entries, parse_time(since), None) if since else entries


def oldest_first(entries: Iterable[Entry]) -> list[Entry]:
    """``entries`` as ``read_history`` gives them (git's order: newest first), oldest first.
    By time, and within one second (commit times are whole seconds: two passes that raced, a
    pinned ``--now``) in git's order reversed: a sort by time alone kept the newest of a second
    first, and the last value drawn or replayed was an older one (as ``series`` does)."""
    ordered = list(entries)
    ordered.reverse()
    ordered.sort(key=lambda e: e.time)  # stable; "YYYY-MM-DDTHH:MM:SSZ" sorts as times do
    return ordered


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
