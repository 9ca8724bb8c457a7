"""`gitscale history`: the scaling commits as a table or JSON, and optionally a chart."""
from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, NamedTuple

import click

from gitscale.commands import EXIT_OK, RepoOptions
from gitscale.errors import InputError
from gitscale.record.history import Entry, Skipped, between, history_since, iter_history, \
    read_history, within
from gitscale.progress import Progress
from gitscale.timeutil import parse_time
from gitscale.repo.opening import open_workspace
from gitscale.repo.workspace import Workspace

if TYPE_CHECKING:
    from gitscale.config.load import ObjectRef


class HandRow(NamedTuple):
    """A commit that is not gitscale's but changed what gitscale owns in a managed manifest
    (``set``: that set; None: gitscale.yaml): its author and subject, and the set's replicas
    and patch ID before (``previous``) and after it, each when its object could be read."""

    commit: str
    time: str
    set: str | None
    previous: int | None
    replicas: int | None
    patch: int | None
    author: str
    subject: str


Row = Entry | HandRow


def run_history(opts: RepoOptions, *, only: str | None, since: str | None, output: str,
                chart: str | None, until: str | None = None, tz: str = "utc") -> int:
    start, end = _time("--since", since), _time("--until", until)
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
        if chart_path is not None:  # a chart needs every entry first
            with Progress("reading scaling commits", None, show=output == "text") as bar:
                everything = read_history(ws.git, only=only, progress=bar.if_shown(),
                                          skipped=skipped)
            _write_chart(everything, chart_path, only, start, end, zone)
            found: Iterable[Entry] = between(everything, start, end)
        else:
            with Progress("reading scaling commits", None, show=output == "text") as bar:
                shown = bar.if_shown()
                # streamed: the first rows show while git still walks the history; with a
                # bar on the terminal, read under the bar and shown once it is erased
                scaling = iter_history(ws.git, only=only, progress=shown,
                                       details=output == "json", skipped=skipped)
                rows: Iterable[Row] = scaling
                if ws.mode == "checkout":  # commits by people, read alongside (trees here)
                    rows = merged(scaling, hand_rows(ws, opts.config, only))
                    note = unknown_set_note(ws, opts.config, only)
                else:
                    note = unseen_note(ws)
                if start or end:
                    rows = (e for e in rows if within(e, start, end))  # type: ignore[arg-type]
                found = rows  # type: ignore[assignment]
                if shown is not None:
                    found = list(found)
        # Filtered here rather than by `git log --since`, which stops walking at the first
        # older commit and so can miss commits whose dates are out of order.
        lines = json_lines(found) if output == "json" else history_lines(
            found, zone, "(no scaling commits)" if only is None
            else f"(no scaling commits of set {only!r})")
        _stream(lines)
    if skipped:
        click.echo(unread_line(skipped), err=True)
    if note:
        click.echo(note, err=True)
    return EXIT_OK


def hand_rows(ws: Workspace, config_path: str, only: str | None) -> Iterator[HandRow]:
    """The commits that are not gitscale's and change what gitscale owns in a managed manifest
    (of ``only``, when given) or the config file, newest first: a row per set whose owned
    fields (replicas, patch ID, the paused and drained annotations) each changed, with what the
    set's object says before and after it; one row (set None) for a change of the config file
    (any: what it means is the config's business). A manifest edit that leaves them as they
    were (a label, an image bumped by a bot) is no row. The managed paths are those of the
    config in the checkout; a config that cannot be read shows none (the scaling rows still
    do). A merge is compared with its first parent, and is a row only for what it made
    anew: a path that differs from every parent (``log -c``) whose owned fields are not
    those of one of its other parents (the merged side's own commits are rows already)."""
    from gitscale.config.load import load_config
    from gitscale.errors import GitscaleError
    from gitscale.record.manual import iter_manual, with_blobs

    try:
        config = load_config(ws.root, config_path)
    except GitscaleError:
        return
    by_path: dict[str, list[tuple[str, ObjectRef]]] = {}
    for runner_set in config.sets:
        if only is None or runner_set.name == only:
            by_path.setdefault(runner_set.manifest, []).append((runner_set.name,
                                                                runner_set.object))
    owned = _OwnedReader()
    for commit, blobs in with_blobs(ws.git, iter_manual(ws.git, [config.path, *by_path]),
                                    by_path):
        touched = [c for c in commit.changes if c.path in by_path]
        if not touched:
            yield HandRow(commit.commit, commit.time, None, None, None, None, commit.author,
                          commit.subject)
            continue
        for path, before, after, others in touched:
            for name, ref in by_path[path]:
                old = owned.read(path, before, blobs, ref)
                new = owned.read(path, after, blobs, ref)
                if old is not None and new is not None and old == new:
                    continue  # a label, an image, a comment: nothing gitscale owns
                if new is not None and any(owned.read(path, other, blobs, ref) == new
                                           for other in others):
                    continue  # a merge bringing a side's values: that side's commits say so
                yield HandRow(commit.commit, commit.time, name,
                              None if old is None else old[0], None if new is None else new[0],
                              None if new is None else new[1], commit.author, commit.subject)


