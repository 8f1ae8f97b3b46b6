"""The email channel through the real django-anymail against loopback imitations of
providers' HTTP APIs (Resend, Brevo, Postmark), and anymail's tracking signal.

Error answers keep their HTTP status and the provider's reason; 4xx other than 408 and
429 are permanent, the rest transient; a stall past REQUESTS_TIMEOUT reads as a timeout
and the retry carries the same idempotency key, so the provider sends once.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from anymail.signals import AnymailTrackingEvent, tracking
from django.test.utils import override_settings
from django.urls import include, path
from django.utils import timezone

from notifications.api import run_tick
from notifications.models import DeliveryAttempt, Suppression
from tests.support.mail_doubles import schedule_email
from tests.support.mail_servers import APIReply, ProviderAPI, mail_settings

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)
AFTER_BACKOFF = NOW + timedelta(seconds=61)
RESEND = "anymail.backends.resend.EmailBackend"
BREVO = "anymail.backends.brevo.EmailBackend"
POSTMARK = "anymail.backends.postmark.EmailBackend"
API_KEY = "re_test_0123456789abcdef"

# What Resend answers to a malformed `to` (its validation_error shape).
INVALID_TO = {
    "statusCode": 422,
    "message": "Invalid `to` field. The email address needs to follow the `email@example.com` format.",
    "name": "validation_error",
}


@pytest.fixture
def api():
    server = ProviderAPI()
    yield server
    server.close()


@pytest.fixture
def resend(api):
    anymail = {"RESEND_API_KEY": API_KEY, "RESEND_API_URL": api.url, "REQUESTS_TIMEOUT": 1}
    with mail_settings(RESEND), override_settings(ANYMAIL=anymail):
        yield api


def email(**fields):
    return schedule_email(NOW, **fields)


def attempts(row):
    return list(DeliveryAttempt.objects.filter(notification_id=row.pk).order_by("attempted_at", "id"))


def test_200_delivers_with_the_firings_id_as_idempotency_key(resend):
    row = email(
        email_to=["ada@example.com", "grace@example.com"],
        email_cc=["linus@example.com"],
        email_bcc=["audit@example.com"],
        reply_to=["desk@example.com"],
        html_body="<p>{{ who }}</p>",
        payload={"who": "<Ada>"},
    )

    report = run_tick(now=NOW)

    assert report.counts()["succeeded"] == 1
    (request,) = resend.requests
    assert request.path == "/emails"
    assert request.headers["idempotency-key"] == str(row.firing_id)
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    sent = request.json
    assert sent["to"] == ["ada@example.com", "grace@example.com"]
    assert (sent["cc"], sent["bcc"], sent["reply_to"]) == (
        ["linus@example.com"],
        ["audit@example.com"],
        ["desk@example.com"],
    )
    assert (sent["text"], sent["html"]) == ("Hello", "<p>&lt;Ada&gt;</p>")
    assert sent["headers"]["Message-ID"].startswith(f"<notification-{row.pk}.{row.firing_id}@")
    assert "Idempotency-Key" not in sent.get("headers", {})  # an HTTP header, not a message header


def test_the_key_is_per_send_not_left_on_the_session(resend):
    first, second = email(email_to="a@example.com"), email(email_to="b@example.com")

    with override_settings(NOTIFICATIONS_CONCURRENCY=1):
        run_tick(now=NOW)

    keys = sorted(r.headers["idempotency-key"] for r in resend.requests)
    assert keys == sorted([str(first.firing_id), str(second.firing_id)])


def test_422_is_permanent_with_its_status_and_the_providers_reason(resend):
    resend.default = APIReply(422, INVALID_TO)
    row = email()

    report = run_tick(now=NOW)

    row.refresh_from_db()
    assert report.counts()["dead_lettered"] == 1
    assert row.last_error == (
        "email: HTTP 422 Invalid `to` field. The email address needs to follow the `email@example.com` format."
    )
    (attempt,) = attempts(row)
    assert (attempt.http_status, attempt.error_class) == (422, "permanent")
    assert run_tick(now=NOW + timedelta(days=1)).claimed == 0  # never retried


def test_500_is_transient_and_retried(resend):
    resend.replies.append(APIReply(500, {"statusCode": 500, "message": "Internal server error", "name": "x"}))
    row = email()

    run_tick(now=NOW)

    row.refresh_from_db()
    assert (row.error_count, row.last_error) == (1, "email: HTTP 500 Internal server error")
    (attempt,) = attempts(row)
    assert (attempt.http_status, attempt.error_class) == (500, "transient")
    assert run_tick(now=AFTER_BACKOFF).counts()["succeeded"] == 1


@pytest.mark.parametrize(
    ("status", "klass"), [(400, "permanent"), (401, "permanent"), (408, "transient"), (429, "transient")]
)
def test_4xx_are_permanent_except_408_and_429(resend, status, klass):
    resend.default = APIReply(status, {"message": f"status {status}"})
    row = email()

    run_tick(now=NOW)

    (attempt,) = attempts(row)
    assert (attempt.http_status, attempt.error_class, attempt.error) == (
        status,
        klass,
        f"email: HTTP {status} status {status}",
    )


def test_the_api_key_never_reaches_last_error(resend):
    resend.default = APIReply(401, {"message": f"API key {API_KEY} is invalid"})
    row = email()

    run_tick(now=NOW)

    row.refresh_from_db()
    assert API_KEY not in row.last_error
    assert row.last_error == "email: HTTP 401 API key [redacted] is invalid"


@pytest.mark.slow
def test_a_stall_past_the_timeout_is_retried_and_the_provider_sends_once(resend):
    # Resend accepts the message but answers after the client gave up (REQUESTS_TIMEOUT 1 s).
    resend.replies.append(APIReply(200, {"id": "first"}, stall=2.0))
    row = email()

    run_tick(now=NOW)

    row.refresh_from_db()
    assert (row.error_count, row.last_error) == (1, "email: timed out after 1s")
    assert attempts(row)[0].error_class == "transient"

    report = run_tick(now=AFTER_BACKOFF)

    assert report.counts()["succeeded"] == 1
    assert [r.headers["idempotency-key"] for r in resend.requests] == [str(row.firing_id)] * 2
    assert len(resend.sent) == 1  # the retry was recognised: one email went out


def test_brevo_gets_the_key_among_the_message_headers(api):
    anymail = {"BREVO_API_KEY": "xkeysib-test", "BREVO_API_URL": api.url, "REQUESTS_TIMEOUT": 1}
    api.default = APIReply(201, {"messageId": "<x@smtp-relay.example>"})
    with mail_settings(BREVO), override_settings(ANYMAIL=anymail):
        row = email()
        report = run_tick(now=NOW)

    assert report.counts()["succeeded"] == 1
    (request,) = api.requests
    assert request.path == "/smtp/email"
    assert request.json["headers"]["idempotencyKey"] == str(row.firing_id)


# --- rejections by the provider --------------------------------------------------------------


@pytest.fixture
def postmark(api):
    anymail = {"POSTMARK_SERVER_TOKEN": "pm-test", "POSTMARK_API_URL": api.url, "REQUESTS_TIMEOUT": 1}
    with mail_settings(POSTMARK), override_settings(ANYMAIL=anymail):
        yield api


def inactive(*addresses: str) -> dict:
    """Postmark's answer when it will not deliver to addresses that bounced or complained before."""
    return {
        "ErrorCode": 0,
        "Message": f"Message OK, but will not deliver to these inactive addresses: {', '.join(addresses)}. "
        "Inactive recipients are ones that have generated a hard bounce or a spam complaint.",
        "MessageID": "b7bc2f4a-e38e-4336-af7d-e6c392c2f817",
        "SubmittedAt": "2026-01-01T00:00:00Z",
        "To": "ada@example.com, gone@example.com",
    }


