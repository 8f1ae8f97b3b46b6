"""AppriseChannel against local imitations of Slack's and Twilio's APIs: real Apprise URLs,
Apprise's own Slack and Twilio code, a real HTTP server on 127.0.0.1 (the services' base
URLs pointed at it), the webhook's address guard on the way."""

from __future__ import annotations

import json
import logging
from urllib.parse import parse_qs

import pytest
from apprise.plugins.slack import NotifySlack
from apprise.plugins.twilio import NotifyTwilio
from django.core.exceptions import ValidationError
from django.test import override_settings

from notifications.api import schedule
from notifications.channels import registry
from notifications.models import DeliveryAttempt, Notification
from notifications.tick.engine import run_tick
from tests.support.servers import Reply

pytestmark = pytest.mark.django_db(transaction=True)

BACKEND = "notifications.channels.apprise.AppriseChannel"
SLACK_TOKEN = "TIiajkdnlazkcOXrIdevi7"
SLACK_URL = f"slack://T1JJ3T3L2/A1BRTD4JD/{SLACK_TOKEN}/#ops"
TWILIO_SID = "AC0123456789abcdef0123456789abcdef"
TWILIO_TOKEN = "s3cr3tauthtoken0123456789"
TWILIO_URL = f"twilio://{TWILIO_SID}:{TWILIO_TOKEN}@+15550001111/{{to}}"
SECRETS = (SLACK_TOKEN, TWILIO_TOKEN)


def apprise_channel(name: str, urls: str | list[str]) -> override_settings:
    return override_settings(NOTIFICATIONS_CHANNELS={name: {"BACKEND": BACKEND, "OPTIONS": {"urls": urls}}})


@pytest.fixture
def slack(webhook_server, monkeypatch):
    """Apprise's Slack plugin, its incoming-webhook base URL on the local server."""
    monkeypatch.setattr(NotifySlack, "webhook_url", webhook_server.url("/services"))
    webhook_server.reply = Reply(200, b"ok")
    return webhook_server


@pytest.fixture
def twilio(webhook_server, monkeypatch):
    """Apprise's Twilio plugin, its Messages API on the local server."""
    monkeypatch.setattr(NotifyTwilio, "notify_sms_url", webhook_server.url("/2010-04-01/Accounts/{sid}/Messages.json"))
    webhook_server.reply = Reply(201, json.dumps({"sid": "SM1", "status": "queued"}).encode())
    return webhook_server


def assert_no_secret(row_pk, *texts: str) -> None:
    stored = list(DeliveryAttempt.objects.filter(notification_id=row_pk).values_list("error", flat=True))
    for text in (*texts, *stored):
        for secret in SECRETS:
            assert secret not in (text or "")


@apprise_channel("slack", SLACK_URL)
def test_slack_gets_the_rendered_subject_and_body(slack):
    row = schedule(
        channels=["slack"],
        channel_data={"slack": {}},
        subject="Invoice {{ number }}",
        body="Due {{ amount }} EUR",
        payload={"number": 7, "amount": 30},
    )
    report = run_tick()
    assert report.counts()["succeeded"] == 1
    (request,) = slack.received
    assert request.path == f"/services/T1JJ3T3L2/A1BRTD4JD/{SLACK_TOKEN}"
    sent = json.dumps(json.loads(request.body))
    assert "Invoice 7" in sent and "Due 30 EUR" in sent
    assert not Notification.objects.filter(pk=row.pk).exists()
    attempt = DeliveryAttempt.objects.get(notification_id=row.pk)
    assert (attempt.channel, attempt.target, attempt.outcome) == ("slack", "slack", "ok")


@apprise_channel("slack", SLACK_URL)
def test_a_slack_refusal_is_an_error_in_its_own_words_without_the_token(slack, caplog):
    slack.reply = Reply(404, b"no_team")
    row = schedule(channels=["slack"], channel_data={"slack": {}}, subject="Hi", body="Hello")
    with caplog.at_level(logging.DEBUG):
        run_tick()
    row.refresh_from_db()
    assert row.last_error.startswith("slack: Slack: Failed to send to Slack")
    assert "error=404" in row.last_error
    assert row.error_count == 1
    assert_no_secret(row.pk, row.last_error, *(r.getMessage() for r in caplog.records if r.name.startswith("notif")))


@apprise_channel("sms", TWILIO_URL)
def test_twilio_texts_the_rows_own_number(twilio):
    row = schedule(
        channels=["sms"], channel_data={"sms": {"to": "+15551234567"}}, subject="Code", body="Your code is 4711"
    )
    assert run_tick().counts()["succeeded"] == 1
    (request,) = twilio.received
    assert request.path == f"/2010-04-01/Accounts/{TWILIO_SID}/Messages.json"
    form = parse_qs(request.body.decode())
    assert form["To"] == ["+15551234567"] and form["From"] == ["+15550001111"]
    assert "Your code is 4711" in form["Body"][0]
    assert not Notification.objects.filter(pk=row.pk).exists()


@apprise_channel("sms", TWILIO_URL)
def test_twilio_refusing_the_number_says_so_in_its_words(twilio):
    twilio.reply = Reply(400, json.dumps({"code": 21211, "message": "The 'To' number is not valid."}).encode())
    row = schedule(channels=["sms"], channel_data={"sms": {"to": "+15550000000"}}, subject="Code", body="4711")
    run_tick()
    row.refresh_from_db()
    assert "The 'To' number is not valid." in row.last_error
    assert row.last_error.startswith("sms: Twilio")
    assert_no_secret(row.pk, row.last_error)


