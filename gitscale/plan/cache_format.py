"""The state cache as it is stored: plain tuples stamped with their format and gitscale's
version, and the checks a loaded cache passes before a pass trusts a row of it.

The state file is in marshal's format, behind a line naming it and the Python that wrote it
and a line with its CRC-32 (``dump_state``; marshal is not made for damaged data): the rows
are plain values, which marshal holds, and it loads them 2× faster and writes them 3× faster
than pickle (at 10,000 sets: 10 against 23 ms, and 8 against 27 ms).

A manifest's state is a ``Row`` keyed by its blob id and the object in it (``row_key``); a
settled decision is a ``Settled`` row per set. Both are tuples of plain values: a pickle of ten
thousand dataclasses loads 3× slower. ``as_located`` and ``why_of`` make them what a pass uses
again, and refuse a row gitscale did not write (the file is read again, and the row replaced).
"""
from __future__ import annotations

import marshal
import pickle
import sys
import zlib
from datetime import datetime
from pathlib import Path
from typing import Any

from gitscale import __version__
from gitscale.config.load import ObjectRef
from gitscale.core.model import NO_WHY, Cap, CapBy, Current, Drain, Reason, Why
from gitscale.files import write_cache
from gitscale.manifest.target import Located, owned_for

FORMAT = 15  # 6: settled decisions; 7: spec.backlog; 8: the demand series of forecast sets;
# 9: a row names its kind's apiVersion (where the owned fields are: target.KINDS); 10: no
# settled answer on a last scale-up in the future (core.decide.CLOCK_SKEW_TOLERANCE); 11: a
# settled decision's ``why`` (held until, cap, drain), so a cached one still explains itself;
# 12: an absent replicas read as the kind's default (``Owned.unset``: 1 for apps/v1 kinds);
# 13: a paused/drained annotation that is not "true" or "false" is refused (a row kept from
# before read it as false), and so are configs a parse kept from before the checks of paths,
# zones and API URLs were tightened; 14: a row keeps a RunnerSet's spec.effectiveTime (jobs
# that still wait long after it are re-affirmed for: core.decide.still_waiting); 15: ... and
# the still-waiting re-affirms in a row it ends (gitscale.dev/still-waiting: each doubles the
# wait before the next, core.still_waiting), and a settled decision's ``why`` when the next
# comes (``Why.reaffirm_at``)
STAMP = (FORMAT, __version__)  # what a file must begin with to be read

# (document index, apiVersion, kind, name, replicas, patch ID, last scale-up, fingerprint,
# drained, paused, backlog, written at, re-affirms in a row): where the owned fields are is
# the kind's row of target.KINDS; times as ISO 8601 (datetimes pickle 3× slower)
Row = tuple[int, str, str, str, "int | None", "int | None", "str | None", "str | None", bool,
            bool, "int | None", "str | None", int]
# set name → (config digest, blob id, queued, running, job ids, from, until (POSIX seconds),
# replicas, patch ID, reason, detail, held until (ISO 8601), capped by, cap, drain, re-affirm
# at (ISO 8601)) of a decision that wrote nothing; the last five are its ``why``
# (core.model.Why)
Settled = tuple[str, str, int, int, "frozenset[str] | None", float, float, int, "int | None",
                str, str, "str | None", "str | None", "int | None", "str | None",
                "str | None"]


def row_key(blob: str, ref: ObjectRef) -> str:
    """A manifest row's key: the blob of its file and the object in it."""
    return f"{blob}\0{ref.kind}\0{ref.name}\0{ref.namespace}"


def as_row(found: Located) -> Row:
    c = found.current
    last_up = c.last_scale_up.isoformat() if c.last_scale_up is not None else None
    written = c.written_at.isoformat() if c.written_at is not None else None
    return (found.index, found.api_version, found.kind, found.name, c.replicas, c.patch_id,
            last_up, c.fingerprint, c.drained, c.paused, c.backlog, written, c.reaffirms)


def as_located(row: Row) -> Located | None:
    """The row as a pass uses it; None when the kind is no longer in the table, or the row is
    not one gitscale wrote (the file is read again, and the row replaced)."""
    (index, api_version, kind, name, replicas, patch_id, last_up, fingerprint, drained,
     paused, backlog, written, reaffirms) = row  # (``malformed``: a 13-tuple)
    if not (type(index) is int and type(name) is str and _int_or_none(replicas)
            and _int_or_none(patch_id) and _int_or_none(backlog)
            and (fingerprint is None or type(fingerprint) is str)
            and type(drained) is bool and type(paused) is bool
            and type(reaffirms) is int and reaffirms >= 0):
        return None
    try:
        owned = owned_for(api_version, kind)
        when = datetime.fromisoformat(last_up) if last_up is not None else None
        written_at = datetime.fromisoformat(written) if written is not None else None
    except (TypeError, ValueError):
        return None
    if owned is None:
        return None
    return Located(index, api_version, kind, name, owned,
                   Current(replicas, patch_id, when, fingerprint, drained, paused,
                           backlog=backlog, written_at=written_at, reaffirms=reaffirms))


