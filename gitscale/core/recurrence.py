"""Bounded evaluation of a schedule's RRULE (RFC 5545, through dateutil).

dateutil walks a rule period by period from its start and stops only at an occurrence or the
year 9999. So a rule that cannot fire (``BYMONTH=2;BYMONTHDAY=30``) costs seconds per question,
``INTERVAL=0`` never ends, and a rule started years ago costs more every pass. Two things keep it
bounded:

- ``check`` refuses, when the config is read, every rule that cannot fire or whose numbers make no
  sense (``INTERVAL=0``, ``COUNT=-1``, ``UNTIL`` before the start, an interval longer than a year).
  "Can it fire" is answered in bounded time: a rule's pattern repeats every ``cycle_years`` (the
  Gregorian calendar repeats every 400 years, weekdays included; the interval's grid repeats too),
  so the question is asked of the same rule moved close to the year 9999, where dateutil's own
  stop is at most one cycle away.
- ``last_start`` starts the walk at the last period boundary before the window it asks about
  (when the rule has no COUNT, which counts from the real start): a pass costs the same in the
  rule's tenth year as in its first.

Pure: text and times in, times out. No clock, no I/O.
"""
from __future__ import annotations

import math
import re
from datetime import date, datetime, time, timedelta
from typing import Any

FREQS = ("YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY")
# The largest INTERVAL per FREQ: a period of at most a year (hours: a day; use FREQ=DAILY).
MAX_INTERVAL = {"YEARLY": 1, "MONTHLY": 12, "WEEKLY": 52, "DAILY": 366, "HOURLY": 24}
# Periods in 400 Gregorian years (146,097 days, exactly 20,871 weeks).
UNITS_PER_400_YEARS = {"YEARLY": 400, "MONTHLY": 4800, "WEEKLY": 20871, "DAILY": 146097,
                       "HOURLY": 146097 * 24}
MAX_COUNT = 100_000  # occurrences; COUNT counts from the start, so its walk is never shortened
LAST_YEAR = 9999  # dateutil stops here
WEEKDAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
# the most a zone's offset changes at once (daylight saving is an hour, two at most): a wall
# time this far past another is a later moment whatever the zone does between them
OFFSET_CHANGE_MAX = timedelta(hours=3)
_NAMED = re.compile(r"^(RRULE|EXRULE|RDATE|EXDATE|DTSTART)[:;]", re.IGNORECASE)


class RecurrenceError(ValueError):
    """The rule is refused; the message says why and what to write instead."""


def check(text: str, start: datetime, zone: str | None) -> None:
    """Raise RecurrenceError unless ``text`` is a rule gitscale can evaluate and that fires."""
    from dateutil.rrule import rrulestr

    first = _local(start, zone)
    rule_lines = []
    for line in _lines(text):
        named = _NAMED.match(line)
        name = named.group(1).upper() if named else "RRULE"
        if name == "DTSTART":
            raise RecurrenceError("DTSTART is not allowed in a recurrence: the schedule's "
                                  "`start` is its first occurrence")
        if name == "EXRULE":
            raise RecurrenceError("EXRULE is not supported (RFC 5545 deprecates it); list "
                                  "the dates to skip with EXDATE")
        if name == "RRULE":
            rule_lines.append(line[named.end():] if named else line)
    if len(rule_lines) != 1:
        raise RecurrenceError(f"expected one RRULE, found {len(rule_lines)} (write one "
                              "schedule per rule)")
    parts = _parts(rule_lines[0])
    freq = parts.get("FREQ", "")
    if freq in ("MINUTELY", "SECONDLY"):
        # Scaling windows are hourly or coarser: write a window of an hour with FREQ=HOURLY.
        raise RecurrenceError(f"FREQ={freq} is not supported for schedules (use FREQ=HOURLY "
                              "or coarser)")
    if "BYEASTER" in parts:
        raise RecurrenceError("BYEASTER is not RFC 5545 and is not supported")
    try:
        rule = rrulestr(text, dtstart=first)
    except (ValueError, TypeError, OverflowError) as exc:
        raise RecurrenceError(f"not an RRULE ({exc}); e.g. FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR") \
            from None
    interval = _int(parts, "INTERVAL", 1)
    if not 1 <= interval <= MAX_INTERVAL[freq]:
        raise RecurrenceError(f"INTERVAL={parts['INTERVAL']} with FREQ={freq} must be from 1 "
                              f"to {MAX_INTERVAL[freq]} (a period of at most a year"
                              f"{'; for longer, use FREQ=DAILY' if freq == 'HOURLY' else ''})")
    count = _int(parts, "COUNT", None)
    if count is not None and not 1 <= count <= MAX_COUNT:
        raise RecurrenceError(f"COUNT={parts['COUNT']} must be from 1 to {MAX_COUNT}")
    if "UNTIL" in parts:
        until = _until(parts["UNTIL"], first)
        if until < first:
            raise RecurrenceError(f"UNTIL={parts['UNTIL']} is before the schedule's start "
                                  f"({start.isoformat()}): it never fires")
    if _no_such_day(parts) or not _pattern_fires(parts, first.replace(tzinfo=None)):
        raise RecurrenceError("this rule never fires (no date matches all of its BY... parts)")
    try:
        fires = rule.after(first, inc=True) is not None
    except (ValueError, TypeError, OverflowError) as exc:
        raise RecurrenceError(f"not an RRULE ({exc}); e.g. FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR") \
            from None
    if not fires:
        raise RecurrenceError("this rule never fires (its UNTIL, COUNT and EXDATE leave no "
                              "occurrence)")


