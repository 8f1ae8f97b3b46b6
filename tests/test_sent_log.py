"""The sent log: "did the reset mail to X go out?" answered after the row is gone.

Each delivery attempt keeps who it went to and what it was, as its channel says
(`Channel.describe`): an email's addresses and subject, a webhook's host and event type.
Never the body, the payload, a URL's path or query, or a secret. The admin's delivery
log finds the attempt by recipient.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from notifications.api import run_tick, schedule
from notifications.channels import Channel, ChannelResult, Firing
from notifications.models import DeliveryAttempt, Notification
from notifications.store import prune_history
from tests.support import mail_doubles
from tests.support.queue_states import SECRET

pytestmark = pytest.mark.django_db

LOG = "/admin/notifications/deliveryattempt/"


def test_a_delivered_email_is_found_by_recipient_after_its_row_is_deleted(admin_client):
    row = schedule(
        channels=["email"],
        email_to="ann@example.com",
        email_cc=["carl@example.com"],
        subject="Reset your password, {{ name }}",
        body="the secret link: https://example.com/reset/abc123",
        payload={"name": "Ann", "token": "abc123"},
    )
    run_tick()
    assert len(mail.outbox) == 1
    assert not Notification.objects.filter(pk=row.pk).exists()  # a one-shot row goes once delivered

    (attempt,) = DeliveryAttempt.objects.filter(notification_id=row.pk)
    assert attempt.sent_to == "ann@example.com, carl@example.com"
    assert attempt.summary == "Reset your password, Ann"
    page = admin_client.get(LOG, {"q": "ann@example.com"}).content.decode()
    assert f"#{row.pk}" in page and "Reset your password, Ann" in page
    assert "abc123" not in page  # neither the body nor the payload
    assert f"#{row.pk}" not in admin_client.get(LOG, {"q": "bob@example.com"}).content.decode()


def test_a_webhook_is_logged_by_host_and_event_never_its_path_or_query(webhook_server, admin_client):
    url = webhook_server.url("/hooks/tenant-42?token=abc123")
    row = schedule(channels=["webhook"], webhook_url=url, webhook_secret=SECRET, payload={"card": "4242"})
    run_tick()

    (attempt,) = DeliveryAttempt.objects.filter(notification_id=row.pk)
    assert attempt.outcome == DeliveryAttempt.AttemptOutcome.OK
    assert webhook_server.received[0].headers["user-agent"] == "django-notification-queue"  # the distribution's name
    host = url.split("//", 1)[1].split("/", 1)[0]
    assert (attempt.sent_to, attempt.summary) == (host, "notification.fired")
    page = admin_client.get(LOG, {"q": host}).content.decode()
    assert f"#{row.pk}" in page
    for secret in ("tenant-42", "abc123", "4242", SECRET):
        assert secret not in page


def test_a_failed_attempt_says_who_it_was_for_too(settings):
    settings.EMAIL_BACKEND = mail_doubles.BACKEND
    row = schedule(channels=["email"], email_to=mail_doubles.DOWN_TO, subject="Invoice 7", body="x")
    run_tick()
    (attempt,) = DeliveryAttempt.objects.filter(notification_id=row.pk)
    assert attempt.outcome == DeliveryAttempt.AttemptOutcome.FAILED
    assert (attempt.sent_to, attempt.summary) == (mail_doubles.DOWN_TO, "Invoice 7")


def test_the_sent_log_is_pruned_with_the_delivery_log():
    row = schedule(channels=["email"], email_to="eve@example.com", subject="Hello", body="x")
    run_tick()
    assert DeliveryAttempt.objects.filter(sent_to="eve@example.com").exists()

    prune_history(timezone.now() + timedelta(days=31), retention_days=30)

    assert not DeliveryAttempt.objects.filter(notification_id=row.pk).exists()


class Describing(Channel):
    """A channel of a site's own: what it says of a firing is what the log keeps."""

    name = "sms"

    def deliver(self, firing: Firing) -> ChannelResult:
        return ChannelResult(self.name)

    def describe(self, firing: Firing) -> tuple[str, str]:
        return "+15551234567", "reminder"


def test_any_channel_says_its_own_line_and_a_failing_describe_loses_nothing():
    row = Notification(pk=1, channels=["email"], email_to="f@example.com")
    firing = Firing(row, "id", timezone.now(), ["sms"], targets={"sms": "sms"})
    result = Describing().send(firing)
    assert (result.sent_to, result.summary) == ("+15551234567", "reminder")

    class Broken(Describing):
        def describe(self, firing: Firing) -> tuple[str, str]:
            raise RuntimeError("boom")

    result = Broken().send(firing)
    assert result.ok and (result.sent_to, result.summary) == ("sms", "")
