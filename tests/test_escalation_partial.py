"""Escalation after a partial failure (issue 42 #4): a row sent to the inbox and a webhook
whose webhook fails. The inbox message exists once; the escalation goes out once at the
message's deadline when it is unread and is cancelled when it is read; neither a requeue
nor a later tick makes a second message or a second escalation. Runs on every database
(`--ds=tests.settings_postgres`, `--ds=tests.settings_mysql`).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from notifications import inbox
from notifications.models import DeliveryAttempt, InboxMessage, Notification
from notifications.models.states import State
from notifications.services import actions
from notifications.testing import capture_notifications
from tests.test_escalation import AFTER, clock, escalating  # noqa: F401 - `clock` is a fixture

pytestmark = pytest.mark.django_db

URL = "https://hooks.example.com/partial"


def log_of(row) -> list[tuple[str, str]]:
    attempts = DeliveryAttempt.objects.filter(notification_id=row.pk).order_by("attempted_at", "id")
    return [(a.channel, a.outcome) for a in attempts]


def partly_delivered(clock, captured, t0) -> Notification:  # noqa: F811 - the fixture's value
    """The first firing at t0: the inbox delivers, the webhook answers 503."""
    row = escalating(channels=["inbox", "webhook"], webhook_url=URL)
    captured.respond(503)
    assert captured.tick(now=t0).counts()["partial"] == 1
    return Notification.objects.get(pk=row.pk)


def test_an_unread_message_escalates_once_although_the_webhook_failed(clock, mailoutbox):  # noqa: F811
    t0 = timezone.now()
    deadline = t0 + timedelta(seconds=AFTER)
    with capture_notifications() as captured:
        row = partly_delivered(clock, captured, t0)
        (message,) = InboxMessage.objects.filter(notification_id=row.pk)
        # It waits for the message's deadline instead of for an operator.
        assert row.state(t0) == State.ESCALATION
        assert row.next_fire_at == deadline
        assert row.escalation_of == message.firing_id
        assert "webhook: HTTP 503" in row.last_error

        # The operator's requeue has nothing to resend: the row is its escalation now.
        requeued = actions.requeue([row], now=t0)
        assert requeued.changed == 0 and requeued.skipped
        captured.respond(200)
        captured.tick(now=t0 + timedelta(seconds=1))
        assert len(captured.webhooks) == 1 and not mailoutbox

        clock.move_to(deadline, tick=False)
        captured.tick(now=deadline)
        clock.move_to(deadline + timedelta(seconds=AFTER), tick=False)
        captured.tick(now=deadline + timedelta(seconds=AFTER))
        assert len(captured.webhooks) == 1  # the escalation goes to email alone
    assert [m.to for m in mailoutbox] == [["ada@example.com"]]
    assert InboxMessage.objects.filter(notification_id=row.pk).count() == 1
    assert not Notification.objects.filter(pk=row.pk).exists()
    assert log_of(row) == [("inbox", "ok"), ("webhook", "failed"), ("email", "ok")]


def test_a_message_read_in_time_cancels_the_escalation_of_a_partial_row(clock, mailoutbox):  # noqa: F811
    t0 = timezone.now()
    deadline = t0 + timedelta(seconds=AFTER)
    with capture_notifications() as captured:
        row = partly_delivered(clock, captured, t0)
        (message,) = InboxMessage.objects.filter(notification_id=row.pk)
        assert inbox.mark("user:7", [message.pk], "read") == 1
        clock.move_to(deadline, tick=False)
        captured.tick(now=deadline)
        clock.move_to(deadline + timedelta(seconds=AFTER), tick=False)
        captured.tick(now=deadline + timedelta(seconds=AFTER))
        assert len(captured.webhooks) == 1
    assert not mailoutbox
    assert InboxMessage.objects.filter(notification_id=row.pk).count() == 1
    assert not Notification.objects.filter(pk=row.pk).exists()
    assert log_of(row) == [("inbox", "ok"), ("webhook", "failed"), ("email", "cancelled")]


def test_the_requeue_of_a_partial_row_parked_before_escalating_sends_once(clock, mailoutbox):  # noqa: F811
    """A row parked as partial before it escalated on a partial failure (saved by an
    earlier version): its requeue resends the webhook alone, under the same firing, and
    then waits as one escalation; a second requeue finds nothing to resend."""
    t0 = timezone.now()
    with capture_notifications() as captured:
        captured.respond(503)
        row = escalating(channels=["inbox", "webhook"], webhook_url=URL, escalate_after=None, escalate_to=[])
        captured.tick(now=t0)
        Notification.objects.filter(pk=row.pk).update(escalate_after=AFTER, escalate_to=["email"])
        row = Notification.objects.get(pk=row.pk)
        assert row.state(t0) == State.PARTIAL

        requeued_at = t0 + timedelta(seconds=60)
        clock.move_to(requeued_at, tick=False)
        assert actions.requeue([row], now=requeued_at).changed == 1
        captured.respond(200)
        captured.tick(now=requeued_at)
        first, resent = (w.headers["webhook-id"] for w in captured.webhooks)
        assert first == resent  # the same firing, sent again
        waiting = Notification.objects.get(pk=row.pk)
        assert waiting.state(requeued_at) == State.ESCALATION
        assert actions.requeue([waiting], now=requeued_at).changed == 0

        for at in (requeued_at + timedelta(seconds=AFTER), requeued_at + timedelta(seconds=2 * AFTER)):
            clock.move_to(at, tick=False)
            captured.tick(now=at)
        assert len(captured.webhooks) == 2
    assert [m.to for m in mailoutbox] == [["ada@example.com"]]
    assert InboxMessage.objects.filter(notification_id=row.pk).count() == 1
    assert log_of(row) == [("inbox", "ok"), ("webhook", "failed"), ("webhook", "ok"), ("email", "ok")]
