"""Which mailer the tick sends through (notifications.channels.email.mailers), and the checks that guard it.

A row's own `mailer` alias, NOTIFICATIONS_MAILER, NOTIFICATIONS_EMAIL_BACKEND, the site's
default; never the queue itself: `manage.py check` says so (W022) and the tick holds the
rows meanwhile. Aliases are MAILERS' on Django 6.1+ sites that have them, else
NOTIFICATIONS_MAILERS'.
"""

from __future__ import annotations

import pytest
from django.core import checks, mail
from django.core.exceptions import ValidationError
from django.test.utils import override_settings
from django.utils import timezone

from notifications.api import run_tick, schedule
from notifications.channels.email.checks import check_mailer
from notifications.channels.email.mailers import choose
from notifications.models import Notification
from tests.support.mail_servers import QUEUE_BACKEND, SMTP_BACKEND

LOCMEM = "django.core.mail.backends.locmem.EmailBackend"
NOWHERE = {"BACKEND": SMTP_BACKEND, "OPTIONS": {"host": "127.0.0.1", "port": 9, "timeout": 1}}
on_mailers = hasattr(mail, "mailers")
NOW = timezone.now().replace(microsecond=0)


def aliases(**mailers) -> override_settings:
    """Mailer aliases the Django line's way: MAILERS on 6.1+, NOTIFICATIONS_MAILERS before."""
    if on_mailers:
        return override_settings(MAILERS=mailers)
    return override_settings(NOTIFICATIONS_MAILERS=mailers)


def errors() -> list[tuple[str, str, str]]:
    return [(m.id, m.msg, m.hint) for m in check_mailer()]


def email_row(**fields):
    fields = {"channels": ["email"], "email_to": "ada@example.com", "subject": "Hi", "body": "B", **fields}
    return schedule(fire_at=NOW, **fields)


@pytest.mark.skipif(on_mailers, reason="EMAIL_BACKEND is Django 5.2/6.0's way")
def test_email_backend_as_the_queue_sends_through_smtp_by_default():
    with override_settings(EMAIL_BACKEND=QUEUE_BACKEND):
        assert choose().backend == SMTP_BACKEND
        assert errors() == []
    with override_settings(EMAIL_BACKEND=QUEUE_BACKEND, NOTIFICATIONS_EMAIL_BACKEND=QUEUE_BACKEND):
        ((_, msg, hint),) = errors()
        assert msg.startswith("The tick cannot send email as configured: NOTIFICATIONS_EMAIL_BACKEND is the queue")
        assert 'NOTIFICATIONS_EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"' in hint


@pytest.mark.skipif(not on_mailers, reason="MAILERS arrived in Django 6.1")
def test_mailers_default_as_the_queue_needs_notifications_mailer():
    with override_settings(MAILERS={"default": {"BACKEND": QUEUE_BACKEND}}):
        ((_, msg, hint),) = errors()
        assert 'MAILERS["default"] is the queue itself and NOTIFICATIONS_MAILER names no other mailer' in msg
        assert hint.startswith('Name the real mailer: NOTIFICATIONS_MAILER = "smtp"')
    with override_settings(
        MAILERS={"default": {"BACKEND": QUEUE_BACKEND}, "smtp": NOWHERE}, NOTIFICATIONS_MAILER="smtp"
    ):
        assert errors() == []
        assert (choose().backend, choose().alias) == (SMTP_BACKEND, "smtp")


def test_notifications_mailer_naming_the_queue_or_nothing_is_an_error():
    with (
        aliases(default={"BACKEND": LOCMEM}, queue={"BACKEND": QUEUE_BACKEND}),
        override_settings(NOTIFICATIONS_MAILER="queue"),
    ):
        ((_, msg, _hint),) = errors()
        assert "NOTIFICATIONS_MAILER 'queue' is the queue itself" in msg
    with aliases(default={"BACKEND": LOCMEM}), override_settings(NOTIFICATIONS_MAILER="gone"):
        ((_, msg, _hint),) = errors()
        assert "NOTIFICATIONS_MAILER names 'gone', which is not in " in msg


@pytest.mark.django_db
def test_the_tick_holds_email_while_it_would_go_through_the_queue_itself():
    row = email_row()
    with (
        aliases(default={"BACKEND": LOCMEM}, queue={"BACKEND": QUEUE_BACKEND}),
        override_settings(NOTIFICATIONS_MAILER="queue"),
    ):
        report = run_tick(now=NOW)

    row.refresh_from_db()
    assert report.counts()["deferred"] == 1
    assert (row.error_count, row.last_error) == (0, None)  # no retry spent
    assert row.next_fire_at > NOW
    assert Notification.objects.count() == 1  # nothing queued by the send that did not happen
    assert mail.outbox == []


@pytest.mark.django_db
def test_a_rows_own_mailer_alias_is_what_it_goes_through():
    # The site's default is local memory (the test settings' EMAIL_BACKEND before 6.1).
    with aliases(default={"BACKEND": LOCMEM}, nowhere=NOWHERE):
        row = email_row(mailer="nowhere")
        ordinary = email_row(email_to="grace@example.com")
        report = run_tick(now=NOW)

    assert report.counts()["succeeded"] == 1  # the ordinary row
    assert [m.to for m in mail.outbox] == [["grace@example.com"]]
    assert not Notification.objects.filter(pk=ordinary.pk).exists()
    row.refresh_from_db()
    assert row.last_error.startswith("email: ")  # its own mailer points nowhere


@pytest.mark.django_db
def test_an_unknown_mailer_alias_is_refused_on_save():
    with aliases(default={"BACKEND": LOCMEM}), pytest.raises(ValidationError) as caught:
        email_row(mailer="nope")
    setting = "MAILERS" if on_mailers else "NOTIFICATIONS_MAILERS"
    assert caught.value.message_dict["mailer"] == [f"The row's mailer names 'nope', which is not in {setting}."]


@pytest.mark.parametrize(
    ("setting", "value", "id"),
    [
        ("NOTIFICATIONS_MAX_ATTACHMENT_BYTES", 0, "notifications.E023"),
        ("NOTIFICATIONS_MAX_ATTACHMENT_BYTES", "10MB", "notifications.E023"),
        ("NOTIFICATIONS_ATTACHMENT_STORAGE", "nope", "notifications.W024"),
        ("NOTIFICATIONS_LOW_PRIORITY_AGING", -1, "notifications.E025"),
    ],
)
def test_attachment_and_priority_settings_are_checked(setting, value, id):
    with override_settings(**{setting: value}):
        assert [m.id for m in checks.run_checks() if m.id == id] == [id]
