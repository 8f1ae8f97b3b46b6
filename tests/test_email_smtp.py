"""The email channel against a real SMTP server (aiosmtpd) on loopback.

What the wire carries (multipart text and HTML, headers, RFC 2047 subjects, Cc and Bcc
in the envelope only), refusals per recipient (a 550 on one RCPT suppresses that address
and the others still get the message), a 451 retried with the same Message-ID, and
timeouts that say so whichever timer fires first.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.test.utils import override_settings
from django.utils import timezone

from notifications.api import run_tick
from notifications.models import DeliveryAttempt, Notification, Suppression
from tests.support.mail_doubles import schedule_email
from tests.support.mail_servers import SMTP_BACKEND, StallingServer, mail_settings

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)
AFTER_BACKOFF = NOW + timedelta(seconds=61)


def email(**fields):
    return schedule_email(NOW, **fields)


def test_multipart_message_with_headers_and_envelope(smtp):
    row = email(
        email_to=["ada@example.com", "grace@example.com"],
        email_cc=["linus@example.com"],
        email_bcc=["audit@example.com"],
        reply_to=["desk@example.com"],
        subject="Rechnung fällig: {{ n }} € — bitte zahlen",
        body="Hello {{ name }}, Fish & Chips",
        html_body="<p>Hello <b>{{ name }}</b></p>",
        payload={"name": "<Ada>", "n": 7},
    )

    report = run_tick(now=NOW)

    assert report.counts()["succeeded"] == 1
    (delivered,) = smtp.delivered
    assert sorted(delivered.rcpt_tos) == [
        "ada@example.com",
        "audit@example.com",
        "grace@example.com",
        "linus@example.com",
    ]
    assert delivered.mail_from == "queue@example.com"
    raw_headers = delivered.data.split(b"\r\n\r\n", 1)[0].decode("ascii")  # 7-bit on the wire
    (subject_line,) = [line for line in raw_headers.splitlines() if line.startswith("Subject:")]
    assert "=?utf-8?" in subject_line  # RFC 2047 encoded words (all of it on 5.2, only where needed on 6.1)
    message = delivered.message
    assert message["Subject"] == "Rechnung fällig: 7 € — bitte zahlen"
    assert message["To"] == "ada@example.com, grace@example.com"
    assert message["Cc"] == "linus@example.com"
    assert message["Bcc"] is None  # envelope only
    assert message["Reply-To"] == "desk@example.com"
    # A long Message-ID may be folded onto its own line (RFC 5322), read back with a leading space.
    message_id = message["Message-ID"].strip()
    assert message_id == f"<notification-{row.pk}.{row.firing_id}@{message_id.split('@')[1]}"
    assert message.get_content_type() == "multipart/alternative"
    text, html = message.iter_parts()
    assert (text.get_content_type(), html.get_content_type()) == ("text/plain", "text/html")
    assert text.get_content().strip() == "Hello <Ada>, Fish & Chips"  # plain text: nothing escaped
    assert html.get_content().strip() == "<p>Hello <b>&lt;Ada&gt;</b></p>"  # HTML: the payload escaped


def test_plain_text_only_without_html_body(smtp):
    email(body="Just text")

    run_tick(now=NOW)

    message = smtp.delivered[0].message
    assert message.get_content_type() == "text/plain"
    assert message.get_content().strip() == "Just text"


def test_a_550_on_one_rcpt_suppresses_that_address_and_delivers_to_the_rest(smtp):
    smtp.refuse("gone@example.com")
    row = email(email_to=["ada@example.com", "gone@example.com"], recurrence_rule="*/5 * * * *")

    report = run_tick(now=NOW)

    assert report.counts()["succeeded"] == 1
    assert smtp.delivered[0].rcpt_tos == ["ada@example.com"]
    (suppressed,) = Suppression.objects.all()
    assert suppressed.address == "gone@example.com"
    assert suppressed.reason.startswith("SMTP 550 5.1.1")

    # The next firing leaves the suppressed address out: it never reaches the server again.
    smtp.rcpt_replies.clear()
    run_tick(now=Notification.objects.get(pk=row.pk).next_fire_at)
    assert smtp.delivered[1].rcpt_tos == ["ada@example.com"]
    assert "gone@example.com" not in smtp.delivered[1].message["To"]


def test_a_550_for_the_only_recipient_is_a_permanent_failure_and_suppresses_it(smtp):
    smtp.refuse("Gone@Example.com")
    row = email(email_to="Gone@Example.com")

    report = run_tick(now=NOW)

    row.refresh_from_db()
    assert report.counts()["dead_lettered"] == 1
    assert row.last_error == "email: 550 5.1.1 <Gone@Example.com>: No such user here"
    assert DeliveryAttempt.objects.get(notification_id=row.pk).error_class == "permanent"
    assert list(Suppression.objects.values_list("address", flat=True)) == ["gone@example.com"]  # lowercased


def test_a_450_on_rcpt_is_transient_and_suppresses_nothing(smtp):
    smtp.refuse("busy@example.com", "450 4.2.1 Mailbox busy")
    row = email(email_to="busy@example.com")

    run_tick(now=NOW)

    row.refresh_from_db()
    assert (row.error_count, row.last_error) == (1, "email: 450 4.2.1 <busy@example.com>: Mailbox busy")
    assert not Suppression.objects.exists()


def test_every_recipient_suppressed_fails_permanently_without_a_connection(smtp):
    Suppression.objects.create(address="ada@example.com", reason="test")
    Suppression.objects.create(address="grace@example.com", reason="test")
    row = email(email_to=["ADA@example.com"], email_cc=["grace@example.com"])

    report = run_tick(now=NOW)

    row.refresh_from_db()
    assert report.counts()["dead_lettered"] == 1
    assert row.last_error == "email: all recipients suppressed"
    assert row.next_fire_at is None
    assert smtp.data_attempts == 0 and smtp.delivered == []


def test_deleting_a_suppression_lifts_it(smtp):
    suppression = Suppression.objects.create(address="ada@example.com", reason="test")
    email(email_to=["ada@example.com", "grace@example.com"])
    run_tick(now=NOW)
    assert smtp.delivered[0].rcpt_tos == ["grace@example.com"]

    suppression.delete()
    email(email_to=["ada@example.com", "grace@example.com"])
    run_tick(now=NOW)
    assert smtp.delivered[1].rcpt_tos == ["ada@example.com", "grace@example.com"]


def test_a_451_on_data_is_retried_with_the_same_message_id(smtp):
    smtp.data_replies.append("451 4.3.0 Try again later")
    row = email()

    run_tick(now=NOW)

    row.refresh_from_db()
    assert (row.error_count, row.last_error) == (1, "email: 451 4.3.0 Try again later")
    assert DeliveryAttempt.objects.get(notification_id=row.pk).error_class == "transient"

    report = run_tick(now=AFTER_BACKOFF)

    assert report.counts()["succeeded"] == 1
    (refused,), (delivered,) = smtp.refused_data, smtp.delivered
    assert refused.message["Message-ID"] == delivered.message["Message-ID"]
    assert not Suppression.objects.exists()


def test_one_session_carries_the_ticks_messages(smtp):
    for n in range(3):
        email(email_to=f"user{n}@example.com")

    with override_settings(NOTIFICATIONS_CONCURRENCY=1):
        report = run_tick(now=NOW)

    assert report.counts()["succeeded"] == 3
    assert len(smtp.delivered) == 3


@pytest.mark.slow
def test_smtps_own_timeout_reads_as_a_timeout():
    """smtplib's socket timeout fires first and surfaces as SMTPServerDisconnected: named a timeout."""
    stalling = StallingServer()
    try:
        with mail_settings(SMTP_BACKEND, host="127.0.0.1", port=stalling.port, timeout=0.5):
            row = email()
            run_tick(now=NOW)
    finally:
        stalling.close()

    row.refresh_from_db()
    assert row.last_error == "email: timed out after 0.5s"
    assert row.error_count == 1


@pytest.mark.slow
def test_the_ticks_deadline_reads_as_a_timeout_when_smtp_has_none():
    stalling = StallingServer()
    try:
        with (
            mail_settings(SMTP_BACKEND, host="127.0.0.1", port=stalling.port, timeout=None),
            override_settings(NOTIFICATIONS_CHANNEL_TIMEOUT=0.5),
        ):
            row = email()
            run_tick(now=NOW)
    finally:
        stalling.close()  # the worker left behind gets EOF and ends

    row.refresh_from_db()
    assert row.last_error == "email: timed out after 0.5s"
    assert mail.outbox == []
