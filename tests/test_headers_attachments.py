"""`schedule()`'s From, headers and attachments: validated (no header injection, no header the
queue owns, a size limit), stored through Django's storage API, sent, and deleted with the row.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.test.utils import override_settings
from django.utils import timezone

from notifications.api import cancel, purge, run_tick, schedule
from notifications.models import Notification, attachments
from notifications.models.attachments import Attachment, calendar_event

pytestmark = pytest.mark.django_db(transaction=True)  # files are deleted when the deletion commits

NOW = timezone.now().replace(microsecond=0)
EMAIL = {"channels": ["email"], "email_to": "ada@example.com", "subject": "Invoice", "body": "Attached."}


def refused(**fields) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        schedule(fire_at=NOW, **{**EMAIL, **fields})
    return caught.value.message_dict


def files_of(row) -> list[str]:
    return [item["file"] for item in row.attachments]


def exists(name: str) -> bool:
    return attachments.storage().exists(name)


# --- headers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        (
            {"X-A": "1\r\nBcc: victim@example.com"},
            "The value of 'X-A' holds a line break: headers are one logical line.",
        ),
        ({"X-A": "1\nx"}, "The value of 'X-A' holds a line break: headers are one logical line."),
        ({"X-A\r\nBcc": "v"}, "is not a header name"),
        ({"Bad Name": "v"}, "is not a header name"),
        ({"Message-ID": "<mine@example.com>"}, "The header 'Message-ID' is the queue's own"),
        ({"webhook-signature": "v1,x"}, "The header 'webhook-signature' is the queue's own"),
        ({"content-type": "text/html"}, "is the queue's own"),
        ({"X-A": 7}, "The value of 'X-A' must be a string."),
        ({"X-A": "1", "x-a": "2"}, "appears twice"),
        (["X-A", "1"], "Give a JSON object of header names and values"),
    ],
)
def test_headers_are_refused_on_headers(headers, message):
    assert any(message in m for m in refused(headers=headers)["headers"])


def test_from_and_headers_go_out():
    schedule(fire_at=NOW, **EMAIL, from_email="Billing <billing@example.com>", headers={"X-Campaign": "spring"})

    run_tick(now=NOW)

    (sent,) = mail.outbox
    assert sent.from_email == "Billing <billing@example.com>"
    message = sent.message()
    assert message["X-Campaign"] == "spring"
    assert message["From"] == "Billing <billing@example.com>"


def test_a_from_on_two_lines_is_refused():
    assert refused(from_email="a@example.com\r\nBcc: victim@example.com")["from_email"]


def test_headers_written_around_validation_never_go_out():
    row = schedule(fire_at=NOW, **EMAIL)
    Notification.objects.filter(pk=row.pk).update(headers={"X-A": "1\r\nBcc: victim@example.com"})

    report = run_tick(now=NOW)

    row.refresh_from_db()
    assert report.counts()["dead_lettered"] == 1
    assert row.last_error.startswith("invalid: headers: The value of 'X-A' holds a line break")
    assert mail.outbox == []


# --- attachments ---------------------------------------------------------------------------


def test_attachments_are_stored_outside_the_row_and_sent():
    row = schedule(
        fire_at=NOW,
        **EMAIL,
        attachments=[
            Attachment("invoice.pdf", b"%PDF-1.4 binary \x00\xff"),
            ("notes.txt", "plain text", "text/plain"),
            Attachment("logo.png", b"\x89PNG fake", "image/png", content_id="logo@example.com"),
        ],
    )
    stored = Notification.objects.get(pk=row.pk).attachments
    assert [(a["name"], a["mimetype"], a["size"], a["kind"]) for a in stored] == [
        ("invoice.pdf", "application/pdf", 18, "file"),
        ("notes.txt", "text/plain", 10, "file"),
        ("logo.png", "image/png", 9, "part"),
    ]
    assert stored[2]["content_id"] == "<logo@example.com>"
    assert all(exists(name) for name in files_of(row))
    assert b"PDF" not in str(stored).encode()  # the content is not in the row

    run_tick(now=NOW)

    message = mail.outbox[0].message()
    found = {part.get_filename(): part for part in message.walk() if part.get_filename()}
    assert found["invoice.pdf"].get_payload(decode=True) == b"%PDF-1.4 binary \x00\xff"
    assert found["notes.txt"].get_payload(decode=True).rstrip(b"\n") == b"plain text"  # 6.x ends text with a newline
    assert found["logo.png"]["Content-ID"] == "<logo@example.com>"
    assert found["logo.png"].get_content_disposition() == "inline"
    assert not any(exists(name) for name in files_of(row))  # deleted with the delivered row


@override_settings(NOTIFICATIONS_MAX_ATTACHMENT_BYTES=1000)
def test_the_size_limit_is_per_row_and_nothing_is_written_over_it():
    before = Notification.objects.count()
    messages = refused(attachments=[Attachment("a.bin", b"x" * 600), Attachment("b.bin", b"x" * 600)])

    assert messages["attachments"] == [
        "The attachments hold 1,200 bytes, more than the 1,000 a notification may carry "
        "(NOTIFICATIONS_MAX_ATTACHMENT_BYTES)."
    ]
    assert Notification.objects.count() == before
    assert schedule(fire_at=NOW, **EMAIL, attachments=[Attachment("a.bin", b"x" * 1000)]).attachments


def test_attachments_need_the_email_channel_and_a_name():
    webhook = {"channels": ["webhook"], "webhook_url": "https://example.com/hook"}
    with pytest.raises(ValidationError) as caught:
        schedule(**webhook, attachments=[Attachment("a.txt", "x")])
    assert caught.value.message_dict["attachments"] == ["Attachments go with the email channel."]
    assert refused(attachments=[Attachment("", "x")])["attachments"] == ["An attachment needs a file name (one line)."]
    assert refused(attachments=["just a string"])["attachments"]


@pytest.mark.parametrize("how", ["purge", "cancel", "admin delete", "replace"])
def test_files_go_with_their_row(how):
    row = schedule(fire_at=NOW, **EMAIL, key="k", attachments=[Attachment("a.txt", "x")])
    (name,) = files_of(row)
    assert exists(name)

    if how == "purge":
        assert purge(Notification.objects.filter(pk=row.pk)) == 1
    elif how == "cancel":
        assert cancel("k")
    elif how == "admin delete":
        Notification.objects.get(pk=row.pk).delete()
    else:
        replaced = schedule(
            fire_at=NOW, **EMAIL, key="k", on_conflict="replace", attachments=[Attachment("b.txt", "y")]
        )
        (new_name,) = files_of(replaced)
        assert exists(new_name)

    assert not exists(name)


def test_keep_leaves_the_row_and_writes_nothing_new():
    row = schedule(fire_at=NOW, **EMAIL, key="k", attachments=[Attachment("a.txt", "x")])
    kept = schedule(fire_at=NOW, **EMAIL, key="k", on_conflict="keep", attachments=[Attachment("unkept.txt", "y")])

    assert files_of(kept) == files_of(row)
    _, stored = attachments.storage().listdir(attachments.DIRECTORY)
    assert not [name for name in stored if name.endswith("-unkept.txt")]  # written, then removed


def test_a_file_gone_from_storage_is_a_permanent_failure_naming_it():
    row = schedule(fire_at=NOW, **EMAIL, attachments=[Attachment("invoice.pdf", b"x")])
    attachments.storage().delete(files_of(row)[0])

    run_tick(now=NOW)

    row.refresh_from_db()
    assert row.last_error == "email: the attachment 'invoice.pdf' is gone from storage"
    assert row.dead_lettered_at is not None


def test_a_calendar_invitation_for_a_reminder():
    start = datetime(2025, 3, 3, 9, 30, tzinfo=UTC)
    invite = calendar_event(
        "Dentist; bring the card, please",
        start,
        start + timedelta(minutes=30),
        description="Line one\nLine two " + "x" * 80,
        uid="visit-7@example.com",
    )
    schedule(fire_at=NOW, **EMAIL, attachments=[invite])

    run_tick(now=NOW)

    (part,) = [p for p in mail.outbox[0].message().walk() if p.get_filename() == "invite.ics"]
    assert part.get_content_type() == "text/calendar"
    # CRLF line ends, as RFC 5545 wants them (Django 6's text parts carry LF until the wire).
    text = part.get_payload(decode=True).decode().replace("\r\n", "\n").replace("\n", "\r\n")
    assert "SUMMARY:Dentist\\; bring the card\\, please\r\n" in text
    assert "DTSTART:20250303T093000Z\r\nDTEND:20250303T100000Z\r\n" in text
    assert "UID:visit-7@example.com\r\n" in text
    assert all(len(line.encode()) <= 75 for line in text.split("\r\n"))  # folded
    assert "DESCRIPTION:Line one\\nLine two " in text.replace("\r\n ", "")
