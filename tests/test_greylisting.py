"""Greylisting against a real SMTP server (aiosmtpd): a 451 to RCPT is an answer about one
recipient, from a live server.

- It is no failure of the `email` target: a dozen greylisted reminders (the oldest, so
  the first sent and every probe) open no circuit and hold none of the healthy ones.
- Among several recipients it is not a success: the firing still owes that recipient,
  and its retry goes to that recipient alone (same Message-ID), not to those who got it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test.utils import override_settings
from django.utils import timezone

from notifications.api import requeue, run_tick
from notifications.models import Notification, Target
from tests.support.mail_doubles import schedule_email

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)
AFTER_BACKOFF = NOW + timedelta(seconds=61)
GREYLISTED = "451 4.7.1 Greylisted, please try again later"


@override_settings(NOTIFICATIONS_CIRCUIT_BREAKER={"failures": 3, "cooldown": 60}, NOTIFICATIONS_CONCURRENCY=2)
def test_greylisted_recipients_open_no_circuit_and_hold_no_healthy_row(smtp):
    grey = [f"grey{n}@example.com" for n in range(12)]
    for n, address in enumerate(grey):
        smtp.refuse(address, GREYLISTED)
        schedule_email(NOW - timedelta(minutes=30 - n), email_to=address)  # the oldest: sent first
    healthy = [schedule_email(NOW, email_to=f"user{n}@example.com") for n in range(20)]

    report = run_tick(now=NOW)

    counts = report.counts()
    assert (counts["succeeded"], counts["retried"], counts["deferred"]) == (20, 12, 0)
    assert sorted(d.rcpt_tos[0] for d in smtp.delivered) == sorted(r.email_to for r in healthy)
    assert not Target.objects.exclude(state=Target.State.CLOSED).exists()
    assert not Notification.objects.filter(held_for__isnull=False).exists()
    for row in Notification.objects.all():  # the server's answer, kept
        expected = f"email: 451 4.7.1 <{row.email_to}>: Greylisted, please try again later"
        assert (row.error_count, row.last_error) == (1, expected)


def test_a_451_for_one_of_three_recipients_is_retried_for_that_recipient_only(smtp):
    smtp.refuse("grey@example.com", GREYLISTED)
    row = schedule_email(NOW, email_to=["ada@example.com", "grey@example.com"], email_cc=["grace@example.com"])

    report = run_tick(now=NOW)

    assert report.counts()["succeeded"] == 0
    (first,) = smtp.delivered
    assert sorted(first.rcpt_tos) == ["ada@example.com", "grace@example.com"]
    row.refresh_from_db()  # kept: the firing still owes grey@
    assert row.error_count == 1
    assert row.last_error == "email: SMTP 451 for 1 of 3 recipients"
    assert row.next_fire_at == AFTER_BACKOFF - timedelta(seconds=1)

    smtp.rcpt_replies.clear()  # greylisting lets the retry through
    report = run_tick(now=AFTER_BACKOFF)

    assert report.counts()["succeeded"] == 1
    assert not Notification.objects.filter(pk=row.pk).exists()
    _, retry = smtp.delivered
    assert retry.rcpt_tos == ["grey@example.com"]  # ada@ and grace@ are not sent it twice
    assert retry.message["Message-ID"] == first.message["Message-ID"]


def test_a_dead_lettered_deferral_is_requeued_for_the_deferred_recipient(smtp):
    smtp.refuse("grey@example.com", GREYLISTED)
    row = schedule_email(NOW, email_to=["ada@example.com", "grey@example.com"], max_retries=1)

    run_tick(now=NOW)
    row.refresh_from_db()
    assert row.dead_lettered_at is not None

    smtp.rcpt_replies.clear()
    requeue([row])  # due at the wall clock's now, which a long test run leaves past AFTER_BACKOFF
    row.refresh_from_db()
    run_tick(now=row.next_fire_at)

    assert [d.rcpt_tos for d in smtp.delivered] == [["ada@example.com"], ["grey@example.com"]]
    assert not Notification.objects.filter(pk=row.pk).exists()


def test_a_recurring_row_owes_every_recipient_again_at_its_next_firing(smtp):
    smtp.refuse("grey@example.com", GREYLISTED)
    row = schedule_email(NOW, email_to=["ada@example.com", "grey@example.com"], recurrence_rule="*/5 * * * *")

    run_tick(now=NOW)
    smtp.rcpt_replies.clear()
    run_tick(now=AFTER_BACKOFF)  # the retry: grey@ alone
    row.refresh_from_db()
    run_tick(now=row.next_fire_at)  # the next occurrence: a new firing, to everyone

    assert [sorted(d.rcpt_tos) for d in smtp.delivered] == [
        ["ada@example.com"],
        ["grey@example.com"],
        ["ada@example.com", "grey@example.com"],
    ]
