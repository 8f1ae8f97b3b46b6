"""`notifications.testing`: the double a host project uses to test its own code against the queue."""

from __future__ import annotations

from datetime import timedelta

import pytest
import requests
from django.conf import settings
from django.core import mail
from django.core.mail import send_mail
from django.test import override_settings
from django.utils import timezone

from notifications.models import Notification
from notifications.testing import capture_notifications

OTHER_SECRET = "whsec_" + "b3RoZXItc2VjcmV0LW9mLWF0LWxlYXN0LTI0LWJ5dGVz"


def test_webhooks_and_emails_are_captured_and_nothing_reaches_the_network(make_row, webhook_server):
    local = make_row(channels=["webhook"], webhook_url=webhook_server.url(), payload={"n": 1})
    public = make_row(channels=["webhook"], webhook_url="https://hooks.example.invalid/in", payload={"n": 2})
    email = make_row(channels=["email"], email_to="ada@example.com", subject="Hi {{ name }}", payload={"name": "Ada"})

    with capture_notifications() as captured:
        report = captured.tick()

    assert report.counts()["succeeded"] == 3
    assert webhook_server.received == []  # answered by the double, not the real server
    by_url = {w.url: w for w in captured.webhooks}
    assert set(by_url) == {webhook_server.url(), "https://hooks.example.invalid/in"}
    assert by_url[webhook_server.url()].payload == {"n": 1}
    assert by_url[webhook_server.url()].json["notification_id"] == local.pk
    assert by_url["https://hooks.example.invalid/in"].json["notification_id"] == public.pk
    assert by_url["https://hooks.example.invalid/in"].json["type"] == "notification.fired"
    assert [(m.to, m.subject) for m in captured.emails] == [(["ada@example.com"], "Hi Ada")]
    assert not Notification.objects.filter(pk__in=[local.pk, public.pk, email.pk]).exists()


def test_captured_webhooks_are_signed_as_they_would_go_out(make_row):
    make_row(channels=["webhook"], webhook_url="https://hooks.example.invalid/in")

    with capture_notifications() as captured:
        captured.tick()

    (hook,) = captured.webhooks
    assert hook.verify()  # the site's NOTIFICATIONS_WEBHOOK_SECRET
    assert hook.verify(settings.NOTIFICATIONS_WEBHOOK_SECRET)
    assert not hook.verify(OTHER_SECRET)
    assert hook.headers["content-type"] == "application/json"
    assert hook.message_id == hook.json["id"]


def test_a_failing_endpoint_retries_then_succeeds_with_the_same_webhook_id(make_row):
    row = make_row(channels=["webhook"], webhook_url="https://hooks.example.invalid/in")

    with capture_notifications() as captured:
        captured.respond(503)
        first = captured.tick()
        row.refresh_from_db()
        assert (first.counts()["retried"], row.error_count, row.last_error) == (1, 1, "webhook: HTTP 503")

        captured.respond(200)
        assert captured.tick().claimed == 0  # not due again before its backoff
        second = captured.tick(now=timezone.now() + timedelta(minutes=2))

    assert second.counts()["succeeded"] == 1
    assert not Notification.objects.filter(pk=row.pk).exists()
    first_attempt, second_attempt = captured.webhooks
    assert first_attempt.message_id == second_attempt.message_id  # receivers can de-duplicate


def test_replies_per_url_and_permanent_failures_dead_letter(make_row):
    fine = make_row(channels=["webhook"], webhook_url="https://fine.example.invalid/")
    gone = make_row(channels=["webhook"], webhook_url="https://gone.example.invalid/")

    with capture_notifications() as captured:
        captured.respond(410, url="https://gone.example.invalid/")
        report = captured.tick()

    assert (report.counts()["succeeded"], report.counts()["dead_lettered"]) == (1, 1)
    assert not Notification.objects.filter(pk=fine.pk).exists()
    gone.refresh_from_db()
    assert gone.dead_lettered_at is not None
    assert gone.last_error == "webhook: HTTP 410"


def test_an_endpoint_that_never_answers(make_row):
    row = make_row(channels=["webhook"], webhook_url="https://slow.example.invalid/")

    with capture_notifications() as captured:
        captured.respond(exception=requests.ConnectTimeout("no answer"))
        captured.tick()

    row.refresh_from_db()
    assert row.last_error == f"webhook: timed out after {settings.NOTIFICATIONS_CHANNEL_TIMEOUT}s"


def test_the_host_projects_own_emails_are_captured_too(db):
    with capture_notifications() as captured:
        send_mail("Welcome", "Hello", "site@example.com", ["ada@example.com"])
        captured.clear()
        send_mail("Receipt", "Thanks", "site@example.com", ["ada@example.com"])

    assert [m.subject for m in captured.emails] == ["Receipt"]
    assert [m.subject for m in mail.outbox] == ["Welcome", "Receipt"]  # Django's outbox still works


@pytest.mark.skipif(not hasattr(mail, "mailers"), reason="MAILERS arrived in Django 6.1")
def test_a_site_on_mailers_has_its_mail_captured(make_row):
    smtp_nowhere = {"BACKEND": "django.core.mail.backends.smtp.EmailBackend", "OPTIONS": {"port": 9, "timeout": 1}}
    row = make_row(channels=["email"], email_to="ada@example.com", subject="Via mailers")

    with override_settings(MAILERS={"default": smtp_nowhere}), capture_notifications() as captured:
        report = captured.tick()

    assert report.counts()["succeeded"] == 1, row
    assert [m.subject for m in captured.emails] == ["Via mailers"]


def test_outside_the_block_webhooks_go_out_for_real_again(make_row, webhook_server):
    with capture_notifications() as captured:
        pass
    make_row(channels=["webhook"], webhook_url=webhook_server.url())

    report = captured.tick()  # a Capture outside its block is just a way to tick

    assert report.counts()["succeeded"] == 1
    assert len(webhook_server.received) == 1
    assert captured.webhooks == []
