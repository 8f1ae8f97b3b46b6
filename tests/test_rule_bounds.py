"""An RRULE whose date parts match no date at all is refused in milliseconds.

`FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=30` (February 30th) or `BYWEEKNO=53;BYMONTH=6` never
fires; dateutil searched until year 9999 for it, 26 s of CPU in `schedule()`, in the
admin's form and in the tick's thread, and from `bulk_create` the row was then sent and
deleted as "schedule finished". Now `schedule()` refuses it on `recurrence_rule`, and the
tick dead-letters such a row, saying why, without sending it.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.utils import timezone

from notifications.api import run_tick, schedule
from notifications.models import Notification

pytestmark = pytest.mark.django_db

NEVER = [
    "FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=30",
    "FREQ=YEARLY;BYWEEKNO=53;BYMONTH=6",
    "FREQ=MONTHLY;BYMONTH=4;BYMONTHDAY=31",
]
MESSAGE = "The RRULE never fires: no date matches its BYxxx parts."


@pytest.mark.parametrize("rule", NEVER)
def test_schedule_refuses_a_rule_no_date_matches_at_once(rule):
    started = time.monotonic()
    with pytest.raises(ValidationError) as refused:
        schedule(channels=["email"], email_to="ada@example.com", subject="s", body="b", recurrence_rule=rule)
    assert time.monotonic() - started < 2
    assert refused.value.message_dict["recurrence_rule"] == [MESSAGE]


@pytest.mark.parametrize(
    "rule", ["FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO", "FREQ=YEARLY;BYWEEKNO=53", "FREQ=MONTHLY;BYMONTHDAY=31"]
)
def test_rare_rules_still_schedule(rule):
    row = schedule(channels=["email"], email_to="ada@example.com", subject="s", body="b", recurrence_rule=rule)
    assert row.next_fire_at is not None


def test_the_tick_dead_letters_a_bulk_created_row_with_such_a_rule_and_sends_nothing_of_it():
    now = timezone.now()
    never = Notification.objects.bulk_create(
        [
            Notification(
                channels=["email"],
                email_to="never@example.com",
                subject="s",
                body="b",
                recurrence_rule=NEVER[0],
                timezone="UTC",
                next_fire_at=now - timedelta(minutes=1),
            )
        ]
    )[0]
    schedule(channels=["email"], email_to="ada@example.com", subject="s", body="b", fire_at=now)

    started = time.monotonic()
    report = run_tick(now=now)

    assert time.monotonic() - started < 3
    assert (report.counts()["dead_lettered"], report.counts()["succeeded"]) == (1, 1)
    assert [m.to for m in mail.outbox] == [["ada@example.com"]]
    row = Notification.objects.get(pk=never.pk)
    assert row.dead_lettered_at is not None and row.next_fire_at is None
    assert row.last_error == f"invalid: recurrence_rule: {MESSAGE}"