def test_a_recipient_the_provider_rejects_is_suppressed(postmark):
    postmark.default = APIReply(200, inactive("gone@example.com"))
    email(email_to=["ada@example.com", "gone@example.com"])

    report = run_tick(now=NOW)

    assert report.counts()["succeeded"] == 1
    (suppressed,) = Suppression.objects.all()
    assert (suppressed.address, suppressed.reason) == ("gone@example.com", "Postmark: rejected")


def test_every_recipient_rejected_is_a_permanent_failure(postmark):
    postmark.default = APIReply(200, {**inactive("gone@example.com"), "To": "gone@example.com"})
    row = email(email_to="gone@example.com")

    run_tick(now=NOW)

    row.refresh_from_db()
    assert row.last_error.startswith(
        "email: all recipients rejected by the provider: gone@example.com (rejected): Message OK, but will not"
    )
    assert row.dead_lettered_at is not None
    assert list(Suppression.objects.values_list("address", flat=True)) == ["gone@example.com"]


# --- anymail's tracking signal ----------------------------------------------------------------


@pytest.mark.parametrize("event_type", ["bounced", "complained", "rejected", "unsubscribed"])
def test_tracking_events_that_suppress(event_type):
    event = AnymailTrackingEvent(event_type=event_type, recipient="Ada@Example.com", reject_reason="bounced")

    tracking.send(sender=object, event=event, esp_name="Resend")

    (suppressed,) = Suppression.objects.all()
    assert suppressed.address == "ada@example.com"
    assert suppressed.reason == f"Resend: {event_type} (bounced)"


