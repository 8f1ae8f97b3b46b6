"""Next occurrence of a recurrence rule in a time zone. Pure functions, no Django.

A rule is a 5-field cron expression (read by croniter) or an RFC 5545 RRULE (read by
python-dateutil). Both are walked in the zone's *wall-clock* time, and each wall-clock
match is then placed on the UTC time line:

- a wall time that does not exist (spring forward) fires once, at the first instant
  after the gap;
- a wall time that exists twice (fall back) fires once, at its first instance.
"""

from __future__ import annotations

import datetime as _datetime
import functools
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter
from dateutil.rrule import YEARLY, rrule, rrulestr

# More wall-clock matches than this that all land at or before `after` means the rule
# cannot advance (it would loop); a real rule needs at most a handful (DST gap/fold).
_MAX_SKIPPED = 1000


class InvalidRule(ValueError):
    """The recurrence rule or time zone cannot be read."""


def is_rrule(rule: str) -> bool:
    """RRULEs are told apart from cron expressions by their `FREQ=` part."""
    return "FREQ=" in rule.upper()


def get_zone(name: str) -> ZoneInfo:
    """The IANA zone `name`, or InvalidRule."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise InvalidRule(f"unknown time zone {name!r}") from exc


def validate_rule(rule: str) -> None:
    """Raise InvalidRule unless `rule` is a readable cron expression or RRULE."""
    # The matches are a generator: nothing is parsed until the first one is asked for.
    next(_wall_clock_matches(rule, datetime(2000, 1, 1), anchor=datetime(2000, 1, 1)), None)


def next_occurrence(rule: str, zone: str, after: datetime, anchor: datetime | None = None) -> datetime | None:
    """First instant strictly after `after` (aware) at which `rule` fires, in UTC.

    `anchor` (aware) is the RRULE's start when the rule has no DTSTART of its own: it
    supplies the time of day and phase that the rule leaves open. Returns None when
    the rule has no occurrence left (COUNT or UNTIL reached).
    """
    if after.tzinfo is None:
        raise ValueError("after must be an aware datetime")
    tz = get_zone(zone)
    wall_after = after.astimezone(tz).replace(tzinfo=None)
    wall_anchor = (anchor or after).astimezone(tz).replace(tzinfo=None, second=0, microsecond=0)
    for skipped, wall in enumerate(_wall_clock_matches(rule, wall_after, wall_anchor)):
        instant = place(wall, tz)
        if instant > after:
            return instant.astimezone(UTC)
        if skipped >= _MAX_SKIPPED:
            break
    return None


def upcoming(rule: str, zone: str, after: datetime, count: int, anchor: datetime | None = None) -> list[datetime]:
    """The next `count` occurrences after `after`, in UTC (for previews)."""
    found: list[datetime] = []
    while len(found) < count:
        nxt = next_occurrence(rule, zone, after, anchor=anchor)
        if nxt is None:
            break
        found.append(nxt)
        after = nxt
    return found


def _wall_clock_matches(rule: str, wall_after: datetime, anchor: datetime) -> Iterator[datetime]:
    """Naive wall-clock times matching `rule`, strictly after `wall_after`, in order."""
    rule = rule.strip()
    if not rule:
        raise InvalidRule("empty rule")
    if is_rrule(rule):
        upper = rule.upper()
        if re.search(r"(^|[;:])COUNT=", upper) and re.search(r"(^|[;:])UNTIL=", upper):
            # RFC 5545 forbids both; dateutil only warns and keeps a guess of its own.
            raise InvalidRule("not a valid RRULE: give COUNT or UNTIL, not both")
        try:
            parsed = rrulestr(rule, dtstart=anchor, ignoretz=True)
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            raise InvalidRule(f"not a valid RRULE: {exc}") from exc
        if not isinstance(parsed, rrule):
            raise InvalidRule("give one RRULE, not a set")
        if not _some_day_matches(rule):
            raise InvalidRule("the RRULE never fires: no date matches its BYxxx parts")
        wall = parsed.after(wall_after)
        while wall is not None:
            yield wall
            wall = parsed.after(wall)
        return
    if len(rule.split()) != 5:
        raise InvalidRule("a cron expression has 5 fields: minute hour day month weekday")
    try:
        matches = croniter(rule, wall_after)
    except (CroniterError, ValueError, KeyError, TypeError) as exc:
        raise InvalidRule(f"not a valid cron expression: {exc}") from exc
    while True:
        try:
            yield matches.get_next(datetime)
        except (CroniterError, ValueError) as exc:  # e.g. "0 0 31 2 *" never matches
            raise InvalidRule(f"cron expression never fires: {exc}") from exc


# The Gregorian calendar repeats every 400 years: a date no year of one cycle has never comes.
_CYCLE_YEARS = 400


@functools.lru_cache(maxsize=1024)
def _some_day_matches(rule: str) -> bool:
    """Whether any date at all matches the RRULE's date parts (BYMONTH, BYMONTHDAY, BYDAY,
    BYWEEKNO, BYYEARDAY, BYEASTER): `FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=30` has none.

    dateutil looks for a next occurrence until year 9999 whatever its UNTIL, so such a rule
    cost 26 s of CPU per question. Here the same date parts are asked of a yearly rule
    over the last 400-year cycle before 9999, where dateutil's own end bounds the search
    (milliseconds). Time parts, BYSETPOS, COUNT, UNTIL and INTERVAL are left out: they only
    narrow the dates, so no date here means no occurrence ever.
    """
    start = datetime(_datetime.MAXYEAR - _CYCLE_YEARS + 1, 1, 1)
    try:
        parsed = rrulestr(rule, dtstart=start, ignoretz=True)
    except (ValueError, TypeError, KeyError, IndexError):
        return True  # not readable here: the caller's own parse says why
    if not isinstance(parsed, rrule):
        return True
    dates = parsed.replace(
        freq=YEARLY,
        dtstart=start,
        interval=1,
        count=None,
        until=None,
        bysetpos=None,
        byhour=None,
        byminute=None,
        bysecond=None,
    )
    return dates.after(start, inc=True) is not None


def place(wall: datetime, tz: ZoneInfo) -> datetime:
    """The instant a wall-clock time names: first instance if repeated, gap end if skipped.

    The DST rule of schedules, and of quiet hours' ends (`notifications.rules.quiet`).
    """
    first = wall.replace(tzinfo=tz, fold=0)
    if first.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall:
        return first  # exists (once, or twice and fold=0 is the earlier)
    # Inside a gap: fold=1 reads it with the offset after the jump, which lands before
    # the transition; step forward to the first instant whose offset changed.
    probe = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
    before = probe.astimezone(tz).utcoffset()
    step = timedelta(minutes=1)
    while probe.astimezone(tz).utcoffset() == before:
        probe += step
    # Transitions fall on whole minutes; walk back within the last minute if not.
    while (probe - timedelta(seconds=1)).astimezone(tz).utcoffset() != before:
        probe -= timedelta(seconds=1)
    return probe
