"""An email backend whose chosen recipients fail the way an SMTP server fails them.

Point `EMAIL_BACKEND` at `BACKEND`; mail to any other address lands in `mail.outbox`.
"""

from __future__ import annotations

import smtplib
from typing import ClassVar

from django.core.mail.backends import locmem

BACKEND = f"{__name__}.FailingRecipientsBackend"

OK_TO = "ada@example.com"
REFUSED_TO = "refused@example.com"  # SMTPRecipientsRefused: permanent
DOWN_TO = "down@example.com"  # SMTPServerDisconnected: transient
BUSY_TO = "busy@example.com"  # SMTPDataError 451: transient


class FailingRecipientsBackend(locmem.EmailBackend):
    """The locmem backend, except that the `failures` recipients raise real smtplib errors."""

    failures: ClassVar[dict[str, Exception]] = {
        REFUSED_TO: smtplib.SMTPRecipientsRefused({REFUSED_TO: (550, b"5.1.1 no such user")}),
        DOWN_TO: smtplib.SMTPServerDisconnected("Connection unexpectedly closed"),
        BUSY_TO: smtplib.SMTPDataError(451, b"4.3.0 try again later"),
    }

    def send_messages(self, messages):
        for message in messages:
            for recipient in message.to:
                if recipient in self.failures:
                    raise self.failures[recipient]
        return super().send_messages(messages)


def schedule_email(fire_at, **fields):
    """A row with the email channel and a plain message, due at `fire_at`; `fields` override."""
    from notifications.api import schedule

    fields.setdefault("channels", ["email"])
    fields.setdefault("email_to", OK_TO)
    fields.setdefault("subject", "Reminder")
    fields.setdefault("body", "Hello")
    return schedule(fire_at=fire_at, **fields)