Owned = tuple[int | None, int | None, bool, bool]  # replicas, patch ID, paused, drained


class _OwnedReader:
    """The owned fields of a set's object in a blob, read with the manifest code
    (``manifest.target.locate``: the line reader, then PyYAML) once per blob and object."""

    KEPT = 4096  # a commit's blob before is usually the next older one's after

    def __init__(self) -> None:
        self.seen: dict[tuple[str, ObjectRef], Owned | None] = {}

    def read(self, path: str, blob: str | None, blobs: dict[str, bytes],
             ref: ObjectRef) -> Owned | None:
        """None: no blob (deleted), not read, or its object cannot be read there."""
        from gitscale.errors import GitscaleError
        from gitscale.manifest.target import locate

        if blob is None or blob not in blobs:
            return None
        key = (blob, ref)
        if key in self.seen:
            return self.seen[key]
        if len(self.seen) >= self.KEPT:
            self.seen.clear()
        found: Owned | None
        try:
            now = locate(path, blobs[blob].decode("utf-8"), ref).current
            found = (now.replicas, now.patch_id, now.paused, now.drained)
        except (GitscaleError, UnicodeDecodeError):
            found = None  # "manual edit" without a count: the object cannot be read there
        self.seen[key] = found
        return found


def merged(scaling: Iterator[Entry], hand: Iterator[HandRow]) -> Iterator[Row]:
    """Both, newest first: a commit by a person is shown before the scaling rows it is no
    older than (a revert comes after what it reverts). Both walks go on as the rows are read,
    so the first rows still show at once."""
    pending = next(hand, None)
    for entry in scaling:
        while pending is not None and pending.time >= entry.time:
            yield pending
            pending = next(hand, None)
        yield entry
    if pending is not None:
        yield pending
        yield from hand


def unseen_note(ws: Workspace) -> str | None:
    """Over a clone (commit messages, no trees), commits by people are not looked into: say how
    many come after the newest scaling commit, where they may have changed a set."""
    from gitscale.record.manual import unseen_after

    found = unseen_after(ws.git)
    if found is None:
        return None
    newest, count = found
    return (f"history: {count} commit{'s' if count != 1 else ''} after the newest scaling "
            f"commit ({newest[:10]}) {'are' if count != 1 else 'is'} not gitscale's and may have "
            "changed a set (a revert, a pause): run `gitscale history` in a checkout to see "
            f"{'them' if count != 1 else 'it'} as rows, or `git log {newest[:10]}..`")


def unread_line(skipped: list[Skipped]) -> str:
    """One line for the trailers that could not be read, naming the first (a hand-written or
    damaged trailer is not passed over without a word)."""
    first = skipped[0]
    value = first.value if len(first.value) <= 80 else first.value[:80] + "…"
    many = len(skipped) != 1
    return (f"history: {len(skipped)} Gitscale-Set trailer{'s' if many else ''} could not be "
            f"read (first: {first.commit[:10]} line \"Gitscale-Set: {shown(value)}\")")


