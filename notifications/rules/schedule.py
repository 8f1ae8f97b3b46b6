"""Next occurrence of a recurrence rule in a time zone. Pure functions, no Django.

A rule is a 5-field cron expression (read by croniter) or an RFC 5545 RRULE (read by
python-dateutil). Both are walked in the zone's *wall-clock* time, and each wall-clock
match is then placed on the UTC time line:

- a wall time that does not exist (spring forward) fires once, at the first instant
  after the gap;
- a wall time that exists twice (fall back) fires once, at its first instance.

An RRULE's UNTIL ending in `Z` is an instant (RFC 5545), whatever the row's zone; one
without it is a wall-clock time in that zone.
"""

from __future__ import annotations

import datetime as _datetime
import functools
import math
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter
from dateutil import parser
from dateutil.rrule import YEARLY, rrule, rrulestr

from notifications.exceptions import NotificationsError

# More wall-clock matches than this that all land at or before `after` means the rule
# cannot advance (it would loop); a real rule needs at most a handful (DST gap/fold).
_MAX_SKIPPED = 1000
# UNTIL in UTC: `UNTIL=20250115T083000Z` (the RRULE: prefix may come before it).
_UTC_UNTIL = re.compile(r"(?:^|[;:])UNTIL=([^;\s]*Z)(?=;|\s|$)", re.IGNORECASE)
# More than any DST shift of a wall clock: dateutil's loose bound on a UTC UNTIL.
_DST_SLACK = timedelta(days=1)
# The instant before another: datetimes count microseconds.
_JUST_BEFORE = timedelta(microseconds=1)


class InvalidRule(NotificationsError, ValueError):
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
    next(_wall_clock_matches(rule, ZoneInfo("UTC"), datetime(2000, 1, 1), anchor=datetime(2000, 1, 1)), None)


def next_occurrence(rule: str, zone: str, after: datetime, anchor: datetime | None = None) -> datetime | None:
    """First instant strictly after `after` (aware) at which `rule` fires, in UTC.

    `anchor` (aware) is the RRULE's start when the rule has no DTSTART of its own: it
    supplies the time of day and phase that the rule leaves open. Returns None when
    the rule has no occurrence left (COUNT or UNTIL reached).
    """
    return _next_instant(rule, zone, after, anchor or after, counted=True)


class Start(NamedTuple):
    """Where a schedule begun without a due time of its own begins."""

    due: datetime  # its first due time (UTC)
    anchor: datetime  # its RRULE's start (DTSTART), to give `next_occurrence` from then on


def first_occurrence(rule: str, zone: str, start: datetime) -> Start | None:
    """The first due time of `rule` begun at `start` (aware), which is not sent itself.

    The due time is the rule's first occurrence strictly after `start`, and the anchor
    that occurrence: an RRULE's COUNT then counts the firings sent, `start` not among
    them. None when the rule has no occurrence left.
    """
    due = _next_instant(rule, zone, start, start, counted=False)
    if due is None:
        return None
    # Every wall time of a DST gap is placed at its end: an anchor there would move a time
    # of day the rule leaves open (FREQ=DAILY begun at 02:30) to the gap's end for good.
    anchor = start if starts_after_gap(due, zone) else due
    if next_occurrence(rule, zone, anchor - _JUST_BEFORE, anchor=anchor) is None:
        return None  # counted from its anchor, the rule never fires (COUNT=0)
    return Start(due, anchor)


def starts_after_gap(instant: datetime, zone: str) -> bool:
    """Whether `instant` (aware) is the first after a DST gap (the clock jumped forward)."""
    tz = get_zone(zone)
    before = (instant - _JUST_BEFORE).astimezone(tz).utcoffset()
    at = instant.astimezone(tz).utcoffset()
    return before is not None and at is not None and at > before


def _next_instant(rule: str, zone: str, after: datetime, anchor: datetime, *, counted: bool) -> datetime | None:
    """`next_occurrence`; `counted=False` leaves COUNT out."""
    if after.tzinfo is None:
        raise ValueError("after must be an aware datetime")
    tz = get_zone(zone)
    wall_after = after.astimezone(tz).replace(tzinfo=None)
    wall_anchor = anchor.astimezone(tz).replace(tzinfo=None, second=0, microsecond=0)
    matches = _wall_clock_matches(rule, tz, wall_after, wall_anchor, counted=counted)
    for skipped, wall in enumerate(matches):
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


def _wall_clock_matches(
    rule: str, tz: ZoneInfo, wall_after: datetime, anchor: datetime, *, counted: bool = True
) -> Iterator[datetime]:
    """Naive wall-clock times in `tz` matching `rule`, strictly after `wall_after`, in
    order; `counted=False` leaves an RRULE's COUNT out."""
    rule = rule.strip()
    if not rule:
        raise InvalidRule("empty rule")
    if is_rrule(rule):
        yield from _rrule_matches(rule, tz, wall_after, anchor, counted=counted)
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


