"""An RRULE whose date parts match no date at all is refused in milliseconds.

`FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=30` (February 30th) or `BYWEEKNO=53;BYMONTH=6` never
fires; dateutil searched until year 9999 for it, 26 s of CPU in `schedule()`, in the
admin's form and in the tick's thread, and from `bulk_create` the row was then sent and
deleted as "schedule finished". Now `schedule()` refuses it on `recurrence_rule`, and the
tick dead-letters such a row, saying why, without sending it.

So is a rule whose BYSETPOS no period can hold (`FREQ=MINUTELY;BYSECOND=0;BYSETPOS=2`,
the second of one occurrence a minute): dateutil searched period by period until year
9999 for it, 11 s to over a minute of CPU.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from notifications.api import run_tick, schedule
from notifications.models import Notification
from tests.support.timing import GUARD_SECONDS

pytestmark = pytest.mark.django_db

NO_DATE = "The RRULE never fires: no date matches its BYxxx parts."
NO_POSITION = "The RRULE never fires: no period has as many occurrences as its BYSETPOS asks for."
NEVER = {
    "FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=30": NO_DATE,
    "FREQ=YEARLY;BYWEEKNO=53;BYMONTH=6": NO_DATE,
    "FREQ=MONTHLY;BYMONTH=4;BYMONTHDAY=31": NO_DATE,
    "FREQ=MINUTELY;BYSECOND=0;BYSETPOS=2": NO_POSITION,
    "FREQ=HOURLY;BYMINUTE=0;BYSETPOS=-2": NO_POSITION,
    "FREQ=DAILY;BYHOUR=9;BYMINUTE=0;BYSETPOS=2": NO_POSITION,
    "FREQ=WEEKLY;BYDAY=MO;BYSETPOS=2": NO_POSITION,
}


@pytest.mark.parametrize(("rule", "message"), NEVER.items())
def test_schedule_refuses_a_rule_that_never_fires_at_once(rule, message):
    started = time.monotonic()
    with pytest.raises(ValidationError) as refused:
        schedule(channels=["email"], email_to="ada@example.com", subject="s", body="b", recurrence_rule=rule)
    assert time.monotonic() - started < GUARD_SECONDS  # bounded work, not searched for years
    assert refused.value.message_dict["recurrence_rule"] == [message]


@pytest.mark.parametrize(
    "rule",
    [
        "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO",
        "FREQ=YEARLY;BYWEEKNO=53",
        "FREQ=MONTHLY;BYMONTHDAY=31",
        "FREQ=MINUTELY;BYSECOND=0,30;BYSETPOS=-2",
        "FREQ=DAILY;BYHOUR=9,17;BYMINUTE=0;BYSETPOS=2",
        "FREQ=WEEKLY;BYDAY=MO,FR;BYSETPOS=2",
        "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1",
    ],
)
def test_rare_rules_still_schedule(rule):
    row = schedule(channels=["email"], email_to="ada@example.com", subject="s", body="b", recurrence_rule=rule)
    assert row.next_fire_at is not None


# One rule of each kind, for the surfaces beyond schedule().
ONE_OF_EACH = ["FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=30", "FREQ=MINUTELY;BYSECOND=0;BYSETPOS=2"]


@pytest.mark.parametrize("rule", ONE_OF_EACH)
def test_the_admin_add_form_refuses_such_a_rule_at_once(admin_client, rule):
    data = {
        "channels": ["email"],
        "email_to": "ada@example.com",
        "subject": "s",
        "body": "b",
        "payload": "{}",
        "timezone": "UTC",
        "recurrence_rule": rule,
        "next_fire_at_0": "",
        "next_fire_at_1": "",
    }
    started = time.monotonic()
    response = admin_client.post(reverse("admin:notifications_notification_add"), data)

    assert time.monotonic() - started < GUARD_SECONDS
    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {"recurrence_rule": [NEVER[rule]]}
    assert not Notification.objects.exists()


@pytest.mark.parametrize("rule", ONE_OF_EACH)
def test_the_tick_dead_letters_a_bulk_created_row_with_such_a_rule_and_sends_nothing_of_it(rule):
    now = timezone.now()
    never = Notification.objects.bulk_create(
        [
            Notification(
                channels=["email"],
                email_to="never@example.com",
                subject="s",
                body="b",
                recurrence_rule=rule,
                timezone="UTC",
                next_fire_at=now - timedelta(minutes=1),
            )
        ]
    )[0]
    schedule(channels=["email"], email_to="ada@example.com", subject="s", body="b", fire_at=now)

    started = time.monotonic()
    report = run_tick(now=now)

    assert time.monotonic() - started < GUARD_SECONDS
    assert (report.counts()["dead_lettered"], report.counts()["succeeded"]) == (1, 1)
    assert [m.to for m in mail.outbox] == [["ada@example.com"]]
    row = Notification.objects.get(pk=never.pk)
    assert row.dead_lettered_at is not None and row.next_fire_at is None
    assert row.last_error == f"invalid: recurrence_rule: {NEVER[rule]}"
