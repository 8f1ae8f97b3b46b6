"""An email backend setting that names no email backend class is a check warning (notifications.W027,
once the error E027: only email needs it), and the tick holds the email it concerns (W022's hold:
nothing sent, no retry spent) instead of
recording `email: ModuleNotFoundError` until every row is dead-lettered. A NOTIFICATIONS_MAILERS
alias that cannot be sent through is reported too, although no setting chooses it: schedule()
refuses rows that name it."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test.utils import override_settings
from django.utils import timezone

from notifications.api import run_tick, schedule
from notifications.channels.email.checks import check_mailer
from notifications.models import DeliveryAttempt, Notification
from tests.support.mail_servers import QUEUE_BACKEND

LOCMEM = "django.core.mail.backends.locmem.EmailBackend"
NOW = timezone.now().replace(microsecond=0)
before_mailers = pytest.mark.skipif(hasattr(mail, "mailers"), reason="NOTIFICATIONS_MAILERS is for sites before 6.1")


def errors() -> list[tuple[str, str]]:
    return [(m.id, m.msg) for m in check_mailer()]


def email_row(**fields):
    fields = {"channels": ["email"], "email_to": "ada@example.com", "subject": "Hi", "body": "B", **fields}
    return schedule(fire_at=NOW, **fields)


def test_a_typo_in_the_email_backend_is_a_warning_of_manage_py_check():
    said = StringIO()
    with override_settings(NOTIFICATIONS_EMAIL_BACKEND="nonexistent.Backend"):
        call_command("check", stdout=StringIO(), stderr=said)  # passes: only email needs it
        with pytest.raises(SystemCheckError, match=r"notifications\.W027"):
            call_command("check", "--fail-level", "WARNING", stdout=StringIO(), stderr=StringIO())

    assert (
        "(notifications.W027) The tick cannot send email as configured: NOTIFICATIONS_EMAIL_BACKEND "
        "('nonexistent.Backend') cannot be imported (ModuleNotFoundError: No module named 'nonexistent'). "
        "Rows with email are held (nothing sent, no retry spent) until this is fixed."
    ) in said.getvalue()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (42, "NOTIFICATIONS_EMAIL_BACKEND must be a dotted path to an email backend class, not 42"),
        (
            "django.core.mail.backends.smtp.Nope",
            "NOTIFICATIONS_EMAIL_BACKEND ('django.core.mail.backends.smtp.Nope') cannot be imported (ImportError: "
            'Module "django.core.mail.backends.smtp" does not define a "Nope" attribute/class)',
        ),
        (
            "notifications.conf.Defaults",
            "NOTIFICATIONS_EMAIL_BACKEND ('notifications.conf.Defaults') is not an email backend (a subclass of "
            "django.core.mail.backends.base.BaseEmailBackend)",
        ),
    ],
)
def test_an_email_backend_that_is_no_backend_class_is_a_warning(value, problem):
    with override_settings(NOTIFICATIONS_EMAIL_BACKEND=value):
        assert errors() == [
            (
                "notifications.W027",
                f"The tick cannot send email as configured: {problem}. Rows with email are held "
                "(nothing sent, no retry spent) until this is fixed.",
            )
        ]


def test_a_real_backend_and_a_blank_setting_pass():
    for value in (LOCMEM, "", None):
        with override_settings(NOTIFICATIONS_EMAIL_BACKEND=value):
            assert errors() == []


@before_mailers
def test_a_mailers_alias_that_is_the_queue_is_reported_although_nothing_chooses_it():
    with override_settings(NOTIFICATIONS_MAILERS={"bulk": {"BACKEND": QUEUE_BACKEND}}):
        assert errors() == [
            (
                "notifications.W022",
                "Rows whose mailer is 'bulk' cannot be sent: NOTIFICATIONS_MAILERS 'bulk' is the queue itself. "
                "schedule() refuses them, and the tick holds those already queued (nothing sent, no retry spent) "
                "until this is fixed.",
            )
        ]


@before_mailers
def test_a_mailers_alias_with_a_backend_that_cannot_be_imported_is_reported():
    with override_settings(
        NOTIFICATIONS_MAILERS={"bulk": {"BACKEND": "nonexistent.Backend"}, "ok": {"BACKEND": LOCMEM}}
    ):
        ((message_id, message),) = errors()
    assert message_id == "notifications.W027"
    assert message.startswith(
        "Rows whose mailer is 'bulk' cannot be sent: NOTIFICATIONS_MAILERS['bulk']['BACKEND'] "
        "('nonexistent.Backend') cannot be imported"
    )


@before_mailers
@pytest.mark.django_db
def test_schedule_refuses_a_row_naming_an_alias_that_cannot_be_imported():
    with (
        override_settings(NOTIFICATIONS_MAILERS={"bulk": {"BACKEND": "nonexistent.Backend"}}),
        pytest.raises(ValidationError) as caught,
    ):
        email_row(mailer="bulk")
    (message,) = caught.value.message_dict["mailer"]
    assert message.startswith("NOTIFICATIONS_MAILERS['bulk']['BACKEND'] ('nonexistent.Backend') cannot be imported")


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["nonexistent.Backend", 42])
def test_the_tick_holds_email_while_the_backend_cannot_be_used(value):
    row = email_row()
    with override_settings(NOTIFICATIONS_EMAIL_BACKEND=value):
        report = run_tick(now=NOW)

    row.refresh_from_db()
    assert report.counts()["deferred"] == 1
    assert report.counts()["retried"] == 0
    assert (row.error_count, row.last_error) == (0, None)  # no retry spent
    assert row.next_fire_at > NOW
    assert not DeliveryAttempt.objects.exists()
    assert mail.outbox == []

    # Once it is fixed, the held row goes out on the first tick after its hold.
    with override_settings(NOTIFICATIONS_EMAIL_BACKEND=LOCMEM):
        run_tick(now=row.next_fire_at)
    assert [m.to for m in mail.outbox] == [["ada@example.com"]]
    assert not Notification.objects.filter(pk=row.pk).exists()
