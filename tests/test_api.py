"""`notifications.api.schedule()`: what host code calls to enqueue."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.exceptions import ValidationError
from django.test import override_settings

from notifications.api import run_tick, schedule
from notifications.models import Notification

pytestmark = pytest.mark.django_db

EMAIL = {"channels": ["email"], "email_to": "ada@example.com", "subject": "Hi", "body": "Hello"}
NOW = datetime(2025, 1, 15, 12, 0, tzinfo=UTC)


def test_returns_the_saved_row():
    fire_at = NOW + timedelta(hours=1)
    row = schedule(**EMAIL, payload={"order": 7}, fire_at=fire_at)
    stored = Notification.objects.get(pk=row.pk)
    assert stored.next_fire_at == fire_at
    assert stored.payload == {"order": 7}
    assert (stored.error_count, stored.last_error, stored.dead_lettered_at) == (0, None, None)


@time_machine.travel(NOW, tick=False)
def test_one_shot_without_fire_at_is_due_now():
    row = schedule(**EMAIL)
    assert row.next_fire_at == NOW
    assert list(Notification.objects.due(NOW)) == [row]


@time_machine.travel(NOW, tick=False)
@pytest.mark.parametrize(
    ("rule", "zone", "first"),
    [
        ("0 9 * * *", "Europe/Berlin", datetime(2025, 1, 16, 8, tzinfo=UTC)),
        ("FREQ=DAILY;BYHOUR=9;BYMINUTE=0", "Europe/Berlin", datetime(2025, 1, 16, 8, tzinfo=UTC)),
        ("0 13 * * *", "UTC", datetime(2025, 1, 15, 13, tzinfo=UTC)),
        ("*/10 * * * *", "UTC", datetime(2025, 1, 15, 12, 10, tzinfo=UTC)),
    ],
)
def test_recurring_without_fire_at_is_due_at_the_next_occurrence(rule, zone, first):
    row = schedule(**EMAIL, recurrence_rule=rule, timezone=zone)
    assert Notification.objects.get(pk=row.pk).next_fire_at == first
    assert not Notification.objects.due(NOW).exists()


@time_machine.travel(NOW, tick=False)
def test_recurring_with_fire_at_starts_there():
    row = schedule(**EMAIL, recurrence_rule="0 9 * * *", fire_at=NOW)
    assert row.next_fire_at == NOW


@time_machine.travel(NOW, tick=False)
@override_settings(TIME_ZONE="Europe/Berlin")
def test_timezone_defaults_to_the_site_time_zone():
    row = schedule(**EMAIL, recurrence_rule="0 9 * * *")
    assert row.timezone == "Europe/Berlin"
    assert row.next_fire_at == datetime(2025, 1, 16, 8, tzinfo=UTC)


@time_machine.travel(NOW, tick=False)
def test_next_fire_at_is_accepted_as_the_column_name():
    fire_at = NOW + timedelta(minutes=5)
    assert schedule(**EMAIL, next_fire_at=fire_at).next_fire_at == fire_at
    with pytest.raises(TypeError):
        schedule(**EMAIL, next_fire_at=fire_at, fire_at=fire_at)


@pytest.mark.parametrize(
    "kwarg", ["sms_to", "fire_time", "error_count", "last_error", "dead_lettered_at", "claim_token"]
)
def test_unknown_or_internal_keyword_is_a_type_error(kwarg):
    with pytest.raises(TypeError, match=kwarg):
        schedule(**EMAIL, **{kwarg: 1})
    assert not Notification.objects.exists()


def test_naive_fire_at_is_refused():
    with pytest.raises(ValueError, match="aware"):
        schedule(**EMAIL, fire_at=datetime(2025, 1, 15, 12))


@time_machine.travel(NOW, tick=False)
def test_rule_with_nothing_left_is_refused():
    with pytest.raises(ValidationError) as info:
        schedule(**EMAIL, recurrence_rule="FREQ=DAILY;UNTIL=20240101T000000Z")
    assert "recurrence_rule" in info.value.error_dict
    assert not Notification.objects.exists()


@pytest.mark.parametrize("rule", ["FREQ=DAILY", "FREQ=DAILY;COUNT=3"])
def test_an_rrule_keeps_the_time_of_day_of_its_first_due_time(rule):
    """FREQ=DAILY leaves the time of day open: it comes from fire_at, not from when the row was saved."""
    first = datetime(2025, 1, 16, 9, 0, tzinfo=UTC)
    with time_machine.travel(NOW.replace(hour=14, minute=37), tick=False):
        row = schedule(**EMAIL, recurrence_rule=rule, timezone="Europe/Berlin", fire_at=first)

    run_tick(now=first + timedelta(seconds=1))

    row.refresh_from_db()
    assert row.last_fired_at == first + timedelta(seconds=1)
    assert row.next_fire_at == datetime(2025, 1, 17, 9, 0, tzinfo=UTC)


def test_an_rrule_count_runs_from_the_first_due_time():
    first = datetime(2025, 1, 16, 9, 0, tzinfo=UTC)
    row = schedule(**EMAIL, recurrence_rule="FREQ=DAILY;COUNT=2", timezone="UTC", fire_at=first)

    run_tick(now=first)
    run_tick(now=first + timedelta(days=1))

    assert not Notification.objects.filter(pk=row.pk).exists()  # two firings, then the schedule is done
