"""`QueuedEmailBackend` takes a batch message by message, as Django's own backends send.

A message without recipients is skipped; an invalid one raises at once, or with
`fail_silently` is skipped while the others are queued; a message over the attachment
limits is refused when it is sent, before the caller's transaction commits;
django-anymail's `send_at` given as a date comes back a date; and what Django's `attach()`
takes beyond a named file (a message as `message/rfc822`, content without a file name) is sent
as Django sends it.
"""

from __future__ import annotations

import email
import email.policy
from datetime import date

import pytest
from anymail.message import AnymailMessage
from django.contrib.auth import get_user_model
from django.core import mail
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage, send_mass_mail
from django.db import transaction

from notifications.api import run_tick
from notifications.mail import QueuedEmailBackend
from notifications.models import Notification
from tests.support.mail_servers import queue_in_front_of

pytestmark = pytest.mark.django_db(transaction=True)  # real commits: rows are made on commit

LOCMEM = "django.core.mail.backends.locmem.EmailBackend"
THREE = [
    ("A", "a", None, ["good1@example.com"]),
    ("B", "b", None, ["not an address"]),
    ("C", "c", None, ["good2@example.com"]),
]


@pytest.fixture(autouse=True)
def queued():
    with queue_in_front_of(LOCMEM):
        yield


def queued_subjects() -> list[str]:
    return sorted(Notification.objects.values_list("subject", flat=True))


def test_with_fail_silently_an_invalid_message_is_skipped_and_the_others_are_queued():
    # The backend built with fail_silently (send_mass_mail's argument is deprecated on Django 6.1+).
    backend = QueuedEmailBackend(fail_silently=True)
    messages = [EmailMessage(subject, body, sender, to) for subject, body, sender, to in THREE]

    assert backend.send_messages(messages) == 2

    assert queued_subjects() == ["A", "C"]


def test_without_fail_silently_an_invalid_message_raises_and_nothing_is_queued():
    with pytest.raises(ValidationError, match="Enter a valid email address"):
        send_mass_mail(THREE)

    assert queued_subjects() == []


def test_a_message_without_recipients_is_skipped_not_refused():
    assert send_mass_mail([("A", "a", None, ["ada@example.com"]), ("B", "b", None, [])]) == 1

    assert queued_subjects() == ["A"]


def test_too_many_attachments_are_refused_when_sent_not_after_the_commit():
    message = EmailMessage("Report", "Attached", to=["ada@example.com"])
    for n in range(101):
        message.attach(f"part-{n}.txt", b"x", "text/plain")

    with pytest.raises(ValidationError, match="At most 100 attachments, not 101"), transaction.atomic():
        get_user_model().objects.create_user("ada")
        message.send()

    # Refused inside the caller's transaction: it rolled back with the caller's own data.
    assert not get_user_model().objects.exists()
    assert queued_subjects() == []


def test_an_anymail_send_at_date_is_sent_as_a_date():
    AnymailMessage("Later", "b", to=["ada@example.com"], send_at=date(2030, 12, 25)).send()

    assert run_tick().counts()["succeeded"] == 1

    (sent,) = mail.outbox
    assert sent.send_at == date(2030, 12, 25)


def test_a_message_attached_as_message_rfc822_is_queued_and_sent_whole():
    # Django's attach() takes an EmailMessage, or an email.message.Message, as message/rfc822.
    forwarded = EmailMessage("Original", "The first message.", "grace@example.com", ["ada@example.com"])
    message = EmailMessage("Fwd: Original", "See below.", to=["ada@example.com"])
    message.attach("original.eml", forwarded, "message/rfc822")
    message.attach("second.eml", forwarded.message(), "message/rfc822")

    assert message.send() == 1
    assert run_tick().counts()["succeeded"] == 1

    (sent,) = mail.outbox
    parts = [p for p in sent.message().walk() if p.get_content_type() == "message/rfc822"]
    assert [p.get_filename() for p in parts] == ["original.eml", "second.eml"]
    for part in parts:
        (inner,) = part.get_payload()
        assert (inner["Subject"], inner["From"], inner.get_payload().strip()) == (
            "Original",
            "grace@example.com",
            "The first message.",
        )


def test_an_attachment_without_a_file_name_is_queued_and_sent_as_django_sends_it():
    message = EmailMessage("Data", "Attached.", to=["ada@example.com"])
    message.attach(None, "Grüße\n", "text/plain")
    message.attach(None, b"\x00\x01\x02", "application/octet-stream")

    assert message.send() == 1
    assert run_tick().counts()["succeeded"] == 1

    def attached(msg):
        """The attachments as a recipient reads them: the message's bytes, parsed."""
        received = email.message_from_bytes(msg.message().as_bytes(), policy=email.policy.default)
        return [
            (p.get_content_type(), p.get_filename(), p.get_content_disposition(), p.get_payload(decode=True))
            for p in list(received.walk())[2:]
        ]

    (sent,) = mail.outbox
    got = attached(sent)
    assert [(t, f, d) for t, f, d, _ in got] == [(t, f, d) for t, f, d, _ in attached(message)]
    assert [data for *_, data in got] == ["Grüße\n".encode(), b"\x00\x01\x02"]
