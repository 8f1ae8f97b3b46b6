"""Next occurrence of cron expressions and RRULEs in a time zone (pure, table-tested)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from notifications.rules.schedule import InvalidRule, next_occurrence, upcoming, validate_rule


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    ("rule", "zone", "after", "expected"),
    [
        # A daily 09:00 in Europe/Berlin is 08:00 UTC in winter, 07:00 UTC in summer.
        ("0 9 * * *", "Europe/Berlin", utc(2025, 1, 15, 12), utc(2025, 1, 16, 8)),
        ("0 9 * * *", "Europe/Berlin", utc(2025, 7, 15, 12), utc(2025, 7, 16, 7)),
        ("FREQ=DAILY;BYHOUR=9;BYMINUTE=0", "Europe/Berlin", utc(2025, 1, 15, 12), utc(2025, 1, 16, 8)),
        ("FREQ=DAILY;BYHOUR=9;BYMINUTE=0", "Europe/Berlin", utc(2025, 7, 15, 12), utc(2025, 7, 16, 7)),
        # Later the same day, when 09:00 local has not come yet.
        ("0 9 * * *", "Europe/Berlin", utc(2025, 1, 15, 7, 59), utc(2025, 1, 15, 8)),
        # Across the spring transition: Saturday in CET, Sunday's 09:00 already CEST.
        ("0 9 * * *", "Europe/Berlin", utc(2025, 3, 29, 12), utc(2025, 3, 30, 7)),
        # Weekdays only, a zone with a half-hour offset: Friday afternoon -> Monday.
        ("0 9 * * 1-5", "Asia/Kolkata", utc(2025, 1, 17, 12), utc(2025, 1, 20, 3, 30)),
        # Weekly RRULE in New York (EST, UTC-5).
        ("FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0", "America/New_York", utc(2025, 1, 15, 12), utc(2025, 1, 20, 14)),
        # Southern hemisphere summer time: 09:00 AEDT (UTC+11) is 22:00 UTC the day before.
        ("0 9 * * *", "Australia/Sydney", utc(2025, 1, 15, 12), utc(2025, 1, 15, 22)),
        # The RRULE line may carry its RRULE: prefix.
        ("RRULE:FREQ=DAILY;BYHOUR=9;BYMINUTE=0", "Europe/Berlin", utc(2025, 1, 15, 12), utc(2025, 1, 16, 8)),
        # Every 15 minutes, in UTC.
        ("*/15 * * * *", "UTC", utc(2025, 1, 15, 12, 7), utc(2025, 1, 15, 12, 15)),
    ],
)
def test_next_occurrence_in_zone(rule, zone, after, expected):
    assert next_occurrence(rule, zone, after) == expected


@pytest.mark.parametrize("rule", ["0 9 * * *", "FREQ=DAILY;BYHOUR=9;BYMINUTE=0"])
def test_next_occurrence_is_strictly_after(rule):
    # Sitting exactly on an occurrence, the next one is a day later, never the same instant.
    assert next_occurrence(rule, "Europe/Berlin", utc(2025, 1, 16, 8)) == utc(2025, 1, 17, 8)


def test_result_is_utc():
    result = next_occurrence("0 9 * * *", "Europe/Berlin", utc(2025, 1, 15, 12))
    assert result.utcoffset().total_seconds() == 0


def test_anchor_supplies_what_the_rrule_leaves_open():
    # FREQ=HOURLY without BYMINUTE fires at the anchor's minute (seconds dropped).
    anchor = utc(2025, 1, 1, 10, 17, 45)
    assert next_occurrence("FREQ=HOURLY", "UTC", utc(2025, 1, 15, 12), anchor=anchor) == utc(2025, 1, 15, 12, 17)


def test_naive_after_is_refused():
    with pytest.raises(ValueError, match="aware"):
        next_occurrence("0 9 * * *", "UTC", datetime(2025, 1, 1))


# --- daylight saving time ------------------------------------------------------------------
# Europe/Berlin 2025: clocks jump 02:00 -> 03:00 on March 30 (01:00 UTC) and fall back
# 03:00 -> 02:00 on October 26 (01:00 UTC), so 02:30 does not exist in March and exists
# twice in October.


@pytest.mark.parametrize("rule", ["30 2 * * *", "FREQ=DAILY;BYHOUR=2;BYMINUTE=30"])
def test_nonexistent_local_time_fires_once_at_the_end_of_the_gap(rule):
    fired = upcoming(rule, "Europe/Berlin", utc(2025, 3, 28, 12), count=3)
    assert fired == [
        utc(2025, 3, 29, 1, 30),  # 02:30 CET
        utc(2025, 3, 30, 1, 0),  # 02:30 does not exist: 03:00 CEST, the first instant after the gap
        utc(2025, 3, 31, 0, 30),  # 02:30 CEST
    ]


@pytest.mark.parametrize("rule", ["30 2 * * *", "FREQ=DAILY;BYHOUR=2;BYMINUTE=30"])
def test_ambiguous_local_time_fires_once(rule):
    fired = upcoming(rule, "Europe/Berlin", utc(2025, 10, 25, 12), count=3)
    assert fired == [
        utc(2025, 10, 26, 0, 30),  # the first 02:30 (CEST); the second (01:30 UTC, CET) is skipped
        utc(2025, 10, 27, 1, 30),
        utc(2025, 10, 28, 1, 30),
    ]


def test_inside_the_repeated_hour_the_second_instance_does_not_fire():
    # 01:00 UTC is the second 02:00 (CET): 02:30 already fired at 00:30 UTC, so the next
    # firing is tomorrow's, not today's repeat at 01:30 UTC.
    assert next_occurrence("30 2 * * *", "Europe/Berlin", utc(2025, 10, 26, 1, 0)) == utc(2025, 10, 27, 1, 30)


def test_many_matches_inside_the_gap_collapse_into_one_firing():
    # Every 15 minutes: the four wall times 02:00..02:45 that do not exist become one
    # firing at 03:00 CEST, and the schedule carries on from there without duplicates.
    fired = upcoming("*/15 * * * *", "Europe/Berlin", utc(2025, 3, 30, 0, 30), count=4)
    assert fired == [utc(2025, 3, 30, 0, 45), utc(2025, 3, 30, 1, 0), utc(2025, 3, 30, 1, 15), utc(2025, 3, 30, 1, 30)]


def test_new_york_fall_back_fires_once():
    # America/New_York 2025-11-02: 01:30 exists twice (05:30 UTC EDT, 06:30 UTC EST).
    fired = upcoming("30 1 * * *", "America/New_York", utc(2025, 11, 1, 12), count=2)
    assert fired == [utc(2025, 11, 2, 5, 30), utc(2025, 11, 3, 6, 30)]


# --- invalid rules and zones ----------------------------------------------------------------


@pytest.mark.parametrize(
    "rule",
    [
        "",
        "hello",
        "0 9 * *",  # four fields
        "0 9 * * * *",  # six fields (seconds are not cron)
        "61 * * * *",  # minute out of range
        "0 25 * * *",
        "0 9 * * funday",
        "0 0 31 2 *",  # February 31st never comes
        "FREQ=SOMETIMES",
        "FREQ=DAILY;BYHOUR=25",
        "FREQ=DAILY;INTERVAL=often",
        "FREQ=DAILY;COUNT=2;UNTIL=20250101T000000Z",  # RFC 5545: not both
    ],
)
def test_invalid_rule_raises(rule):
    with pytest.raises(InvalidRule):
        validate_rule(rule)
    with pytest.raises(InvalidRule):
        next_occurrence(rule, "UTC", utc(2025, 1, 1))


@pytest.mark.parametrize("zone", ["Mars/Olympus", "", "../etc/passwd", "Europe/berlin ", "CEST"])
def test_unknown_zone_raises(zone):
    with pytest.raises(InvalidRule, match="time zone"):
        next_occurrence("0 9 * * *", zone, utc(2025, 1, 1))


@pytest.mark.parametrize(
    "rule", ["0 9 * * *", "0 9 * * 1-5", "*/5 * * * *", "FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0", "FREQ=MONTHLY"]
)
def test_valid_rules_pass(rule):
    validate_rule(rule)  # raises on failure


# --- rules that run out -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "after"),
    [
        ("FREQ=DAILY;COUNT=2;BYHOUR=9;BYMINUTE=0", utc(2025, 1, 15)),
        ("FREQ=DAILY;UNTIL=20250110T000000Z;BYHOUR=9;BYMINUTE=0", utc(2025, 1, 15)),
        # The last of three occurrences (Jan 1, 2, 3 at 09:00) has passed.
        ("FREQ=DAILY;COUNT=3;BYHOUR=9;BYMINUTE=0", utc(2025, 1, 3, 9)),
    ],
)
def test_exhausted_rule_returns_none(rule, after):
    assert next_occurrence(rule, "UTC", after, anchor=utc(2025, 1, 1)) is None


def test_count_rule_yields_exactly_its_occurrences():
    fired = upcoming("FREQ=DAILY;COUNT=3;BYHOUR=9;BYMINUTE=0", "UTC", utc(2024, 12, 31), 10, anchor=utc(2025, 1, 1))
    assert fired == [utc(2025, 1, 1, 9), utc(2025, 1, 2, 9), utc(2025, 1, 3, 9)]