@apprise_channel("sms", TWILIO_URL)
def test_a_url_with_to_needs_the_rows_recipient():
    with pytest.raises(ValidationError) as info:
        schedule(channels=["sms"], subject="Code", body="4711")
    assert "channel_data" in info.value.error_dict
    with pytest.raises(ValidationError) as info:
        schedule(channels=["sms"], channel_data={"sms": {"to": ""}}, subject="Code", body="4711")
    assert "channel_data" in info.value.error_dict


@override_settings(NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS=[])
@apprise_channel("slack", SLACK_URL)
def test_loopback_is_refused_by_the_address_guard_when_not_opened(slack):
    row = schedule(channels=["slack"], channel_data={"slack": {}}, subject="Hi", body="Hello")
    run_tick()
    row.refresh_from_db()
    assert slack.received == []  # nothing reached the server
    assert row.dead_lettered_at is not None  # a refused address is permanent, as for a webhook
    assert row.last_error.startswith("slack: blocked address: 127.0.0.1")
    assert_no_secret(row.pk, row.last_error)


@apprise_channel("slack", SLACK_URL)
def test_the_admin_shows_the_service_not_the_credentials(slack, admin_client):
    row = schedule(channels=["slack"], channel_data={"slack": {}}, subject="Hi", body="Hello")
    slack.reply = Reply(503, b"")
    run_tick()
    for page in (
        admin_client.get("/admin/notifications/notification/"),
        admin_client.get(f"/admin/notifications/notification/{row.pk}/change/"),
    ):
        assert page.status_code == 200
        for secret in SECRETS:
            assert secret.encode() not in page.content


def test_a_bad_apprise_url_is_a_configuration_error():
    from notifications.channels.apprise import AppriseChannel

    with pytest.raises(Exception, match="not one Apprise can use"):
        AppriseChannel(urls="nosuchservice://x")
    with override_settings(NOTIFICATIONS_CHANNELS={"chat": {"BACKEND": BACKEND, "OPTIONS": {"urls": "bogus://"}}}):
        # Its rows are held (never dead-lettered as unknown) until the setting is fixed; the
        # reason names the error's type alone: an Apprise URL may hold a token.
        (hold,) = registry.channel("chat").setting_holds()
        assert hold.problem == f"chat: cannot be loaded (ImproperlyConfigured from {BACKEND}())"


@override_settings(NOTIFICATIONS_CHANNEL_TIMEOUT=0.5)
@apprise_channel("slack", SLACK_URL)
def test_a_service_that_never_answers_is_a_timeout_within_the_deadline(slack):
    slack.reply = Reply(behaviour="hang")
    row = schedule(channels=["slack"], channel_data={"slack": {}}, subject="Hi", body="Hello")
    run_tick()
    row.refresh_from_db()
    assert row.last_error == "slack: timed out after 0.5s"
    assert row.error_count == 1


@apprise_channel("slack", [SLACK_URL, "json://127.0.0.1:1/nothing-listens"])
def test_every_url_must_take_it(slack):
    row = schedule(channels=["slack"], channel_data={"slack": {}}, subject="Hi", body="Hello")
    run_tick()
    row.refresh_from_db()
    assert len(slack.received) == 1
    assert row.last_error.startswith("slack: JSON")


@pytest.mark.parametrize("to", ["+15551234567,+15557654321", "+15551234567;+15557654321", "+1555 1234567", "[+1555]"])
@apprise_channel("sms", TWILIO_URL)
def test_a_to_that_apprise_would_split_is_refused(to):
    with pytest.raises(ValidationError) as info:
        schedule(channels=["sms"], channel_data={"sms": {"to": to}}, subject="Code", body="4711")
    assert "one recipient" in str(info.value.error_dict["channel_data"])


@apprise_channel("sms", TWILIO_URL)
def test_a_row_written_around_validation_with_several_recipients_texts_no_one(twilio):
    row = schedule(channels=["sms"], channel_data={"sms": {"to": "+15551234567"}}, subject="Code", body="4711")
    Notification.objects.filter(pk=row.pk).update(channel_data={"sms": {"to": "+15551234567,+15557654321"}})
    run_tick()
    assert twilio.received == []
    row.refresh_from_db()
    assert "one recipient" in row.last_error


@override_settings(NOTIFICATIONS_CHANNEL_TIMEOUT=1)
def test_a_dripping_receiver_behind_apprise_is_cut_at_the_deadline_and_sent_nothing_after(webhook_server):
    """Issue 45, finding 4: Apprise runs each service on a thread of its own, and gives up
    waiting for it at its own timeout while the thread goes on. The deadline holds there
    too: the dripping answer's socket is shut at it, and the topics after it are not sent
    once the row is recorded as timed out (its retry will send them)."""
    from concurrent.futures import wait

    from apprise import apprise as apprise_core

    webhook_server.reply = Reply(behaviour="drip_body", drip_interval=0.5)  # never ends by itself
    url = f"ntfy://127.0.0.1:{webhook_server.port}/first/second/third"
    with apprise_channel("push", url):
        row = schedule(channels=["push"], channel_data={"push": {}}, subject="Hi", body="Hello")
        run_tick()
    row.refresh_from_db()
    assert row.last_error.startswith("push: timed out after 1s") and row.error_count == 1
    # Apprise's abandoned service calls end (the socket shut, the next topics refused)
    # rather than drip on; a generous bound, not a timing.
    # Apprise 2 runs services on threads of its own (1.9 sends them one by one, in the send).
    abandoned = [future for future, _name, _url in getattr(apprise_core, "_abandoned_futures", [])]
    _done, running = wait(abandoned, timeout=30)
    assert not running
    webhook_server.wait_answered(1)
    assert len(webhook_server.received) == 1