def _rrule_matches(
    rule: str, tz: ZoneInfo, wall_after: datetime, anchor: datetime, *, counted: bool
) -> Iterator[datetime]:
    """`_wall_clock_matches` of an RRULE."""
    parsed = _parse_rrule(rule, anchor)
    if not counted:
        parsed = parsed.replace(count=None)
    until = _utc_until(rule)
    if until is not None:
        # dateutil walks the wall clock and would read the UTC time as one: it gets a
        # loose wall-clock bound, and the instant each match is placed at decides.
        parsed = parsed.replace(until=_loose_wall_bound(until, tz))
    wall = parsed.after(wall_after)
    # `place` never goes back as the wall clock goes on: the first match past UNTIL ends it.
    while wall is not None and (until is None or place(wall, tz) <= until):
        yield wall
        wall = parsed.after(wall)


def _loose_wall_bound(until: datetime, tz: ZoneInfo) -> datetime | None:
    """A wall-clock time in `tz` no match placed at or before `until` comes after."""
    try:
        return until.astimezone(tz).replace(tzinfo=None) + _DST_SLACK
    except OverflowError:  # past year 9999: dateutil ends there anyway
        return None


def _parse_rrule(rule: str, anchor: datetime) -> rrule:
    """The RRULE read on the wall clock, `anchor` its DTSTART unless it has its own."""
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
    if not _some_position_exists(rule):
        raise InvalidRule("the RRULE never fires: no period has as many occurrences as its BYSETPOS asks for")
    return parsed


def _utc_until(rule: str) -> datetime | None:
    """The RRULE's UNTIL as an aware instant when given in UTC, else None (floating or none)."""
    found = _UTC_UNTIL.search(rule)
    if found is None:
        return None
    try:
        # Read as rrulestr reads it (it has read it already), then put back in UTC.
        return parser.parse(found.group(1), ignoretz=True).replace(tzinfo=UTC)
    except (ValueError, OverflowError) as exc:
        raise InvalidRule(f"not a valid RRULE: invalid until date {found.group(1)!r}") from exc


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


# The time parts finer than each frequency: a period holds one time per combination of them.
_FINER_TIME_PARTS = {
    "SECONDLY": (),
    "MINUTELY": ("BYSECOND",),
    "HOURLY": ("BYMINUTE", "BYSECOND"),
}
_ALL_TIME_PARTS = ("BYHOUR", "BYMINUTE", "BYSECOND")  # DAILY and coarser
_DAYS_PER_PERIOD = {"YEARLY": 366, "MONTHLY": 31, "WEEKLY": 7}  # DAILY and finer: 1


def _rule_part(upper: str, name: str) -> list[str]:
    """The comma-separated values of one part of an upper-cased RRULE (none when absent)."""
    found = re.search(rf"(?:^|[;:]){name}=([^;\s]*)", upper)
    return [v for v in found.group(1).split(",") if v] if found else []


@functools.lru_cache(maxsize=1024)
def _some_position_exists(rule: str) -> bool:
    """Whether a period of the rule can hold the occurrence its BYSETPOS picks:
    `FREQ=MINUTELY;BYSECOND=0;BYSETPOS=2` asks for the second of one occurrence a minute.

    dateutil looks period by period until year 9999 for such a rule: hours of CPU for a
    minutely one. A period holds at most its days (one for DAILY and finer; for WEEKLY,
    MONTHLY and YEARLY at most 7, 31 and 366, fewer when BYDAY or BYMONTHDAY name fewer)
    times its times (one per combination of the time parts finer than its frequency; an
    absent part is the start's one value). An upper bound, read from the rule's text: only
    a rule that can never fire is refused.
    """
    upper = rule.upper()
    try:
        positions = [int(p) for p in _rule_part(upper, "BYSETPOS")]
    except ValueError:
        return True  # not readable here: the caller's own parse says why
    if not positions:
        return True
    freq = next(iter(_rule_part(upper, "FREQ")), "")
    times = math.prod(max(len(_rule_part(upper, part)), 1) for part in _FINER_TIME_PARTS.get(freq, _ALL_TIME_PARTS))
    days = _DAYS_PER_PERIOD.get(freq, 1)
    named_days = {"WEEKLY": "BYDAY", "MONTHLY": "BYMONTHDAY"}.get(freq)
    if named_days and _rule_part(upper, named_days):
        days = min(days, len(_rule_part(upper, named_days)))
    # The n-th (or n-th from last) occurrence needs ceil(n / times) days of the period.
    return any((abs(position) - 1) // times < days for position in positions)


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
