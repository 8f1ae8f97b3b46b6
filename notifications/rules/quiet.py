"""Quiet hours: a daily window on a row's own wall clock in which nothing is sent. Pure.

A window is `"HH:MM-HH:MM"`, read in the row's time zone; one whose start is later than
its end wraps midnight (`"21:00-08:00"`). It holds its start, not its end: at 21:00 the
window above is quiet, at 08:00 it is not. A firing that comes due inside the window
waits for its end, the next time the row's clock reads the end time:

- an end that does not exist that day (spring forward) is the first instant after the
  gap, as for schedules (`notifications.rules.schedule.place`);
- an end that exists twice (fall back) is the first of the two still ahead;
- whether an instant is inside is read on the wall clock, so on a fall-back night the
  repeated hour is inside (or outside) the window both times.

Where a row gives none, the site's `NOTIFICATIONS_QUIET_HOURS` applies; a row says
`"off"` to be sent at any hour whatever the site's default.

A leaf module: the standard library and `notifications.rules.schedule`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Any

from notifications.rules import schedule

OFF = "off"  # a row's own value: no quiet hours, whatever the site's default
FORMAT = '"HH:MM-HH:MM" on a 24-hour clock (e.g. "21:00-08:00")'
_PATTERN = re.compile(r"(\d\d):(\d\d)-(\d\d):(\d\d)")


@dataclass(frozen=True)
class Window:
    """A daily quiet window: `start` inclusive, `end` exclusive, wrapping midnight if start > end."""

    start: time
    end: time

    @property
    def wraps(self) -> bool:
        return self.start > self.end

    def holds(self, wall: time) -> bool:
        """Whether the wall-clock time `wall` is inside the window."""
        if self.wraps:
            return wall >= self.start or wall < self.end
        return self.start <= wall < self.end

    def end_after(self, at: datetime, zone: str) -> datetime | None:
        """The end of the window `at` (aware) is in, read in `zone`, in UTC; None if `at` is outside."""
        tz = schedule.get_zone(zone)
        wall = at.astimezone(tz).replace(tzinfo=None)
        if not self.holds(wall.time()):
            return None
        day = wall.date()
        if self.wraps and wall.time() >= self.start:
            day += timedelta(days=1)  # inside since this evening: the window ends tomorrow
        wall_end = datetime.combine(day, self.end)
        end = schedule.place(wall_end, tz)
        if end <= at:  # the end repeats (fall back) and its first instance has passed
            end = wall_end.replace(tzinfo=tz, fold=1)
        return end.astimezone(UTC)


def parse(value: str) -> Window | None:
    """The window `value` names; None for blank or `"off"`. ValueError says what is wrong."""
    if value in ("", OFF):
        return None
    match = _PATTERN.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f'Give quiet hours as {FORMAT}, or "off", not {value!r}.')
    hours_start, minutes_start, hours_end, minutes_end = (int(part) for part in match.groups())
    for hours, minutes, text in ((hours_start, minutes_start, value[:5]), (hours_end, minutes_end, value[6:])):
        if hours > 23 or minutes > 59:
            raise ValueError(f"{text} is not a time of day (00:00 to 23:59).")
    start, end = time(hours_start, minutes_start), time(hours_end, minutes_end)
    if start == end:
        raise ValueError(f"The window starts and ends at {value[:5]}: give two different times.")
    return Window(start, end)


def errors(value: Any) -> list[str]:
    """What is wrong with `value` as quiet hours; empty when it is blank, "off" or a window."""
    if not isinstance(value, str):
        return [f'Give quiet hours as {FORMAT}, or "off", not {value!r}.']
    try:
        parse(value)
    except ValueError as exc:
        return [str(exc)]
    return []


def effective(own: str, site: str) -> str:
    """The window a row keeps: its own (`"off"`: none), else the site's default."""
    return own or site


def end_of_window(quiet_hours: str, zone: str, at: datetime) -> datetime | None:
    """When the quiet window `at` falls in ends, in UTC; None when `at` is not quiet.

    `quiet_hours` is the row's effective value (see `effective`). The save path and the
    tick both ask this: a firing due inside the window moves to its end.
    """
    window = parse(quiet_hours)
    return window.end_after(at, zone) if window else None