def last_start(text: str, start: datetime, zone: str | None, now: datetime,
               duration: timedelta) -> datetime | None:
    """The latest occurrence at or before ``now`` whose window (``duration`` long) still holds
    ``now``, or None. ``text`` must have passed ``check``."""
    from dateutil.rrule import rrulestr

    first = _local(start, zone)
    local_now = now.astimezone(first.tzinfo)
    lines = _lines(text)
    index = next(i for i, line in enumerate(lines) if _is_rule(line))
    parts = _parts(_rule_text(lines[index]))
    dtstart = first
    if "COUNT" not in parts:
        dtstart = max(first, _period_start(parts, first, local_now - duration))
        if dtstart != first:
            lines[index] = "RRULE:" + ";".join(f"{k}={v}" for k, v in
                                              _explicit(parts, first).items())
    rule = rrulestr("\n".join(lines), dtstart=dtstart)
    # dateutil compares wall clocks: around a change of offset, a wall time before ``now``'s
    # may be a moment after it (02:30 on the night the clocks go forward is 03:30 after the
    # change, RFC 5545's reading) and one after it a moment before (01:45 in the first pass
    # of a repeated hour, asked in the second pass at 01:30). So ask from a wall clock past
    # any such change, and take the latest occurrence whose moment has come. One walk (a
    # ``before`` per step back walked from the start each time: 2.7x slower with COUNT).
    late = now.timestamp()
    occurrence = max((o for o in rule.between(local_now - duration - OFFSET_CHANGE_MAX,
                                              local_now + OFFSET_CHANGE_MAX, inc=True)
                      if o.timestamp() <= late), key=lambda o: o.timestamp(), default=None)
    if occurrence is None or not now < occurrence + duration:
        return None
    return occurrence


