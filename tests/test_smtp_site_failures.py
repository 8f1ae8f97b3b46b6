"""SMTP failures of the site's own connection, login or sender are transient; only an answer
about the recipients or the message itself is permanent.

A mail server that refuses the site's login (535), its sender (MAIL FROM) or its greeting
says nothing about the row: the row is retried with backoff, a recurring row keeps its
schedule, and the `email` target's circuit breaker counts the failure. A refused recipient
(suppressed) and a message the server refuses for its size or content (the same message
fails the same way again) are permanent. aiosmtpd is the real server.
"""

from __future__ import annotations

import smtplib
from datetime import timedelta

import pytest
from aiosmtpd.smtp import AuthResult
from django.core import mail
from django.test.utils import override_settings
from django.utils import timezone

from notifications.api import run_tick
from notifications.channels.base import ErrorClass
from notifications.channels.email import providers
from notifications.models import DeliveryAttempt, Notification, Suppression, Target
from tests.support.mail_doubles import schedule_email
from tests.support.mail_servers import SMTP_BACKEND, SMTPServer, mail_settings

pytestmark = pytest.mark.django_db

NOW = timezone.now().replace(microsecond=0)
AFTER_BACKOFF = NOW + timedelta(seconds=60)


def refuse_every_login(server, session, envelope, mechanism, auth_data) -> AuthResult:
    return AuthResult(success=False, handled=False)


def login_settings(server: SMTPServer) -> override_settings:
    """The site's SMTP mailer pointed at `server`, logging in as `site`."""
    if hasattr(mail, "mailers"):
        options = {"host": "127.0.0.1", "port": server.port, "timeout": 5, "username": "site", "password": "wrong"}
        return mail_settings(SMTP_BACKEND, **options)
    return override_settings(
        EMAIL_BACKEND=SMTP_BACKEND,
        EMAIL_HOST="127.0.0.1",
        EMAIL_PORT=server.port,
        EMAIL_TIMEOUT=5,
        EMAIL_HOST_USER="site",
        EMAIL_HOST_PASSWORD="wrong",
    )


@pytest.fixture
def locked_smtp():
    """A real SMTP server that refuses every login (535 5.7.8), the site's mail sent to it."""
    server = SMTPServer(authenticator=refuse_every_login, auth_require_tls=False)
    with login_settings(server):
        yield server
    server.close()


@pytest.fixture
def small_smtp():
    """A real SMTP server that takes messages of at most 1,000 bytes (552 to MAIL FROM SIZE=)."""
    server = SMTPServer(data_size_limit=1000)
    with server.settings(timeout=5):
        yield server
    server.close()


def error_class(row: Notification) -> str:
    return str(DeliveryAttempt.objects.get(notification_id=row.pk).error_class)


def test_a_refused_login_is_retried_and_a_recurring_row_keeps_its_schedule(locked_smtp):
    once = schedule_email(NOW)
    daily = schedule_email(NOW, recurrence_rule="0 9 * * *")

    counts = run_tick(now=NOW).counts()

    assert (counts["retried"], counts["dead_lettered"]) == (2, 0)
    for row in (once, daily):
        row.refresh_from_db()
        assert row.dead_lettered_at is None
        assert row.next_fire_at == AFTER_BACKOFF  # the backoff's first step, not the end of the road
        assert row.last_error == "email: 535 5.7.8 Authentication credentials invalid"
        assert error_class(row) == "transient"
    assert not locked_smtp.delivered and not Suppression.objects.exists()


@override_settings(
    NOTIFICATIONS_CIRCUIT_BREAKER={"failures": 2, "cooldown": 60, "max_cooldown": 3600}, NOTIFICATIONS_CONCURRENCY=1
)
def test_refused_logins_open_the_email_circuit_and_hold_the_rest(locked_smtp):
    rows = [schedule_email(NOW - timedelta(minutes=n), email_to=f"user{n}@example.com") for n in range(4)]

    counts = run_tick(now=NOW).counts()

    assert (counts["retried"], counts["deferred"], counts["dead_lettered"]) == (2, 2, 0)
    target = Target.objects.get(key="email")
    assert (target.state, target.failures) == (Target.State.OPEN, 2)
    assert target.last_error == "email: 535 5.7.8 Authentication credentials invalid"
    assert Notification.objects.filter(pk__in=[r.pk for r in rows], dead_lettered_at__isnull=True).count() == 4


