"""Scaling policies: bounds, buffer, delays, step limits and scheduled overrides."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gitscale.core.forecast import ForecastPolicy


@dataclass(frozen=True)
class Schedule:
    """A window that replaces min/max while active.

    ``recurrence`` is an RFC 5545 RRULE (``FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR``) starting at
    ``start``; without it the window happens once. With ``timezone`` the recurrence follows that
    zone's wall clock (09:00 stays 09:00 across daylight-saving changes).
    """

    name: str
    start: datetime
    duration: timedelta
    recurrence: str | None = None
    timezone: str | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None

    def active(self, now: datetime) -> bool:
        # (zoneinfo and the recurrence rules are imported by the schedules that use them:
        # most policies have none, and zoneinfo alone costs ~6 ms of a CLI start)
        if self.timezone:
            from zoneinfo import ZoneInfo

            start = self.start.astimezone(ZoneInfo(self.timezone))
        else:
            start = self.start
        if self.recurrence is None:
            return start <= now < start + self.duration
        # Bounded: the walk starts at the last period before the window (the rule was
        # checked when the config was read; see gitscale.core.recurrence).
        from gitscale.core.recurrence import last_start

        return last_start(self.recurrence, self.start, self.timezone, now,
                          self.duration) is not None


@dataclass(frozen=True)
class Policy:
    min_replicas: int = 0
    max_replicas: int = 10
    buffer: int = 0
    scale_down_delay: timedelta = timedelta(0)
    max_step_up: int | None = None
    max_step_down: int | None = None
    schedules: tuple[Schedule, ...] = field(default_factory=tuple)
    forecast: ForecastPolicy | None = None  # learn the target from the set's own history

    def bounds(self, now: datetime) -> tuple[int, int, str | None]:
        """(min, max, name of the active schedule). The first active window wins."""
        for schedule in self.schedules:
            if schedule.active(now):
                lo = self.min_replicas if schedule.min_replicas is None else schedule.min_replicas
                hi = self.max_replicas if schedule.max_replicas is None else schedule.max_replicas
                return lo, max(lo, hi), schedule.name
        return self.min_replicas, self.max_replicas, None