def cycle_years(freq: str, interval: int) -> int:
    """Years after which the rule's pattern repeats exactly (calendar, weekdays and grid)."""
    units = UNITS_PER_400_YEARS[freq]
    return 400 * (interval // math.gcd(interval, units))


def _pattern_fires(parts: dict[str, str], first: datetime) -> bool:
    """Does the pattern (the rule without COUNT and UNTIL) fire at all? Asked of the same rule
    moved by whole cycles to just before the year 9999, so that dateutil gives up after one
    cycle at most instead of walking to the year 9999 from today."""
    from dateutil.rrule import rrulestr

    freq = parts["FREQ"]
    cycle = cycle_years(freq, _int(parts, "INTERVAL", 1))
    moves = (LAST_YEAR - 1 - cycle - first.year) // cycle
    moved = first.replace(year=first.year + moves * cycle) if moves > 0 else first
    pattern = ";".join(f"{k}={v}" for k, v in parts.items() if k not in ("COUNT", "UNTIL"))
    try:
        return rrulestr(pattern, dtstart=moved).after(moved, inc=True) is not None
    except (ValueError, TypeError, OverflowError):
        return False


def _no_such_day(parts: dict[str, str]) -> bool:
    """BYMONTHDAY days that none of the BYMONTH months has (February 30th): the common way to
    write a rule that cannot fire, answered without walking it."""
    if "BYMONTHDAY" not in parts:
        return False
    longest = {2: 29, 4: 30, 6: 30, 9: 30, 11: 30}
    try:
        months = [int(m) for m in parts["BYMONTH"].split(",")] if "BYMONTH" in parts \
            else list(range(1, 13))
        days = [abs(int(d)) for d in parts["BYMONTHDAY"].split(",")]
    except ValueError:
        return False
    return all(day > longest.get(month, 31) for month in months for day in days)


def _period_start(parts: dict[str, str], first: datetime, target: datetime) -> datetime:
    """The start of the rule's last period (on the grid of ``first`` and INTERVAL) that begins
    at or before ``target``. Walking from there finds every occurrence at or after ``target``
    that walking from ``first`` would, provided the BY... parts dateutil takes from the start
    are spelt out (``_explicit``)."""
    if target <= first:
        return first
    freq, n = parts["FREQ"], _int(parts, "INTERVAL", 1)
    zone = first.tzinfo
    if freq == "HOURLY":
        steps = (target.replace(tzinfo=None) - first.replace(tzinfo=None)) // timedelta(hours=n)
        moved = first + timedelta(hours=steps * n)  # wall-clock arithmetic, as dateutil's
        return moved.replace(minute=0, second=0, microsecond=0)
    if freq == "DAILY":
        days = (target.date() - first.date()).days // n * n
        return _midnight(first.date() + timedelta(days=days), zone)
    if freq == "WEEKLY":
        wkst = WEEKDAYS.index(parts.get("WKST", "MO"))
        week = _week_start(first.date(), wkst)
        weeks = (_week_start(target.date(), wkst) - week).days // 7 // n * n
        return _midnight(week + timedelta(weeks=weeks), zone)
    if freq == "MONTHLY":
        months = ((target.year - first.year) * 12 + target.month - first.month) // n * n
        year, month = divmod(first.month - 1 + months, 12)
        return _midnight(date(first.year + year, month + 1, 1), zone)
    years = (target.year - first.year) // n * n
    return _midnight(date(first.year + years, 1, 1), zone)


def _explicit(parts: dict[str, str], first: datetime) -> dict[str, str]:
    """``parts`` with the BY... values dateutil would take from ``first`` written out, so that
    the rule means the same from a later start."""
    out = dict(parts)
    freq = parts["FREQ"]
    if not any(k in parts for k in ("BYWEEKNO", "BYYEARDAY", "BYMONTHDAY", "BYDAY")):
        if freq == "YEARLY":
            out.setdefault("BYMONTH", str(first.month))
            out["BYMONTHDAY"] = str(first.day)
        elif freq == "MONTHLY":
            out["BYMONTHDAY"] = str(first.day)
        elif freq == "WEEKLY":
            out["BYDAY"] = WEEKDAYS[first.weekday()]
    if freq != "HOURLY":
        out.setdefault("BYHOUR", str(first.hour))
    out.setdefault("BYMINUTE", str(first.minute))
    out.setdefault("BYSECOND", str(first.second))
    return out


def _local(start: datetime, zone: str | None) -> datetime:
    if not zone:
        return start
    from zoneinfo import ZoneInfo  # (only schedules with a timezone need it)

    return start.astimezone(ZoneInfo(zone))


def _midnight(day: date, zone: Any) -> datetime:
    return datetime.combine(day, time(0), zone)


def _week_start(day: date, wkst: int) -> date:
    return day - timedelta(days=(day.weekday() - wkst) % 7)


def _lines(text: str) -> list[str]:
    """The content lines, unfolded (RFC 5545: a line starting with a space continues the last)."""
    lines: list[str] = []
    for raw in text.replace("\r\n", "\n").split("\n"):
        if raw[:1] in (" ", "\t") and lines:
            lines[-1] += raw[1:]
        elif raw.strip():
            lines.append(raw.strip())
    return lines


def _is_rule(line: str) -> bool:
    named = _NAMED.match(line)
    return named is None or named.group(1).upper() == "RRULE"


def _rule_text(line: str) -> str:
    named = _NAMED.match(line)
    return line[named.end():] if named else line


def _parts(rule: str) -> dict[str, str]:
    parts: dict[str, str] = {}
    for item in rule.split(";"):
        key, _, value = item.partition("=")
        if key.strip():
            parts[key.strip().upper()] = value.strip().upper()
    return parts


def _int(parts: dict[str, str], key: str, default: int | None) -> Any:
    if key not in parts:
        return default
    value = parts[key]
    if not re.fullmatch(r"[+-]?\d{1,9}", value):
        raise RecurrenceError(f"{key}={value} is not a whole number")
    return int(value)


def _until(value: str, first: datetime) -> datetime:
    from dateutil.parser import parse

    try:
        until: datetime = parse(value)
    except (ValueError, OverflowError):
        raise RecurrenceError(f"UNTIL={value} is not a date (e.g. 20261231T000000Z)") from None
    return until if until.tzinfo is not None else until.replace(tzinfo=first.tzinfo)
