"""Attachments that never vanish: where they are stored, which names they take, and what a
failing storage does to a queued message (issue 30 item 1, issue 34 findings 3, 4, 6, 8).

Real files in real directories, a real `manage.py runtick` child started from another
working directory, and a real SMTP server (aiosmtpd) where the recipient's view matters.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from email.mime.message import MIMEMessage
from email.mime.text import MIMEText
from pathlib import Path

import pytest
from django.core import checks, mail
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage
from django.test.utils import override_settings
from django.utils import timezone

from notifications.api import cancel, run_tick, schedule
from notifications.models import DeliveryAttempt, Notification, attachments
from notifications.models.attachments import Attachment
from tests.support.mail_servers import SMTP_BACKEND, SMTPServer, queue_in_front_of
from tests.support.processes import REPO, child_env
from tests.support.storages import UnreadableStorage

pytestmark = pytest.mark.django_db(transaction=True)  # rows are queued on commit; a child tick reads them

NOW = timezone.now().replace(microsecond=0)
LOCMEM = "django.core.mail.backends.locmem.EmailBackend"
EMAIL = {"channels": ["email"], "email_to": "ada@example.com", "subject": "Invoice", "body": "Attached."}
ODD_NAMES = ["Q1..Q2 report.pdf", "..", "📎", "★★★"]


def storage_settings(backend: str, **options) -> override_settings:
    """Attachments kept in their own storage (`backend`) under this run's MEDIA_ROOT."""
    from django.conf import settings

    storages = {
        **settings.STORAGES,
        "attachments": {"BACKEND": backend, "OPTIONS": {"location": str(settings.MEDIA_ROOT), **options}},
    }
    return override_settings(STORAGES=storages, NOTIFICATIONS_ATTACHMENT_STORAGE="attachments")


def w028(**overrides) -> list[checks.CheckMessage]:
    with override_settings(**overrides):
        return [m for m in checks.run_checks() if m.id in ("notifications.W028", "notifications.E028")]


def recipients_view(message: EmailMessage):
    """The message as its recipient's mail client parses it."""
    from email import message_from_bytes, policy

    return message_from_bytes(message.message().as_bytes(), policy=policy.default)


# --- issue 30 item 1: attachments lost under cron --------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "setting", "where"),
    [
        ({"MEDIA_ROOT": ""}, "MEDIA_ROOT", "is unset"),
        ({"MEDIA_ROOT": "media"}, "MEDIA_ROOT", "is 'media', a relative path"),
        (
            {
                "STORAGES": {
                    "default": {
                        "BACKEND": "django.core.files.storage.FileSystemStorage",
                        "OPTIONS": {"location": "var/files"},
                    }
                }
            },
            "STORAGES['default']['OPTIONS']['location']",
            "is 'var/files', a relative path",
        ),
        (
            {"STORAGES": {"default": {"BACKEND": "tests.support.storages.UnreadableStorage"}}, "MEDIA_ROOT": ""},
            "MEDIA_ROOT",
            "is unset",
        ),
    ],
)
def test_a_file_storage_relative_to_the_working_directory_is_a_check_warning_naming_the_setting(
    overrides, setting, where
):
    (message,) = w028(**overrides)
    assert (message.id, message.level) == ("notifications.W028", checks.WARNING)  # E028 once: it stopped migrate
    assert f"whose location ({setting}) {where}" in message.msg
    assert "cron" in message.msg
    assert message.msg.endswith(
        "email with attachments is held (nothing sent, no retry spent) until it is fixed; every other row goes out."
    )


@pytest.mark.parametrize(
    "overrides",
    [
        {"MEDIA_ROOT": "/srv/site/media"},
        {"STORAGES": {"default": {"BACKEND": "django.core.files.storage.InMemoryStorage"}}, "MEDIA_ROOT": ""},
    ],
)
def test_an_absolute_location_or_another_kind_of_storage_is_no_error(overrides):
    assert w028(**overrides) == []