@pytest.mark.parametrize("event_type", ["delivered", "opened", "clicked", "deferred", "queued"])
def test_other_tracking_events_change_nothing(event_type):
    tracking.send(
        sender=object, event=AnymailTrackingEvent(event_type=event_type, recipient="ada@example.com"), esp_name="Resend"
    )

    assert not Suppression.objects.exists()


def test_a_tracked_address_too_long_to_store_is_left_out():
    # Not an error: a 500 would have the provider retry the event again and again.
    event = AnymailTrackingEvent(event_type="bounced", recipient="a" * 290 + "@example.com")

    tracking.send(sender=object, event=event, esp_name="Resend")

    assert not Suppression.objects.exists()


urlpatterns = [path("anymail/", include("anymail.urls"))]


@override_settings(ROOT_URLCONF=__name__, ANYMAIL={"WEBHOOK_SECRET": "hook:secret"})
def test_the_receiver_url_from_the_readme_suppresses_a_bounce(client):
    """Resend posts its webhook to /anymail/resend/tracking/ (basic auth: ANYMAIL's WEBHOOK_SECRET)."""
    bounce = {
        "type": "email.bounced",
        "created_at": "2026-01-01T00:00:00.000Z",
        "data": {
            "email_id": "56761188-7520-42d8-8898-ff6fc54ce618",
            "from": "queue@example.com",
            "to": ["gone@example.com"],
            "subject": "Reminder",
            "created_at": "2026-01-01T00:00:00.000Z",
            "bounce": {"message": "The recipient's mailbox does not exist.", "type": "Permanent"},
        },
    }

    response = client.post(
        "/anymail/resend/tracking/",
        bounce,
        content_type="application/json",
        HTTP_AUTHORIZATION="Basic aG9vazpzZWNyZXQ=",  # hook:secret
    )

    assert response.status_code == 200
    (suppressed,) = Suppression.objects.all()
    assert suppressed.address == "gone@example.com"
    assert suppressed.reason.startswith("Resend: bounced")


# --- checks W002/W006 know anymail's REQUESTS_TIMEOUT ---------------------------------------


def email_checks() -> list[tuple[str, str]]:
    from notifications.channels.email.checks import check_email

    return [(m.id, m.msg) for m in check_email()]


@override_settings(NOTIFICATIONS_CHANNEL_TIMEOUT=10, ANYMAIL={"RESEND_API_KEY": API_KEY})
def test_anymails_default_timeout_is_longer_than_the_channels():
    with mail_settings(RESEND):
        assert email_checks() == [
            (
                "notifications.W006",
                'ANYMAIL["REQUESTS_TIMEOUT"] (30s, anymail\'s default) is longer than NOTIFICATIONS_CHANNEL_TIMEOUT '
                "(10s): a slow email provider may still accept a message after the tick recorded a timeout, and the "
                "retry sends it twice.",
            )
        ]


@pytest.mark.parametrize(("timeout", "warned"), [(10, False), (5, False), (12, True)])
def test_a_requests_timeout_of_the_sites_own(timeout, warned):
    anymail = {"RESEND_API_KEY": API_KEY, "REQUESTS_TIMEOUT": timeout}
    with mail_settings(RESEND), override_settings(ANYMAIL=anymail, NOTIFICATIONS_CHANNEL_TIMEOUT=10):
        assert [i for i, _ in email_checks()] == (["notifications.W006"] if warned else [])


def test_providers_not_on_requests_need_no_timeout():
    with mail_settings("anymail.backends.test.EmailBackend"):
        assert email_checks() == []
