"""`QueuedEmailBackend`: the mail a site already sends, queued as notifications.

    EMAIL_BACKEND = "notifications.mail.QueuedEmailBackend"              # Django 5.2, 6.0
    NOTIFICATIONS_EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"

    MAILERS = {                                                          # Django 6.1+
        "default": {"BACKEND": "notifications.mail.QueuedEmailBackend"},
        "smtp": {"BACKEND": "django.core.mail.backends.smtp.EmailBackend", "OPTIONS": {...}},
    }
    NOTIFICATIONS_MAILER = "smtp"

Every message sent through it (`send_mail`, `EmailMessage.send()`, a password reset,
`mail_admins`) becomes one row, channel `email`, due now, when the caller's transaction
commits: a message sent inside a transaction that rolls back is never queued, one that
commits is queued once. The tick then sends it through the real backend
(`notifications.channels.email.mailers` says which), with retries, the delivery log and the admin.
Message by message, as Django's own backends send: one without recipients is skipped; an
invalid one (attachments over the limits included) raises when it is sent, or with
`fail_silently` is skipped while the others are queued.

Kept of a message: `to`, `cc`, `bcc`, `reply_to`, `from_email`, `subject`, `body` (sent
as they are: they are not templates), every alternative (`attach_alternative`), every
attachment (name, content and type; MIME parts whole, inline images with their
Content-ID), `extra_headers`, `content_subtype`, `mixed_subtype`, `alternative_subtype`,
`encoding`, and django-anymail's attributes (`ANYMAIL_ATTRIBUTES`). Not kept: the
`Message-ID` (each firing has its own, the same for every attempt), the `Date` (set when
it is sent), a `connection` given to the message. See docs/email.md, "Queue the mail you
already send".

OPTIONS (MAILERS, or `get_connection(..., priority=...)`): `priority`, the priority of the
rows this backend queues (default `"normal"`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from email.message import Message
from typing import Any

from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage
from django.core.mail.backends.base import BaseEmailBackend
from django.db import router, transaction

from notifications.content.queued import message_extras
from notifications.rules import headers as header_rules


class QueuedEmailBackend(BaseEmailBackend):
    """An email backend that queues each message as a notification row (see the module)."""

    queues_notifications = True  # how notifications.channels.email.mailers tells the queue from a real backend

    def __init__(self, fail_silently: bool = False, *, priority: str = "normal", **kwargs: Any) -> None:
        # fail_silently is taken here, not passed on: Django 6.1's base class warns about it.
        super().__init__(**kwargs)
        self.fail_silently = fail_silently
        self.priority = priority

    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        """Queue each message once the caller's transaction commits; returns how many.

        Message by message, as Django's own backends send: one without recipients is
        skipped; an invalid one raises (nothing of this call is queued) or, with
        `fail_silently`, is skipped while the others are queued.
        """
        from notifications.models import Notification, validation

        queued = []
        with validation.batch():  # a newsletter's messages share what validating each needs
            for message in email_messages:
                if not message.recipients():
                    continue  # as Django's SMTP backend: nobody to send it to
                try:
                    queued.append(queued_message(message, priority=self.priority))
                except (ValidationError, ValueError, TypeError):
                    if not self.fail_silently:
                        raise
        if not queued:
            return 0

        using = router.db_for_write(Notification)
        transaction.on_commit(lambda: _queue(queued, self.fail_silently), using=using)
        return len(queued)


@dataclass
class QueuedMessage:
    """A message as a row validated in memory (not saved), its attachments still in memory
    (stored at commit)."""

    row: Any  # a Notification, unsaved
    attachments: list[Any]


def queued_message(message: EmailMessage, *, priority: str = "normal") -> QueuedMessage:
    """The row of `message`, validated now (the caller learns of a bad message at once),
    once: at commit it is only inserted."""
    from notifications.models.attachments import validate
    from notifications.services import prepare

    extra = {str(k): str(v) for k, v in (message.extra_headers or {}).items() if not header_rules.is_own(str(k))}
    fields: dict[str, Any] = {
        "channels": ["email"],
        "email_to": [str(a) for a in message.to],
        "email_cc": [str(a) for a in message.cc],
        "email_bcc": [str(a) for a in message.bcc],
        "reply_to": [str(a) for a in message.reply_to],
        "from_email": str(message.from_email or ""),
        "subject": str(message.subject or ""),
        "body": str(message.body or ""),
        "headers": extra,
        "priority": priority,
        "message": message_extras(message),
    }
    attachments = [_attachment(item) for item in message.attachments]
    row, _ = prepare(fields=fields)
    validate(attachments)  # refused now, not at commit
    return QueuedMessage(row, attachments)


def _attachment(item: Any) -> Any:
    if isinstance(item, Message):
        return item
    filename, content, mimetype = item  # Django's EmailAttachment, or the tuple before it
    from notifications.models.attachments import Attachment

    # A message/rfc822 attachment may be a message itself (Django's `attach()` takes an
    # EmailMessage or an email.message.Message): kept as its bytes, which Django parses back.
    if isinstance(content, EmailMessage):
        content = content.message().as_bytes()
    elif isinstance(content, Message):
        content = content.as_bytes()
    if not filename and isinstance(content, str | bytes):
        return _unnamed_part(content, mimetype)
    return Attachment(filename or "", content, mimetype)


def _unnamed_part(content: str | bytes, mimetype: str | None) -> Message:
    """An attachment without a file name, kept whole as the MIME part Django itself makes
    of it (a row's attachments otherwise need a name). Asked of Django's own `message()`:
    its headers differ between versions (no Content-Disposition on 5.2, `attachment` on 6)."""
    made = EmailMessage(attachments=[(None, content, mimetype)]).message()  # type: ignore[list-item] # None: no name
    part: Message = made.get_payload()[-1]  # multipart/mixed: the (empty) body, if any, then it
    return part


def _queue(queued: list[QueuedMessage], fail_silently: bool) -> None:
    """Create the rows (after the caller's commit), all or none, in one bulk insert.

    Validated when they were sent; here each is only made due now (quiet hours applied
    as at a save) and inserted.
    """
    from django.utils import timezone

    from notifications.services import Prepared, save_batch, start

    now = timezone.now()
    batch = []
    for item in queued:
        start(item.row, now, now=now)
        batch.append(Prepared(item.row, item.attachments))
    try:
        save_batch(batch)
    except Exception:
        if not fail_silently:
            raise