def _int_or_none(value: object) -> bool:
    return value is None or type(value) is int


def _settled_row(row: object) -> bool:
    """Is ``row`` a ``Settled`` as gitscale writes it (one per set: cheap to check all)?"""
    if type(row) is not tuple or len(row) != 16:
        return False
    (key, blob, queued, running, jobs, since, until, replicas, patch, reason, detail,
     held_until, capped_by, cap, drain, reaffirm_at) = row
    return (type(key) is str and type(blob) is str and type(queued) is int
            and type(running) is int and (jobs is None or type(jobs) is frozenset)
            and type(since) is float and type(until) is float and type(replicas) is int
            and _int_or_none(patch) and reason in _REASONS and type(detail) is str
            and (held_until is None or type(held_until) is str)
            and (capped_by is None) == (cap is None)
            and (capped_by is None or (capped_by in _CAPS and type(cap) is int))
            and (drain is None or drain in _DRAINS)
            and (reaffirm_at is None or type(reaffirm_at) is str))


_REASONS = frozenset(r.value for r in Reason)
_CAPS = frozenset(c.value for c in CapBy)
_DRAINS = frozenset(d.value for d in Drain)


def why_row(why: Why) -> tuple[str | None, str | None, int | None, str | None, str | None]:
    """A decision's ``why`` as the last five items of its ``Settled`` row."""
    held = why.held_until.isoformat() if why.held_until is not None else None
    cap = why.cap
    again = why.reaffirm_at.isoformat() if why.reaffirm_at is not None else None
    return (held, cap.by.value if cap else None, cap.at if cap else None,
            why.drain.value if why.drain else None, again)


def why_of(row: Settled) -> Why | None:
    """The ``why`` of a ``Settled`` row (``_settled_row`` checked its types); None when its
    time cannot be read (then the set is decided again)."""
    held, capped_by, cap, drain, again = row[11:]
    if held is None and capped_by is None and drain is None and again is None:
        return NO_WHY  # nothing held it, as for nearly every settled set: 8 ms of 10,000 Whys
    try:
        when = datetime.fromisoformat(held) if held is not None else None
        reaffirm_at = datetime.fromisoformat(again) if again is not None else None
    except ValueError:
        return None
    return Why(held_until=when,
               cap=Cap(CapBy(capped_by), cap) if capped_by is not None and cap is not None
               else None,
               drain=Drain(drain) if drain is not None else None, reaffirm_at=reaffirm_at)


def malformed(rows: object, jobs: object, settled: object) -> str | None:
    """What is wrong with a loaded cache whose stamp is right, or None. The manifest rows
    (tens of thousands) are checked for their shape here and for their fields when used."""
    if not (isinstance(rows, dict) and isinstance(jobs, dict) and isinstance(settled, dict)):
        return "not the tables gitscale writes"
    if not all(type(row) is tuple and len(row) == 13 for row in rows.values()):
        return "a manifest row is not one gitscale writes"
    if not all(type(ids) is frozenset for ids in jobs.values()):
        return "a job-id set is not one gitscale writes"
    if not all(_settled_row(row) for row in settled.values()):
        return "a settled decision is not one gitscale writes"
    return None


# marshal's format may change with Python's version: a file another Python wrote is not read
STATE_HEADER = b"gitscale-state marshal %d python %d.%d\n" % (marshal.version,
                                                              *sys.version_info[:2])


def dump_state(value: Any) -> bytes | None:
    """The state file's bytes for ``value``; None when it holds what marshal cannot (a value
    gitscale never puts there: then the cache is not saved, and the next run is only slower)."""
    try:
        payload = marshal.dumps(value)
    except ValueError:
        return None
    return STATE_HEADER + b"%08x\n" % zlib.crc32(payload) + payload


def load_state(data: bytes) -> Any:
    """What ``dump_state`` wrote; None for a file of another format or Python (not an error:
    only older). Raises ValueError on a damaged file: its checksum is checked first, as
    marshal is not made for damaged data (a few flipped bytes crashed the interpreter with a
    segmentation fault, every pass until the file was removed)."""
    if not data.startswith(STATE_HEADER):
        return None
    start = len(STATE_HEADER) + 9  # the checksum's line: 8 hex digits and a newline
    payload = memoryview(data)[start:]
    stated = data[len(STATE_HEADER):start]
    if stated != b"%08x\n" % zlib.crc32(payload):
        raise ValueError("damaged: its checksum does not match")
    return marshal.loads(payload)


def write_state(path: Path, value: Any) -> bool:
    """``dump_state`` into the cache file ``path``, whole or not at all (as ``write``)."""
    data = dump_state(value)
    return data is not None and write_cache(path, lambda out: out.write(data))


def write(path: Path, value: Any) -> bool:
    """Pickle ``value`` into the cache file ``path``, whole or not at all; False when that
    fails (a read-only or full disk: said once, and the pass goes on without a disk cache)."""
    return write_cache(path, lambda out: pickle.dump(value, out, protocol=5))
