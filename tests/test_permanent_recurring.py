"""A recurring row whose every failed channel failed permanently stops as a dead letter.

410 Gone, a refused address, a refused recipient: the next occurrence would hit the same
dead target, so the row does not fire again (`next_fire_at` NULL) instead of skipping
forward. `requeue` makes it due now, like every dead letter; once that firing goes out it
resumes its schedule at its first occurrence after now. A transient exhaustion keeps
skipping forward, and a partial failure is never a dead letter.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core import mail
from django.test import override_settings

from notifications import signals
from notifications.api import requeue, run_tick, schedule
from notifications.models import DeliveryAttempt, Notification
from notifications.models.states import State
from tests.support.mail_doubles import BACKEND, OK_TO, REFUSED_TO
from tests.support.servers import Reply

pytestmark = pytest.mark.django_db

NOW = datetime(2025, 1, 15, 9, 0, tzinfo=UTC)
DAILY_AT_9 = "0 9 * * *"
TOMORROW = NOW + timedelta(days=1)


@pytest.fixture(autouse=True)
def clock(time_machine):
    time_machine.move_to(NOW - timedelta(hours=1), tick=False)


def reload(row: Notification) -> Notification:
    return Notification.objects.get(pk=row.pk)


def daily(**fields) -> Notification:
    return schedule(recurrence_rule=DAILY_AT_9, timezone="UTC", fire_at=NOW, **fields)


def webhook_fields(server, path: str = "/hook") -> dict:
    return {"channels": ["webhook"], "webhook_url": server.url(path)}


def assert_stopped(row: Notification, error: str) -> None:
    row = reload(row)
    assert row.last_error == error
    assert (row.next_fire_at, row.dead_lettered_at, row.error_count) == (None, NOW, 3)
    assert row.state(NOW) == State.DEAD
    # Not at its next occurrence either, nor any later one.
    assert run_tick(now=TOMORROW).claimed == 0
    assert run_tick(now=TOMORROW + timedelta(days=30)).claimed == 0


def test_410_gone_stops_a_recurring_row(webhook_server):
    webhook_server.reply = Reply(status=410)
    row = daily(**webhook_fields(webhook_server))

    report = run_tick(now=NOW)

    assert report.counts()["dead_lettered"] == 1
    assert len(webhook_server.received) == 1
    assert_stopped(row, "webhook: HTTP 410")
    assert len(webhook_server.received) == 1


@override_settings(EMAIL_BACKEND=BACKEND)
def test_a_refused_recipient_stops_a_recurring_row():
    row = daily(channels=["email"], email_to=REFUSED_TO, subject="s", body="b")

    run_tick(now=NOW)

    assert_stopped(row, "email: 550 5.1.1 <refused@example.com>: no such user")
    attempt = DeliveryAttempt.objects.get(notification_id=row.pk)
    assert attempt.error_class == "permanent"


def test_a_refused_address_stops_a_recurring_row(webhook_server):
    # Saved while loopback was open; the guard refuses it when the tick connects.
    row = daily(channels=["webhook"], webhook_url=f"http://localhost:{webhook_server.port}/hook")

    with override_settings(NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS=[]):
        run_tick(now=NOW)

    assert reload(row).last_error.startswith("webhook: blocked address")
    assert_stopped(row, reload(row).last_error)
    assert webhook_server.received == []


@override_settings(EMAIL_BACKEND=BACKEND)
def test_every_channel_permanent_stops_it_but_one_success_is_a_partial(webhook_server):
    webhook_server.reply = Reply(status=410)
    both_dead = daily(channels=["email", "webhook"], webhook_url=webhook_server.url(), email_to=REFUSED_TO, subject="s")
    partial = daily(channels=["email", "webhook"], webhook_url=webhook_server.url(), email_to=OK_TO, subject="s")

    report = run_tick(now=NOW)

    assert (report.counts()["dead_lettered"], report.counts()["partial"]) == (1, 1)
    assert reload(both_dead).next_fire_at is None
    partial = reload(partial)
    assert (partial.last_error, partial.next_fire_at, partial.dead_lettered_at) == ("partial: webhook", TOMORROW, None)
    assert [m.to for m in mail.outbox] == [[OK_TO]]


def test_a_transient_exhaustion_still_skips_forward(webhook_server):
    webhook_server.reply = Reply(status=503)
    row = daily(**webhook_fields(webhook_server))
    Notification.objects.filter(pk=row.pk).update(error_count=2)  # its last attempt

    assert run_tick(now=NOW).counts()["dead_lettered"] == 1

    row = reload(row)
    assert (row.dead_lettered_at, row.error_count, row.next_fire_at) == (NOW, 0, TOMORROW)


def test_the_dead_letter_signal_is_sent_once(webhook_server):
    webhook_server.reply = Reply(status=410)
    heard = []

    def receiver(sender, notification, results, **kwargs):
        heard.append((notification.pk, notification.next_fire_at, [r.error for r in results]))

    signals.notification_dead_lettered.connect(receiver, weak=False)
    try:
        row = daily(**webhook_fields(webhook_server))
        run_tick(now=NOW)
        run_tick(now=TOMORROW)
    finally:
        signals.notification_dead_lettered.disconnect(receiver)

    assert heard == [(row.pk, None, ["webhook: HTTP 410"])]


# --- requeue resumes the schedule ---------------------------------------------------------------


def test_requeue_fires_a_stopped_row_now_then_resumes_its_schedule(webhook_server):
    webhook_server.reply = Reply(status=410)
    row = daily(**webhook_fields(webhook_server))
    run_tick(now=NOW)
    stopped_firing = reload(row).firing_id
    later = NOW + timedelta(days=3, hours=2)  # the receiver is fixed three days later

    result = requeue(Notification.objects.filter(pk=row.pk), now=later)

    assert result.changed == 1
    row = reload(row)
    assert (row.next_fire_at, row.error_count, row.dead_lettered_at, row.last_error) == (later, 0, None, None)
    assert row.firing_id != stopped_firing

    webhook_server.reply = Reply(status=200)
    sent = run_tick(now=later)

    assert sent.counts()["succeeded"] == 1
    assert webhook_server.received[-1].headers["webhook-id"] == f"msg_{row.firing_id}"
    row = reload(row)
    # Back on its schedule: the first occurrence after now; the missed ones are not sent.
    assert row.next_fire_at == datetime(2025, 1, 19, 9, 0, tzinfo=UTC)
    assert row.state(later) == State.SCHEDULED
    assert len(webhook_server.received) == 2
    assert run_tick(now=row.next_fire_at).counts()["succeeded"] == 1
    assert reload(row).next_fire_at == datetime(2025, 1, 20, 9, 0, tzinfo=UTC)


def test_a_requeued_row_that_fails_permanently_again_stops_again(webhook_server):
    webhook_server.reply = Reply(status=410)
    row = daily(**webhook_fields(webhook_server))
    run_tick(now=NOW)
    requeue([row], now=NOW + timedelta(hours=1))

    assert run_tick(now=NOW + timedelta(hours=1)).counts()["dead_lettered"] == 1

    row = reload(row)
    assert (row.next_fire_at, row.dead_lettered_at) == (None, NOW + timedelta(hours=1))