def test_a_refused_sender_is_retried_and_suppresses_nobody(smtp):
    smtp.mail_reply = "553 5.7.1 <queue@example.com>: Sender address rejected: not owned by user"
    row = schedule_email(NOW, recurrence_rule="0 9 * * *")

    run_tick(now=NOW)

    row.refresh_from_db()
    assert (row.error_count, row.next_fire_at, row.dead_lettered_at) == (1, AFTER_BACKOFF, None)
    assert row.last_error == "email: 553 5.7.1 <queue@example.com>: Sender address rejected: not owned by user"
    assert error_class(row) == "transient"
    assert not Suppression.objects.exists()

    smtp.mail_reply = None  # the site's sender fixed: the retry goes out
    assert run_tick(now=AFTER_BACKOFF).counts()["succeeded"] == 1
    assert [d.rcpt_tos for d in smtp.delivered] == [["ada@example.com"]]


def test_a_message_too_big_for_the_server_is_a_permanent_failure(small_smtp):
    row = schedule_email(NOW, body="x" * 5000)

    counts = run_tick(now=NOW).counts()

    row.refresh_from_db()
    assert counts["dead_lettered"] == 1
    assert row.last_error == "email: 552 Error: message size exceeds fixed maximum message size"
    assert error_class(row) == "permanent"
    assert not Suppression.objects.exists()  # the message, not the recipient


@pytest.mark.parametrize(
    ("reply", "klass"),
    [
        ("554 5.6.0 Message content rejected", "permanent"),  # the content: the same again
        ("552 5.3.4 Message too big for system", "permanent"),
        ("554 5.7.1 Client host rejected: listed at a blocklist", "transient"),  # the site's reputation
        ("554 Transaction failed", "transient"),  # says nothing of the message
    ],
)
def test_a_5xx_to_data_is_permanent_only_when_it_refuses_the_message(smtp, reply, klass):
    smtp.data_replies.append(reply)
    row = schedule_email(NOW)

    run_tick(now=NOW)

    assert error_class(row) == klass
    assert Notification.objects.filter(pk=row.pk, dead_lettered_at__isnull=False).exists() == (klass == "permanent")


@pytest.mark.parametrize(
    ("exc", "klass"),
    [
        (smtplib.SMTPAuthenticationError(535, b"5.7.8 Username and Password not accepted"), ErrorClass.TRANSIENT),
        (smtplib.SMTPConnectError(554, b"5.7.1 No service for you"), ErrorClass.TRANSIENT),
        (smtplib.SMTPHeloError(501, b"5.5.4 Invalid domain name"), ErrorClass.TRANSIENT),
        (smtplib.SMTPSenderRefused(550, b"5.7.1 Sender not authorised", "queue@example.com"), ErrorClass.TRANSIENT),
        (smtplib.SMTPSenderRefused(552, b"5.3.4 Message too big", "queue@example.com"), ErrorClass.PERMANENT),
        (smtplib.SMTPDataError(554, b"5.6.1 Media not supported"), ErrorClass.PERMANENT),
        (smtplib.SMTPDataError(552, b"5.2.2 Mailbox full"), ErrorClass.TRANSIENT),
        (smtplib.SMTPDataError(552, b"Message size exceeds fixed limit"), ErrorClass.PERMANENT),
        (smtplib.SMTPDataError(451, b"4.3.0 Try again later"), ErrorClass.TRANSIENT),
        (smtplib.SMTPRecipientsRefused({"ada@example.com": (550, b"5.1.1 No such user")}), ErrorClass.PERMANENT),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else str(value),
)
def test_smtp_errors_are_classed_by_what_they_are_about(exc, klass):
    assert providers.failure(exc, conn=None).error_class == klass
