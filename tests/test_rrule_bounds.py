"""An RRULE's COUNT and UNTIL bound the firings a row sends, exactly.

- COUNT=N sends N firings. A row scheduled without `fire_at` used to start its rule (its
  DTSTART) at the moment of scheduling: that moment counted as the rule's first
  occurrence and was never sent, so `FREQ=DAILY;COUNT=3` sent 2 and `COUNT=1` was
  refused. The rule now starts at its first due time, the first firing sent.
- An UNTIL ending in `Z` is an instant (RFC 5545). It was read as a wall-clock time in the
  row's zone: east of UTC the last firing was lost, west of it firings after UNTIL went
  out. An UNTIL without `Z` stays a wall-clock time in the row's zone.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core import mail
from django.core.exceptions import ValidationError

from notifications.api import run_tick, schedule
from notifications.models import Notification
from notifications.rules.schedule import first_occurrence, upcoming
from notifications.services.creating import edit

EMAIL = {"channels": ["email"], "email_to": "ada@example.com", "subject": "Hi", "body": "Hello"}
NOW = datetime(2025, 1, 15, 12, 0, 20, tzinfo=UTC)  # a Wednesday; 13:00:20 in Berlin
MOST_FIRINGS = 10  # more than any rule here has: a row that never finishes fails the test


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def fire_until_done(row: Notification, time_machine) -> list[datetime]:
    """Tick at each due time of `row` until the row is gone; the due times ticked."""
    fired: list[datetime] = []
    for _ in range(MOST_FIRINGS):
        due = Notification.objects.filter(pk=row.pk).values_list("next_fire_at", flat=True).first()
        if due is None:
            return fired
        time_machine.move_to(due, tick=False)
        assert run_tick(now=due).counts()["succeeded"] == 1
        fired.append(due)
    raise AssertionError(f"still scheduled after {MOST_FIRINGS} firings: {fired}")


# --- COUNT, through schedule() and real ticks -------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("rule", "zone", "expected"),
    [
        ("FREQ=DAILY;COUNT=3", "UTC", [utc(2025, 1, 16, 12), utc(2025, 1, 17, 12), utc(2025, 1, 18, 12)]),
        ("FREQ=HOURLY;COUNT=3", "UTC", [utc(2025, 1, 15, 13), utc(2025, 1, 15, 14), utc(2025, 1, 15, 15)]),
        ("FREQ=DAILY;COUNT=1", "UTC", [utc(2025, 1, 16, 12)]),
        ("FREQ=WEEKLY;INTERVAL=2;BYDAY=MO;COUNT=2", "Europe/Berlin", [utc(2025, 1, 27, 12), utc(2025, 2, 10, 12)]),
        # Its first occurrence is not now: the same before the fix, kept.
        (
            "FREQ=DAILY;BYHOUR=9;BYMINUTE=0;COUNT=3",
            "Europe/Berlin",
            [utc(2025, 1, 16, 8), utc(2025, 1, 17, 8), utc(2025, 1, 18, 8)],
        ),
    ],
)
def test_count_sends_that_many_firings_when_scheduled_without_fire_at(time_machine, rule, zone, expected):
    time_machine.move_to(NOW, tick=False)
    row = schedule(**EMAIL, recurrence_rule=rule, timezone=zone)

    assert fire_until_done(row, time_machine) == expected
    assert len(mail.outbox) == len(expected)


@pytest.mark.django_db
def test_count_with_fire_at_still_counts_from_fire_at(time_machine):
    time_machine.move_to(NOW, tick=False)
    row = schedule(**EMAIL, recurrence_rule="FREQ=DAILY;COUNT=2", timezone="UTC", fire_at=utc(2025, 1, 20, 9))

    assert fire_until_done(row, time_machine) == [utc(2025, 1, 20, 9), utc(2025, 1, 21, 9)]


@pytest.mark.django_db
def test_a_replace_without_fire_at_counts_from_its_first_firing(time_machine):
    time_machine.move_to(NOW, tick=False)
    schedule(**EMAIL, key="digest", fire_at=NOW + timedelta(days=30))
    row = schedule(**EMAIL, key="digest", on_conflict="replace", recurrence_rule="FREQ=DAILY;COUNT=2", timezone="UTC")

    assert fire_until_done(row, time_machine) == [utc(2025, 1, 16, 12), utc(2025, 1, 17, 12)]


@pytest.mark.django_db
def test_a_rule_edited_to_a_count_sends_that_many_firings(time_machine):
    time_machine.move_to(NOW, tick=False)
    row = schedule(**EMAIL, recurrence_rule="0 9 * * *", timezone="UTC")
    row.recurrence_rule = "FREQ=HOURLY;COUNT=2"
    edit(row, ["recurrence_rule"], now=NOW)

    assert fire_until_done(row, time_machine) == [utc(2025, 1, 15, 13), utc(2025, 1, 15, 14)]


@pytest.mark.django_db
def test_a_spent_count_is_still_refused():
    with pytest.raises(ValidationError) as refused:
        schedule(**EMAIL, recurrence_rule="FREQ=DAILY;COUNT=0")
    assert refused.value.message_dict["recurrence_rule"] == ["The rule has no occurrence left after now."]


@pytest.mark.django_db
def test_a_time_of_day_left_open_survives_a_first_firing_in_the_dst_gap(time_machine):
    # Scheduled at 02:30:20 CET the day before spring forward: tomorrow's 02:30 does not
    # exist and fires at 03:00 CEST, and the days after at 02:30 again, not at 03:00.
    time_machine.move_to(utc(2025, 3, 29, 1, 30, 20), tick=False)
    row = schedule(**EMAIL, recurrence_rule="FREQ=DAILY", timezone="Europe/Berlin")

    fired = []
    for _ in range(3):
        row.refresh_from_db()
        fired.append(row.next_fire_at)
        time_machine.move_to(row.next_fire_at, tick=False)
        run_tick(now=row.next_fire_at)
    assert fired == [utc(2025, 3, 30, 1), utc(2025, 3, 31, 0, 30), utc(2025, 4, 1, 0, 30)]


@pytest.mark.parametrize(
    "rule", ["0 9 * * *", "FREQ=DAILY;BYHOUR=9;BYMINUTE=0", "FREQ=DAILY", "FREQ=MINUTELY;INTERVAL=7"]
)
def test_the_first_due_time_is_the_rules_next_occurrence_as_before(rule):
    first = first_occurrence(rule, "Europe/Berlin", NOW)
    assert first is not None
    assert first.due == upcoming(rule, "Europe/Berlin", NOW, 1, anchor=NOW)[0]
    # and the firings after it are the ones the rule started at NOW gives
    assert upcoming(rule, "Europe/Berlin", first.due, 5, anchor=first.anchor) == upcoming(
        rule, "Europe/Berlin", first.due, 5, anchor=NOW
    )


# --- UNTIL ------------------------------------------------------------------------------------

BERLIN_9 = "FREQ=DAILY;BYHOUR=9;BYMINUTE=0"
JAN_12 = utc(2025, 1, 12, 12)


@pytest.mark.parametrize(
    ("until", "zone", "last"),
    [
        # 09:00 in Berlin is 08:00 UTC: Jan 15's firing comes before UNTIL.
        ("20250115T083000Z", "Europe/Berlin", utc(2025, 1, 15, 8)),
        ("20250115T080000Z", "Europe/Berlin", utc(2025, 1, 15, 8)),  # UNTIL itself included
        ("20250115T075959Z", "Europe/Berlin", utc(2025, 1, 14, 8)),
        # 09:00 in New York is 14:00 UTC: Jan 15's firing comes after UNTIL.
        ("20250115T100000Z", "America/New_York", utc(2025, 1, 14, 14)),
        # Without Z, UNTIL is a wall-clock time in the row's zone.
        ("20250115T083000", "Europe/Berlin", utc(2025, 1, 14, 8)),
        ("20250115T100000", "America/New_York", utc(2025, 1, 15, 14)),
    ],
)
def test_until_in_utc_is_an_instant_and_floating_until_a_wall_clock_time(until, zone, last):
    fired = upcoming(f"{BERLIN_9};UNTIL={until}", zone, JAN_12, 10, anchor=JAN_12)
    assert fired[-1] == last


@pytest.mark.parametrize(("until", "fires_in_the_gap"), [("20250330T010000Z", True), ("20250330T005959Z", False)])
def test_until_in_utc_and_the_dst_gap(until, fires_in_the_gap):
    # 02:30 does not exist on March 30: it fires once, at 03:00 CEST (01:00 UTC).
    rule = f"FREQ=DAILY;BYHOUR=2;BYMINUTE=30;UNTIL={until}"
    fired = upcoming(rule, "Europe/Berlin", utc(2025, 3, 28, 12), 10, anchor=utc(2025, 3, 28, 12))
    assert fired == [utc(2025, 3, 29, 1, 30), *([utc(2025, 3, 30, 1)] if fires_in_the_gap else [])]


def test_until_in_utc_and_the_repeated_hour():
    # 01:30 UTC on October 26 is the second 02:30 in Berlin; 02:45 fires once, at its first
    # instance (00:45 UTC), before UNTIL, though 02:45 is after 02:30 on the wall clock.
    rule = "FREQ=DAILY;BYHOUR=2;BYMINUTE=45;UNTIL=20251026T013000Z"
    fired = upcoming(rule, "Europe/Berlin", utc(2025, 10, 24, 12), 10, anchor=utc(2025, 10, 24, 12))
    assert fired == [utc(2025, 10, 25, 0, 45), utc(2025, 10, 26, 0, 45)]


@pytest.mark.django_db
def test_a_row_west_of_utc_sends_nothing_after_until(time_machine):
    time_machine.move_to(NOW, tick=False)  # 07:00 in New York
    row = schedule(**EMAIL, recurrence_rule=f"{BERLIN_9};UNTIL=20250116T100000Z", timezone="America/New_York")

    # Jan 16 09:00 in New York is 14:00 UTC, after UNTIL: one firing, not two.
    assert fire_until_done(row, time_machine) == [utc(2025, 1, 15, 14)]
    assert len(mail.outbox) == 1


@pytest.mark.django_db
def test_a_row_east_of_utc_sends_its_last_firing_before_until(time_machine):
    time_machine.move_to(NOW, tick=False)
    row = schedule(**EMAIL, recurrence_rule=f"{BERLIN_9};UNTIL=20250117T083000Z", timezone="Europe/Berlin")

    assert fire_until_done(row, time_machine) == [utc(2025, 1, 16, 8), utc(2025, 1, 17, 8)]