def tick_from(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`manage.py runtick` as cron starts it: from `directory`, with MEDIA_ROOT unset."""
    return subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "runtick", "--settings=tests.child_settings", *args],
        cwd=directory,
        env=child_env({"MEDIA_ROOT": ""}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_email_with_attachments_waits_for_an_absolute_storage_while_the_rest_goes_out(tmp_path, monkeypatch):
    """Issue 40 item 1: a relative storage holds only what needs it, with the path it would
    read, under cron's own tick; setting MEDIA_ROOT releases it."""
    site, home = tmp_path / "site", tmp_path / "home"
    site.mkdir()
    home.mkdir()
    monkeypatch.chdir(site)
    with override_settings(
        MEDIA_ROOT="", EMAIL_BACKEND="notifications.mail.QueuedEmailBackend", NOTIFICATIONS_EMAIL_BACKEND=LOCMEM
    ):
        message = EmailMessage("Invoice 7", "Attached.", "billing@example.com", ["ada@example.com"])
        message.attach("invoice.txt", "Invoice 7: 120 EUR\n", "text/plain")
        assert message.send() == 1
        row = Notification.objects.get()
        (stored,) = row.attachments
        assert (site / stored["file"]).exists()  # under the site's working directory
        plain = schedule(fire_at=NOW, channels=["email"], email_to="bob@example.com", subject="Hi", body="No file.")

        # Cron's tick, from $HOME with MEDIA_ROOT unset: it runs, sends the plain row and
        # holds the other, saying where it would have read the attachment.
        ran = tick_from(home)
        assert ran.returncode == 0, ran.stderr
        summary, held = ran.stdout.splitlines()
        assert " claimed=2 succeeded=1 " in summary and " deferred=1 " in summary, summary
        reason = f"email: MEDIA_ROOT is unset, so attachments would be read from {home / attachments.DIRECTORY}"
        assert f" 1 held: {reason} (this process's directory) (this process's settings; " in held, held
        assert not Notification.objects.filter(pk=plain.pk).exists()  # sent
        row.refresh_from_db()
        assert (row.error_count, row.last_error, row.dead_lettered_at) == (0, None, None)  # no retry spent
        assert not DeliveryAttempt.objects.filter(notification_id=row.pk).exists()
        assert row.next_fire_at is not None

    # Fixed: MEDIA_ROOT is the absolute folder the site kept the file in; the first tick after the hold sends it.
    with override_settings(MEDIA_ROOT=str(site), EMAIL_BACKEND=LOCMEM):
        run_tick(now=row.next_fire_at)
    assert not Notification.objects.exists()
    (sent,) = mail.outbox
    (part,) = [p for p in recipients_view(sent).iter_attachments()]
    assert (part.get_filename(), part.get_content()) == ("invoice.txt", "Invoice 7: 120 EUR\n")


@pytest.mark.parametrize("root", ["", "var/media"])
def test_under_a_relative_location_email_with_attachments_is_held_not_retried(tmp_path, monkeypatch, root):
    monkeypatch.chdir(tmp_path)
    with override_settings(MEDIA_ROOT=root):
        row = schedule(fire_at=NOW, **EMAIL, attachments=[Attachment("invoice.pdf", b"x")])
        report = run_tick(now=NOW)
    row.refresh_from_db()
    assert row.dead_lettered_at is None and row.error_count == 0 and row.last_error is None
    (reason,) = report.holds
    assert f"would be read from {tmp_path / root / attachments.DIRECTORY} " in reason
    assert mail.outbox == []


# --- 34.3: any name Django's own backends send ---------------------------------------------


@pytest.mark.parametrize("name", ODD_NAMES)
def test_an_odd_attachment_name_is_queued_and_reaches_the_recipient_as_it_was(name):
    with override_settings(EMAIL_BACKEND="notifications.mail.QueuedEmailBackend", NOTIFICATIONS_EMAIL_BACKEND=LOCMEM):
        message = EmailMessage("Report", "Attached.", "billing@example.com", ["ada@example.com"])
        message.attach(name, b"%PDF-1.4 report", "application/pdf")
        assert message.send() == 1
        assert Notification.objects.count() == 1  # queued at commit, not lost there
        run_tick(now=timezone.now())
    (sent,) = mail.outbox
    (part,) = list(recipients_view(sent).iter_attachments())
    assert (part.get_filename(), part.get_content()) == (name, b"%PDF-1.4 report")


@pytest.mark.parametrize("name", ODD_NAMES)
def test_schedule_takes_an_odd_name_and_stores_the_file_under_a_safe_one(name):
    row = schedule(fire_at=NOW, **EMAIL, attachments=[Attachment(name, b"data", "application/pdf")])
    (item,) = row.attachments
    assert item["name"] == name
    assert item["file"].startswith(f"{attachments.DIRECTORY}/") and ".." not in item["file"]
    assert item["file"].isascii()
    row.full_clean()  # what a later save validates

    run_tick(now=NOW)
    (sent,) = mail.outbox
    assert [p.get_filename() for p in recipients_view(sent).iter_attachments()] == [name]


def test_a_forged_storage_name_is_still_refused():
    row = schedule(fire_at=NOW, **EMAIL, attachments=[Attachment("a.txt", b"x")])
    row.attachments[0]["file"] = f"{attachments.DIRECTORY}/../../etc/passwd"
    with pytest.raises(ValidationError) as caught:
        row.full_clean()
    assert "attachments" in caught.value.message_dict


# --- 34.4: a storage outage is retried --------------------------------------------------------


@pytest.fixture
def unreadable():
    with storage_settings("tests.support.storages.UnreadableStorage"):
        UnreadableStorage.failing = True
        try:
            yield UnreadableStorage
        finally:
            UnreadableStorage.failing = False


def test_a_storage_read_error_retries_a_one_shot_row(unreadable):
    row = schedule(fire_at=NOW, **EMAIL, attachments=[Attachment("invoice.pdf", b"x")])

    run_tick(now=NOW)
    row.refresh_from_db()
    assert row.dead_lettered_at is None and row.error_count == 1 and row.next_fire_at > NOW
    assert row.last_error == "email: the attachment 'invoice.pdf' could not be read (OSError: EIO Input/output error)"

    unreadable.failing = False  # the storage is back
    run_tick(now=row.next_fire_at)
    assert not Notification.objects.filter(pk=row.pk).exists()
    assert len(mail.outbox) == 1


def test_a_storage_read_error_does_not_stop_a_daily_row(unreadable):
    row = schedule(fire_at=NOW, **EMAIL, recurrence_rule="0 9 * * *", attachments=[Attachment("report.csv", b"a,b\n")])

    run_tick(now=NOW)
    row.refresh_from_db()
    assert row.dead_lettered_at is None and row.next_fire_at is not None and row.error_count == 1

    unreadable.failing = False
    run_tick(now=row.next_fire_at)
    row.refresh_from_db()
    assert (row.error_count, row.last_error, row.dead_lettered_at) == (0, None, None)
    assert row.next_fire_at is not None and len(mail.outbox) == 1


def test_a_storage_read_error_does_not_open_the_email_circuit(unreadable):
    from notifications.models import Target

    with override_settings(NOTIFICATIONS_CIRCUIT_BREAKER={"failures": 1, "cooldown": 60, "max_cooldown": 60}):
        schedule(fire_at=NOW, **EMAIL, attachments=[Attachment("a.txt", b"x")])
        run_tick(now=NOW)
    assert not Target.objects.exclude(state=Target.State.CLOSED).exists()


# --- 34.6: a forwarded message as an email.mime part -----------------------------------------


def test_a_forwarded_mime_message_is_queued_and_sent_whole():
    inner = MIMEText("The original text.\n")
    inner["Subject"] = "Original"
    inner["From"] = "grace@example.com"
    server = SMTPServer()
    try:
        with queue_in_front_of(SMTP_BACKEND, host="127.0.0.1", port=server.port, timeout=5):
            message = EmailMessage("Fwd: Original", "See below.", "ada@example.com", ["bob@example.com"])
            message.attach(MIMEMessage(inner))
            assert message.send() == 1
            run_tick(now=timezone.now())
    finally:
        server.close()
    (delivered,) = server.delivered
    (part,) = list(delivered.message.iter_attachments())
    assert part.get_content_type() == "message/rfc822"
    forwarded = part.get_content()
    assert (forwarded["Subject"], forwarded["From"]) == ("Original", "grace@example.com")
    assert forwarded.get_content().rstrip() == "The original text."


# --- 34.8: a full disk, a file that cannot be deleted ---------------------------------------


def stored_files() -> list[str]:
    target = attachments.storage()
    if not target.exists(attachments.DIRECTORY):
        return []
    return sorted(target.listdir(attachments.DIRECTORY)[1])


def test_a_full_disk_leaves_no_partial_file_and_says_so():
    data = b"x" * (300 * 1024)  # several chunks: the first is written before the disk is full
    with storage_settings("tests.support.storages.FullDiskStorage"):
        before = stored_files()
        with pytest.raises(OSError) as caught:
            schedule(fire_at=NOW, **EMAIL, attachments=[Attachment("big.bin", data)])
        assert stored_files() == before
    assert "The attachment 'big.bin' could not be stored in the storage 'attachments'" in str(caught.value)
    assert "ENOSPC" in str(caught.value)
    assert not Notification.objects.exists()


def test_a_full_disk_on_the_queued_path_leaves_no_file():
    with (
        storage_settings("tests.support.storages.FullDiskStorage"),
        override_settings(EMAIL_BACKEND="notifications.mail.QueuedEmailBackend", NOTIFICATIONS_EMAIL_BACKEND=LOCMEM),
    ):
        message = EmailMessage("Big", "Attached.", "billing@example.com", ["ada@example.com"])
        message.attach("big.bin", b"x" * (300 * 1024), "application/octet-stream")
        before = stored_files()
        with pytest.raises(OSError) as caught:
            message.send()  # in autocommit the commit is now: the queueing raises to the caller
        assert "could not be stored" in str(caught.value)
        assert stored_files() == before
    assert not Notification.objects.exists()


def test_a_file_that_cannot_be_deleted_is_logged_with_its_storage(caplog):
    with storage_settings("tests.support.storages.UndeletableStorage"):
        row = schedule(fire_at=NOW, **EMAIL, key="k", attachments=[Attachment("secret.txt", b"TOP-SECRET-CONTENT")])
        with caplog.at_level(logging.WARNING, logger="notifications.attachments"):
            assert cancel("k")
    (record,) = [r for r in caplog.records if r.name == "notifications.attachments"]
    assert record.levelno == logging.WARNING
    assert row.attachments[0]["file"] in record.getMessage()
    assert "'attachments'" in record.getMessage() and "EACCES" in record.getMessage()
    assert "TOP-SECRET-CONTENT" not in caplog.text