def shown(text: str) -> str:
    """``text`` safe for a terminal: a control character (an escape sequence in a commit
    message would move the cursor, retitle the window…) is written as its escape, ``\\x1b``."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)


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


def json_lines(entries: Iterable[Row]) -> Iterator[str]:
    """The lines of ``json.dumps(list, indent=2)``, an entry at a time. A commit by a person
    has the same keys (``reason`` "manual", ``detail`` its subject; ``queued`` and ``running``
    null; ``previous``, ``replicas`` and ``patch`` null when its object could not be read
    before or after it) and two more, ``author`` and ``subject``."""
    held: str | None = None
    for entry in entries:
        if isinstance(entry, HandRow):
            item = _hand_json(entry)
        else:
            item = "  {\n" + ",\n".join(f"    {key}: {_json_value(getattr(entry, name))}"
                                        for name, key in _JSON_KEYS) + "\n  }"
        if held is None:
            yield "["
        else:
            yield held + ","
        held = item
    if held is None:
        yield "[]"
    else:
        yield held
        yield "]"


_JSON_KEYS = [(name, json.dumps(name)) for name in Entry._fields]


def _hand_json(row: HandRow) -> str:
    fields = {"commit": row.commit, "time": row.time, "set": row.set, "previous": row.previous,
              "replicas": row.replicas, "patch": row.patch, "queued": None, "running": None,
              "reason": "manual", "detail": row.subject, "author": row.author,
              "subject": row.subject}
    return "  {\n" + ",\n".join(f"    {json.dumps(k)}: {json.dumps(v)}"
                                for k, v in fields.items()) + "\n  }"


def _json_value(value: str | int | None) -> str:
    """``json.dumps(value)`` for an Entry's field (str, int or None) without the encoder
    object that ``json.dumps(..., indent=2)`` builds per call in pure Python."""
    if isinstance(value, str):
        return encode_basestring_ascii(value)
    return "null" if value is None else int.__repr__(value)


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


HEADER = ["TIME", "COMMIT", "SET", "OLD→NEW", "PATCH", "DEMAND", "REASON"]
ALIGNED = 200  # rows read before the first is shown: their widths set the columns


def history_text(entries: list[Entry], zone: tzinfo = timezone.utc) -> str:
    return "".join(line + "\n" for line in history_lines(entries, zone))


def unknown_set_note(ws: Workspace, config_path: str, only: str | None) -> str | None:
    """In a checkout, a --set that gitscale.yaml does not name (a typo, or a set removed since,
    whose commits are still shown) is said on stderr, with the names it has."""
    from gitscale.config.load import load_config
    from gitscale.errors import GitscaleError

    if only is None:
        return None
    try:
        names = [s.name for s in load_config(ws.root, config_path).sets]
    except GitscaleError:
        return None
    if only in names:
        return None
    return (f"history: {only!r} is not a set of {config_path} (its sets: "
            f"{', '.join(names) or 'none'}); showing the scaling commits that name it")


def history_lines(entries: Iterable[Row], zone: tzinfo = timezone.utc,
                  empty: str = "(no scaling commits)") -> Iterator[str]:
    """The table a line at a time. Columns take the widths of the first ``ALIGNED`` rows, so
    the first lines of a long history show at once; a wider row further down widens its cell
    only."""
    rows: list[tuple[str, ...]] = [tuple(HEADER)]
    form: str | None = None
    utc = zone is timezone.utc
    for e in entries:
        if isinstance(e, HandRow):
            row = _hand_cells(e, zone)
        else:
            commit, when, name, previous, replicas, patch, queued, running, reason, _ = e
            row = (when if utc else e.when.astimezone(zone).isoformat(), commit[:10],
                   name if name.isprintable() else shown(name),
                   f"{'-' if previous is None else previous}→{replicas}",
                   "-" if patch is None else str(patch),
                   "-" if queued is None else f"{queued}q+{running}r",
                   reason if reason.isprintable() else shown(reason))
        if form is not None:
            yield (form % row).rstrip()
            continue
        rows.append(row)
        if len(rows) > ALIGNED:
            form = _layout(rows)
            yield from ((form % r).rstrip() for r in rows)
    if form is None:
        form = _layout(rows)
        yield from ((form % r).rstrip() for r in rows)
        if len(rows) == 1:
            yield empty


def _hand_cells(row: HandRow, zone: tzinfo) -> tuple[str, ...]:
    """A commit by a person: ``3→5`` (the set's count before and after it; ``?`` before when
    the object could not be read there, ``-`` when it cannot be read after), and who did what
    in the reason column."""
    when = row.time if zone is timezone.utc else parse_time(row.time).astimezone(zone).isoformat()
    what = "manual edit" + ("" if row.set is not None else " of the config")
    counts = "-" if row.replicas is None else \
        f"{'?' if row.previous is None else row.previous}→{row.replicas}"
    return (when, row.commit[:10], "*" if row.set is None else shown(row.set), counts,
            "-" if row.patch is None else str(row.patch), "-",
            f"{what} by {shown(row.author)}: {shown(row.subject)}")


def _layout(rows: list[tuple[str, ...]]) -> str:
    """The %-format of a line: each cell padded to the widest of ``rows`` in its column (a
    longer cell later is not cut), two spaces between (the caller strips trailing blanks)."""
    return "  ".join(f"%-{max(len(r[i]) for r in rows)}s" for i in range(len(rows[0])))
