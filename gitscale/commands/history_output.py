"""`gitscale history`'s output: the table a line at a time (columns set by the first rows, so a
long history shows at once), the JSON an entry at a time, and text from commit messages made
safe for a terminal."""
from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii
from datetime import timezone, tzinfo
from typing import Iterable, Iterator

from gitscale.commands.history_rows import HandRow, Row
from gitscale.record.history import Entry, Skipped
from gitscale.timeutil import parse_time


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


HEADER = ["TIME", "COMMIT", "SET", "OLD→NEW", "PATCH", "DEMAND", "REASON"]
ALIGNED = 200  # rows read before the first is shown: their widths set the columns


def history_text(entries: list[Entry], zone: tzinfo = timezone.utc) -> str:
    return "".join(line + "\n" for line in history_lines(entries, zone))


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
