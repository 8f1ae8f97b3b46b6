"""`QueuedEmailBackend` takes a batch message by message, as Django's own backends send.

A message without recipients is skipped; an invalid one raises at once, or with
`fail_silently` is skipped while the others are queued; a message over the attachment
limits is refused when it is sent, before the caller's transaction commits; and
django-anymail's `send_at` given as a date comes back a date.
"""

from __future__ import annotations

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
