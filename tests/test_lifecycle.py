"""`cancel`, `pause`, `resume` and `run_now` in `notifications.api`, by key or by row."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core import mail
from django.utils import timezone

from notifications.api import cancel, pause, resume, run_now, run_tick, schedule
from notifications.models import Notification, State

pytestmark = pytest.mark.django_db

NOW = datetime(2030, 1, 15, 12, 0, tzinfo=UTC)  # a Tuesday
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
EMAIL = {"channels": ["email"], "email_to": "ada@example.com", "subject": "Reminder", "body": "Hello"}
DAILY_NINE = {"recurrence_rule": "0 9 * * *", "timezone": "UTC"}


@pytest.fixture
def clock():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


def one_shot(key: str = "k", **fields) -> Notification:
    return schedule(**EMAIL, key=key, **{"fire_at": NOW + HOUR, **fields})


def daily(key: str = "daily", **fields) -> Notification:
    return schedule(**EMAIL, **DAILY_NINE, key=key, **fields)


def fresh(row: Notification) -> Notification:
    return Notification.objects.get(pk=row.pk)


# --- cancel -----------------------------------------------------------------------------------


def test_cancel_deletes_by_key_or_row_and_says_whether_there_was_one(clock):
    by_key, by_row, keyless = one_shot("a"), one_shot("b"), schedule(**EMAIL, fire_at=NOW)

    assert cancel("a") is True
    assert cancel("a") is False  # gone already
    assert cancel(by_row) is True
    assert cancel(by_row) is False
    assert cancel("never-scheduled") is False
    assert cancel("") is False  # a blank key names no row, not every row without one
    assert list(Notification.objects.all()) == [keyless]
    assert not Notification.objects.filter(pk__in=[by_key.pk, by_row.pk]).exists()


def test_cancel_refuses_what_is_neither_a_key_nor_a_row(clock):
    row = one_shot()
    with pytest.raises(TypeError, match="a key or a Notification"):
        cancel(row.pk)
    assert Notification.objects.filter(pk=row.pk).exists()


# --- unknown keys ---------------------------------------------------------------------------------


@pytest.mark.parametrize("action", [pause, resume, run_now])
@pytest.mark.parametrize("key", ["never-scheduled", ""])
def test_an_unknown_key_raises_does_not_exist(action, key):
    schedule(**EMAIL)  # a row without a key is not named by ""
    with pytest.raises(Notification.DoesNotExist, match="No notification has the key"):
        action(key)


@pytest.mark.parametrize("action", [pause, resume, run_now])
def test_a_row_deleted_meanwhile_raises_does_not_exist(clock, action):
    row = one_shot()
    Notification.objects.filter(pk=row.pk).delete()
    with pytest.raises(Notification.DoesNotExist):
        action(row)


# --- pause ----------------------------------------------------------------------------------------


def test_a_paused_row_is_never_claimed(clock):
    row = one_shot(fire_at=NOW - MINUTE)

    paused = pause("k")

    assert paused.pk == row.pk and paused.paused_at == NOW
    assert fresh(row).state() == State.PAUSED
    assert run_tick().claimed == 0
    assert mail.outbox == []


def test_pause_by_row_twice_keeps_the_first_pause(clock):
    row = one_shot()
    pause(row)
    clock.shift(HOUR)
    assert pause(row).paused_at == NOW


@pytest.mark.parametrize(
    "columns",
    [{"next_fire_at": None}, {"next_fire_at": None, "dead_lettered_at": NOW, "error_count": 3}],
    ids=["parked", "dead letter"],
)
def test_a_row_that_will_not_fire_is_not_paused(clock, columns):
    row = one_shot()
    Notification.objects.filter(pk=row.pk).update(**columns)
    assert pause("k").paused_at is None


def test_pausing_a_row_in_flight_leaves_the_claim_to_its_tick(clock):
    """The firing in flight finishes and writes back (its claim still fences it); the pause stays."""
    row = daily(fire_at=NOW - MINUTE)
    in_flight_until = timezone.now() + HOUR
    Notification.objects.filter(pk=row.pk).update(claim_token=uuid.uuid4(), claimed_until=in_flight_until)
    pause("daily")
    stored = fresh(row)
    assert (stored.paused_at, stored.claimed_until) == (NOW, in_flight_until)  # the claim stays with the tick


# --- resume ---------------------------------------------------------------------------------------


def test_resume_makes_a_one_shot_row_due_at_its_due_time(clock):
    one_shot(fire_at=NOW + HOUR)
    pause("k")
    clock.shift(30 * MINUTE)

    resumed = resume("k")

    assert resumed.paused_at is None
    assert resumed.next_fire_at == NOW + HOUR
    assert resumed.state() == State.SCHEDULED


def test_resume_makes_a_one_shot_row_whose_due_time_passed_due_at_once(clock):
    one_shot(fire_at=NOW + HOUR)
    pause("k")
    clock.shift(3 * HOUR)

    resumed = resume("k")

    assert resumed.next_fire_at == NOW + 3 * HOUR  # now, so max_delay counts from here
    assert run_tick().counts()["succeeded"] == 1
    assert len(mail.outbox) == 1


def test_resume_moves_a_recurring_row_past_what_it_missed(clock):
    row = daily()
    assert row.next_fire_at == NOW.replace(hour=9) + DAY
    pause("daily")
    clock.shift(3 * DAY)  # three 09:00 occurrences go by while paused

    resumed = resume("daily")

    assert resumed.next_fire_at == NOW.replace(hour=9) + 4 * DAY  # the first after now
    assert resumed.firing_id != row.firing_id  # a firing of its own, not the missed one
    assert run_tick().claimed == 0  # the missed occurrences are not sent
    assert mail.outbox == []


def test_resume_of_a_recurring_row_gives_up_a_pending_retry(clock):
    row = daily()
    Notification.objects.filter(pk=row.pk).update(
        error_count=2, last_error="email: SMTPServerDisconnected", next_fire_at=NOW + 5 * MINUTE
    )
    pause("daily")

    resumed = resume("daily")

    assert (resumed.error_count, resumed.last_error) == (0, None)
    assert resumed.next_fire_at == NOW.replace(hour=9) + DAY
    assert resumed.state() == State.SCHEDULED


def test_resume_of_a_row_that_is_not_paused_changes_nothing(clock):
    row = one_shot()
    before = fresh(row)
    clock.shift(HOUR)
    after = resume("k")
    assert (after.next_fire_at, after.updated_at) == (before.next_fire_at, before.updated_at)


# --- run now --------------------------------------------------------------------------------------


def test_run_now_makes_a_one_shot_row_due_now(clock):
    one_shot(fire_at=NOW + DAY)

    assert run_now("k").next_fire_at == NOW

    assert run_tick().counts()["succeeded"] == 1
    assert len(mail.outbox) == 1
    assert not Notification.objects.exists()


def test_run_now_fires_a_recurring_row_and_it_continues_its_schedule(clock):
    row = daily()
    scheduled_for = row.next_fire_at

    assert run_now(row).next_fire_at == NOW
    run_tick()

    after = fresh(row)
    assert len(mail.outbox) == 1
    assert after.last_fired_at == NOW
    assert after.next_fire_at == scheduled_for  # the rule's next occurrence after now
    assert after.state() == State.SCHEDULED


def test_run_now_of_a_parked_row_and_of_a_retrying_row(clock):
    parked, retrying = one_shot("parked"), one_shot("retrying")
    Notification.objects.filter(pk=parked.pk).update(next_fire_at=None)
    Notification.objects.filter(pk=retrying.pk).update(error_count=1, last_error="email: timed out after 2s")

    assert run_now("parked").next_fire_at == NOW
    again = run_now("retrying")
    assert (again.next_fire_at, again.error_count) == (NOW, 1)  # the retry goes now; the count stands


@pytest.mark.parametrize(
    "columns",
    [
        {"paused_at": NOW},
        {"dead_lettered_at": NOW, "next_fire_at": None, "error_count": 3, "last_error": "email: refused"},
        {"failed_channels": ["email"], "next_fire_at": None, "last_error": "partial: email"},
        {"next_fire_at": NOW - MINUTE},
        {"claim_token": uuid.uuid4(), "claimed_until": NOW + MINUTE},
    ],
    ids=["paused", "dead letter", "partial failure", "already due", "in flight"],
)
def test_run_now_leaves_rows_it_does_not_apply_to_as_they_are(clock, columns):
    row = one_shot()
    Notification.objects.filter(pk=row.pk).update(**columns)
    before = fresh(row)

    after = run_now("k")

    assert (after.next_fire_at, after.updated_at) == (before.next_fire_at, before.updated_at)
