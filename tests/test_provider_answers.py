"""What a mail server or provider said is kept: in `last_error` and in the delivery record.

Real components on loopback: aiosmtpd refusing recipients (550, 451), a port nothing
listens on, and imitations of three providers' HTTP APIs (Postmark, Mailgun, Resend)
driven through django-anymail's own backends, answering 200, 4xx, 5xx and stalling.
A recipient whose outcome is unknown after an error answer is never counted as sent nor
suppressed, and only valid addresses among the message's recipients reach `Suppression`.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test.utils import override_settings
from django.utils import timezone

from notifications.api import run_tick
from notifications.models import DeliveryAttempt, Notification, Suppression
from notifications.store import suppress
from tests.support.mail_doubles import schedule_email
from tests.support.mail_servers import APIReply, ProviderAPI, free_port, mail_settings

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)
AFTER_BACKOFF = NOW + timedelta(seconds=61)


def email(**fields):
    return schedule_email(NOW, **fields)


def attempt(row) -> DeliveryAttempt:
    return DeliveryAttempt.objects.filter(notification_id=row.pk).latest("attempted_at", "id")


def suppressed() -> list[str]:
    return sorted(Suppression.objects.values_list("address", flat=True))


# --- SMTP ------------------------------------------------------------------------------------


def test_a_550_and_a_451_keep_each_answer_and_only_the_550_is_suppressed(smtp):
    smtp.refuse("gone@example.com", "550 5.1.1 No such user here")
    smtp.refuse("full@example.com", "451 4.2.2 Mailbox full, try later")
    row = email(email_to=["gone@example.com", "full@example.com"])

    run_tick(now=NOW)

    row.refresh_from_db()
    expected = (
        "email: 550 5.1.1 <gone@example.com>: No such user here; 451 4.2.2 <full@example.com>: Mailbox full, try later"
    )
    assert (row.error_count, row.last_error) == (1, expected)
    assert (attempt(row).error, attempt(row).error_class) == (expected, "transient")  # a 451 may pass
    assert suppressed() == ["gone@example.com"]

    # The retry leaves the suppressed address out and reaches the other once it accepts.
    smtp.rcpt_replies.clear()
    report = run_tick(now=AFTER_BACKOFF)

    assert report.counts()["succeeded"] == 1
    assert smtp.delivered[0].rcpt_tos == ["full@example.com"]


def test_a_451_for_one_recipient_while_another_accepts_is_not_counted_as_sent_to_it(smtp):
    smtp.refuse("full@example.com", "451 4.2.2 Mailbox full")
    row = email(email_to=["ada@example.com", "full@example.com"])

    report = run_tick(now=NOW)

    assert report.counts()["succeeded"] == 0  # the firing still owes full@example.com
    assert smtp.delivered[0].rcpt_tos == ["ada@example.com"]
    record = attempt(row)
    assert (record.outcome, record.error_class) == ("failed", "transient")
    assert record.error.startswith("email: SMTP 451 for 1 of 2 recipients")
    assert suppressed() == []

    smtp.rcpt_replies.clear()
    assert run_tick(now=AFTER_BACKOFF).counts()["succeeded"] == 1
    assert smtp.delivered[1].rcpt_tos == ["full@example.com"]  # only the one still owed


def test_a_refused_connection_names_the_host_and_port():
    port = free_port()  # nothing listens there
    with mail_settings("django.core.mail.backends.smtp.EmailBackend", host="127.0.0.1", port=port, timeout=2):
        row = email()
        run_tick(now=NOW)

    row.refresh_from_db()
    assert row.last_error == f"email: connection refused by 127.0.0.1:{port}"
    assert attempt(row).error_class == "transient"


# --- providers' HTTP APIs --------------------------------------------------------------------


@pytest.fixture
def api():
    server = ProviderAPI()
    yield server
    server.close()


PROVIDERS = {
    "postmark": (
        "anymail.backends.postmark.EmailBackend",
        {"POSTMARK_SERVER_TOKEN": "pm-test-token", "POSTMARK_API_URL": "{url}"},
        # What each answers to an accepted message.
        lambda to: {
            "ErrorCode": 0,
            "Message": "OK",
            "MessageID": "b7bc2f4a-e38e-4336-af7d-e6c392c2f817",
            "SubmittedAt": "2026-01-01T00:00:00Z",
            "To": to,
        },
        200,
    ),
    "resend": (
        "anymail.backends.resend.EmailBackend",
        {"RESEND_API_KEY": "re_test_0123456789abcdef", "RESEND_API_URL": "{url}"},
        lambda to: {"id": "49a3999c-0ce1-4ea6-ab68-afcd6dc2e794"},
        200,
    ),
    "mailgun": (
        "anymail.backends.mailgun.EmailBackend",
        {"MAILGUN_API_KEY": "key-test-0123456789", "MAILGUN_API_URL": "{url}v3"},
        lambda to: {"id": "<20260101.1@example.com>", "message": "Queued. Thank you."},
        200,
    ),
}

# Each provider's shape of an error answer, with the words it says.
ERROR_BODIES = {
    "postmark": lambda words: {"ErrorCode": 10, "Message": words},
    "resend": lambda words: {"statusCode": 400, "message": words, "name": "validation_error"},
    "mailgun": lambda words: {"message": words},
}


@pytest.fixture(params=sorted(PROVIDERS))
def provider(request, api):
    backend, anymail, accepted, status = PROVIDERS[request.param]
    options = {name: value.format(url=api.url) for name, value in anymail.items()}
    with mail_settings(backend), override_settings(ANYMAIL={**options, "REQUESTS_TIMEOUT": 1}):
        api.default = APIReply(status, accepted("ada@example.com"))
        yield request.param, api


def test_an_accepted_message_is_delivered(provider):
    _name, api = provider
    row = email()

    report = run_tick(now=NOW)

    assert report.counts()["succeeded"] == 1
    assert len(api.sent) == 1
    assert not Notification.objects.filter(pk=row.pk).exists()
    assert attempt(row).outcome == "ok"


@pytest.mark.parametrize(("status", "klass"), [(400, "permanent"), (401, "permanent"), (429, "transient")])
def test_a_4xx_keeps_its_status_and_the_providers_words(provider, status, klass):
    name, api = provider
    api.default = APIReply(status, ERROR_BODIES[name]("The request was refused: bad field"))
    row = email()

    run_tick(now=NOW)

    row.refresh_from_db()
    assert row.last_error == f"email: HTTP {status} The request was refused: bad field"
    record = attempt(row)
    assert (record.outcome, record.http_status, record.error_class) == ("failed", status, klass)
    assert suppressed() == []


def test_a_5xx_is_transient_and_retried(provider):
    name, api = provider
    api.replies.append(APIReply(503, ERROR_BODIES[name]("Service unavailable, try later")))
    row = email()

    run_tick(now=NOW)

    row.refresh_from_db()
    assert (row.error_count, row.last_error) == (1, "email: HTTP 503 Service unavailable, try later")
    assert attempt(row).error_class == "transient"

    assert run_tick(now=AFTER_BACKOFF).counts()["succeeded"] == 1


def test_a_stall_reads_as_a_timeout(provider):
    name, api = provider
    api.replies.append(APIReply(500, ERROR_BODIES[name]("late"), stall=2.0))  # past REQUESTS_TIMEOUT 1
    row = email()

    run_tick(now=NOW)

    row.refresh_from_db()
    assert row.error_count == 1
    assert row.last_error.startswith("email: timed out")
    assert attempt(row).error_class == "transient"


def test_a_provider_that_refuses_connections_is_named_by_host_and_port():
    port = free_port()
    anymail = {"MAILGUN_API_KEY": "key-test", "MAILGUN_API_URL": f"http://user:pw@127.0.0.1:{port}/v3?token=secret"}
    with mail_settings("anymail.backends.mailgun.EmailBackend"), override_settings(ANYMAIL=anymail):
        row = email()
        run_tick(now=NOW)

    row.refresh_from_db()
    assert row.last_error == f"email: connection refused by 127.0.0.1:{port}"  # no path, no query


# --- Postmark: error answers anymail reads as recipient statuses -----------------------------


@pytest.fixture
def postmark(api):
    anymail = {"POSTMARK_SERVER_TOKEN": "pm-test-token", "POSTMARK_API_URL": api.url, "REQUESTS_TIMEOUT": 1}
    with mail_settings("anymail.backends.postmark.EmailBackend"), override_settings(ANYMAIL=anymail):
        yield api


ILLEGAL_TO = "Error parsing 'To': Illegal email address 'r422@example.com'. It must contain the '@' symbol."


def test_a_postmark_422_about_the_to_field_is_a_failure_not_a_delivery(postmark):
    # The answer anymail's code documents for ErrorCode 300; anymail reads the address out
    # of the prose (greedily: "r422@example.com'. it must contain the '@") and returns.
    postmark.default = APIReply(422, {"ErrorCode": 300, "Message": ILLEGAL_TO})
    row = email(email_to="r422@example.com")

    report = run_tick(now=NOW)

    assert report.counts()["succeeded"] == 0
    row.refresh_from_db()  # not deleted as delivered
    assert row.last_error == f"email: HTTP 422 {ILLEGAL_TO}"
    record = attempt(row)
    assert (record.outcome, record.http_status, record.error_class) == ("failed", 422, "permanent")
    assert row.dead_lettered_at is not None  # a 4xx: the same message fails the same way
    assert suppressed() == []  # neither the non-address nor the recipient whose fate is unknown


def test_a_postmark_406_names_the_address_and_the_providers_words(postmark):
    words = (
        "You tried to send to a recipient that has been marked as inactive.\n"
        "Found inactive addresses: gone@example.com.\n"
        "Inactive recipients are ones that have generated a hard bounce or a spam complaint. "
    )
    postmark.default = APIReply(422, {"ErrorCode": 406, "Message": words})
    row = email(email_to="gone@example.com")

    run_tick(now=NOW)

    row.refresh_from_db()
    assert row.last_error.startswith(
        "email: HTTP 422 all recipients rejected by the provider: gone@example.com (rejected): "
        "You tried to send to a recipient that has been marked as inactive."
    )
    assert attempt(row).http_status == 422
    assert suppressed() == ["gone@example.com"]


def test_only_valid_addresses_reach_the_suppression_list():
    suppress([("r422@example.com'. it must contain the '@", "Postmark: invalid"), ("Ok@Example.com", "test")])

    assert suppressed() == ["ok@example.com"]
