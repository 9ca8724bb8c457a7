"""A policy as written (inline in gitscale.yaml, or a preset's file) → ``core.policy.Policy``:
the schema-valid mapping with its defaults applied, and what a schema cannot check (minimum
above maximum, durations, time zones, recurrences, a forecast's bounds) refused at its line."""
from __future__ import annotations

from typing import Any

from gitscale.core.forecast import MAX_LOOKBACK, MIN_LOOKBACK, ForecastPolicy
from gitscale.core.policy import Policy, Schedule
from gitscale.errors import ConfigError, shown
from gitscale.timeutil import parse_duration, parse_time
from gitscale.yamlio.read import Document

# An inline policy's keys default to the `default` preset's values (policies/default.yaml: 0–10,
# buffer 0, 5m), so that writing the first policy by hand changes only what it says: a delay of
# 0 would re-write the count after every completed job (about twice the commits on spiky demand).
DEFAULT_SCALE_DOWN_DELAY = "5m"


def build_policy(raw: dict[str, Any], document: Document, at: list[Any], source: str) -> Policy:
    """Turn a schema-valid policy mapping into a Policy, checking what a schema cannot."""
    def fail(key: list[Any], message: str) -> ConfigError:
        return ConfigError(source, message, document.line_of([*at, *key]))

    lo = raw.get("minReplicas", 0)
    hi = raw.get("maxReplicas", max(lo, 10))
    if lo > hi:
        raise fail(["minReplicas"], f"minReplicas {lo} is greater than maxReplicas {hi}")
    delay = raw.get("scaleDownDelay", DEFAULT_SCALE_DOWN_DELAY)
    try:
        scale_down_delay = parse_duration(delay)
    except ValueError as exc:
        raise fail(["scaleDownDelay"], str(exc)) from None
    schedules = []
    for i, item in enumerate(raw.get("schedules", [])):
        schedules.append(_schedule(item, lambda k, m, i=i: fail(["schedules", i, k], m)))
    forecast = None
    if "forecast" in raw:
        forecast = _forecast(raw["forecast"], schedules,
                             lambda k, m: fail(["forecast", *k], m))
    return Policy(
        min_replicas=lo,
        max_replicas=hi,
        buffer=raw.get("buffer", 0),
        scale_down_delay=scale_down_delay,
        max_step_up=raw.get("maxStepUp"),
        max_step_down=raw.get("maxStepDown"),
        schedules=tuple(schedules),
        forecast=forecast,
    )


def _forecast(raw: dict[str, Any], schedules: list[Schedule], fail: Any) -> ForecastPolicy:
    """``policy.forecast``: every key optional (``{}`` takes the defaults). The time zone
    defaults to the one the policy's schedules name (when they name one), else UTC."""
    default = ForecastPolicy()
    values: dict[str, Any] = {}
    for key in ("lookback", "lead", "jitter", "wait"):
        if key in raw:
            try:
                values[key] = parse_duration(raw[key])
            except ValueError as exc:
                raise fail([key], f"forecast {key}: {exc}") from None
    lookback = values.get("lookback", default.lookback)
    days = raw.get("days", default.days)
    shortest = MIN_LOOKBACK[days]
    if not shortest <= lookback <= MAX_LOOKBACK:
        why = {"weekday": "the same weekday of past weeks", "workdays": "past workdays and "
               "weekend days", "daily": "past days"}[days]
        raise fail(["lookback"], f"forecast lookback {raw.get('lookback')!r} must be between "
                   f"{shortest.days}d and 91d: the forecast reads {why}")
    for key, limit in (("lead", "6h"), ("jitter", "6h"), ("wait", "1h")):
        if key in values and values[key] > parse_duration(limit):
            raise fail([key], f"forecast {key} {raw[key]!r} is longer than {limit}")
    zones = {s.timezone for s in schedules if s.timezone}
    zone = raw.get("timezone", zones.pop() if len(zones) == 1 else None)
    if zone is not None:
        _check_zone(zone, lambda m: fail(["timezone"] if "timezone" in raw else [], m))
    return ForecastPolicy(lookback=lookback, quantile=float(raw.get("quantile",
                                                                     default.quantile)),
                          lead=values.get("lead", default.lead),
                          jitter=values.get("jitter", default.jitter),
                          wait=values.get("wait", default.wait), timezone=zone, days=days)


# Names the zone database holds that are not zones: what they mean depends on the machine
# (Debian's localtime is a link to /etc/localtime), so a plan on a laptop and a reconcile in
# the cluster would read one schedule at two times.
_MACHINE_ZONES = frozenset({"localtime", "posixrules"})


def _check_zone(zone: str, fail: Any) -> None:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if zone in _MACHINE_ZONES:
        raise fail(f"timezone {zone!r} is this machine's zone, not a zone: the schedule would "
                   "run at another time wherever gitscale runs elsewhere (use an IANA name "
                   "such as Europe/Berlin)")
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder (Europe), a name
        # longer than a file name may be
        raise fail(f"unknown timezone {shown(zone)} (use an IANA name such as "
                   "Europe/Berlin)") from None


def _schedule(item: dict[str, Any], fail: Any) -> Schedule:
    try:
        start = parse_time(item["start"])
    except ValueError as exc:
        raise fail("start", f"schedule start: {exc}") from None
    try:
        duration = parse_duration(item["duration"])
    except ValueError as exc:
        raise fail("duration", f"schedule duration: {exc}") from None
    if not duration:
        raise fail("duration", "schedule duration: 0 never holds the schedule active (give "
                   "how long each window lasts, e.g. 8h)")
    zone = item.get("timezone")
    if zone is not None:
        _check_zone(zone, lambda m: fail("timezone", m))
    recurrence = item.get("recurrence")
    if recurrence is not None:
        from gitscale.core.recurrence import RecurrenceError
        from gitscale.core.recurrence import check as check_recurrence

        try:
            check_recurrence(recurrence, start, zone)
        except RecurrenceError as exc:
            raise fail("recurrence", f"schedule recurrence: {exc}") from None
    lo, hi = item.get("minReplicas"), item.get("maxReplicas")
    if lo is not None and hi is not None and lo > hi:
        raise fail("minReplicas", f"minReplicas {lo} is greater than maxReplicas {hi}")
    return Schedule(item["name"], start, duration, recurrence, zone, lo, hi)
