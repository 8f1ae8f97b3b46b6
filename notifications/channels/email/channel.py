"""Email through `django.core.mail` and the site's mailers (SMTP, console, anymail...).

One backend connection per worker thread and mailer, opened once per tick: the mailer
`notifications.channels.email.mailers` chooses for the row (its own `mailer` alias, NOTIFICATIONS_MAILER,
NOTIFICATIONS_EMAIL_BACKEND, or the site's default; on Django 6.1+ through the `MAILERS`
API). Messages go to `connection.send_messages()`, never through a deprecated argument.
A row's From (`from_email`, else DEFAULT_FROM_EMAIL), extra headers and attachments (read
from storage by the worker) go with it; a message queued by `QueuedEmailBackend` is rebuilt
with its alternatives, MIME shape and django-anymail's attributes.

What the channel adds to a plain send:

- Suppressed addresses (`notifications.models.Suppression`, read for each claimed batch
  by `prepare`) are left out; a firing with no recipient left fails permanently.
- Refusals per recipient are collected: SMTP 5xx answers to `RCPT` (all of them, from
  `SMTPRecipientsRefused`, or some, from the refusals smtplib returns), a provider's
  `rejected`/`invalid` status through django-anymail. The tick's write-back suppresses them.
- A provider's HTTP error answer keeps its status (`email: HTTP 422 <its reason>`); 4xx
  other than 408 and 429 are permanent, the rest transient.
- Where the provider de-duplicates on a key (`IDEMPOTENCY`), the firing's id is sent as
  that key, so a retry after a stall cannot deliver twice.
- Timeouts say so (`email: timed out after 10s`), whichever timer fired.
"""

from __future__ import annotations

import contextlib
import os
import smtplib
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.mail import EmailMessage, EmailMultiAlternatives
from django.core.mail.backends.base import BaseEmailBackend
from django.core.mail.utils import DNS_NAME

from notifications import compat
from notifications.channels.base import Channel, ChannelResult, ErrorClass, Firing
from notifications.channels.email import inflight, providers
from notifications.channels.email.answers import EmailAnswers
from notifications.channels.email.answers import all_addresses as all_addresses
from notifications.channels.email.mailers import open_connection
from notifications.channels.email.mailers import (
    site_mailers as site_mailers,  # the checks' and the test double's answer too
)
from notifications.conf import positive_number
from notifications.content.email import Content, render_content
from notifications.content.links import Links, links_for
from notifications.content.queued import ANYMAIL_ATTRIBUTES, SHAPE_ATTRIBUTES, restore
from notifications.content.templating import TemplateRenderError
from notifications.exceptions import NotificationsError
from notifications.models import Suppression, addresses, attachments
from notifications.rules import headers as header_rules

if TYPE_CHECKING:
    from notifications.models import Notification

ALL_SUPPRESSED = "email: all recipients suppressed"
IN_FLIGHT_SETTING = "NOTIFICATIONS_ATTACHMENT_BYTES_IN_FLIGHT"
# A server's refusal of one mail transaction: smtplib resets it and the session serves the
# next message. Any other failure (a refused login, greeting or HELO, a lost connection)
# leaves a session not worth reusing.
_TRANSACTION_REFUSED = (smtplib.SMTPSenderRefused, smtplib.SMTPDataError)


def open_mailer(alias: str = "") -> BaseEmailBackend:
    """A new connection of the backend a row whose `mailer` is `alias` goes through
    (`notifications.channels.email.mailers`: the row's alias, NOTIFICATIONS_MAILER, NOTIFICATIONS_EMAIL_BACKEND,
    or the site's default mailer). On Django 6.1+ aliases come from `mail.mailers`; no
    deprecated call is made."""
    return open_connection(alias)


def message_id(firing: Firing) -> str:
    """The same Message-ID for every attempt of one firing, so duplicates can be spotted."""
    return f"<notification-{firing.notification.pk}.{firing.firing_id}@{DNS_NAME}>"


class AttachmentMissing(NotificationsError):
    """An attachment's file could not be read from storage (the message says which, never its
    content). Permanent only for a file known to be gone: missing from a storage at an absolute
    location. A read error (storage down) is transient, and so is a file missing from a
    storage relative to the working directory, which another directory may hold."""

    def __init__(self, message: str, error_class: ErrorClass = ErrorClass.PERMANENT) -> None:
        super().__init__(message)
        self.error_class = error_class


def message_links(row: Notification) -> Links:
    """The message's unsubscribe and preference links: for the row's `recipient`, or
    without one for its first address (a message has one List-Unsubscribe)."""
    key = row.recipient
    if not key:
        first = next(iter(all_addresses(row)), "")
        key = addresses.bare(first) if first else ""
    return links_for(key, row.category)


def build_message(
    firing: Firing,
    content: Content,
    to: list[str],
    cc: list[str],
    bcc: list[str],
    *,
    extra_headers: Mapping[str, str] | None = None,
) -> EmailMessage:
    """The message of one firing: the text body, its alternatives (the HTML body, or those
    of a queued message), the row's From and headers, its attachments, and for a queued
    message its MIME shape and django-anymail's attributes.

    Raises AttachmentMissing when an attachment cannot be read from storage.
    """
    row = firing.notification
    extras = row.message if isinstance(row.message, dict) else {}
    message = EmailMultiAlternatives(
        subject=content.subject,
        body=content.body,
        from_email=row.from_email or settings.DEFAULT_FROM_EMAIL,
        to=to,
        cc=cc,
        bcc=bcc,
        reply_to=addresses.as_list(row.reply_to),
        headers={**header_rules.usable(row.headers), **(extra_headers or {}), "Message-ID": message_id(firing)},
    )
    if content.html is not None:
        message.attach_alternative(content.html, "text/html")
    for alternative in extras.get("alternatives") or []:
        if isinstance(alternative, dict) and isinstance(alternative.get("mimetype"), str):
            message.attach_alternative(restore(alternative.get("content")), alternative["mimetype"])
    for name in SHAPE_ATTRIBUTES:
        if isinstance(extras.get(name), str):
            setattr(message, name, extras[name])
    anymail = extras.get("anymail")
    if isinstance(anymail, dict):
        for name in ANYMAIL_ATTRIBUTES:
            if name in anymail:
                setattr(message, name, restore(anymail[name]))
    for item in attachments.stored(row.attachments):
        _attach(message, item)
    return message


def _attach(message: EmailMessage, item: dict[str, Any]) -> None:
    name = str(item.get("name") or "")
    try:
        data = attachments.read(item)
    except FileNotFoundError:
        relative = attachments.relative_location()
        if relative is None:
            raise AttachmentMissing(f"the attachment {name[:60]!r} is gone from storage") from None
        # Under a relative location each working directory has its own files: not a loss
        # until the operator says so (notifications.W028; the tick holds such rows first).
        where = os.path.join(os.path.abspath(relative), str(item["file"]))
        raise AttachmentMissing(
            f"the attachment {name[:60]!r} is not at {where} ({attachments.location_setting()} is relative "
            "to the working directory; notifications.W028)",
            ErrorClass.TRANSIENT,
        ) from None
    except Exception as exc:  # noqa: BLE001 - whichever storage: an outage is retried
        reason = attachments.describe_failure(exc)  # never the message: it may name paths or keys
        failure = f"the attachment {name[:60]!r} could not be read ({reason})"
        raise AttachmentMissing(failure, ErrorClass.TRANSIENT) from None
    if item.get("kind") == "part":
        message.attach(compat.mime_part(data))
    else:
        message.attach(name or None, data, str(item.get("mimetype") or attachments.DEFAULT_MIMETYPE))


class EmailChannel(EmailAnswers, Channel):
    """Sends with one backend connection per worker thread, opened once per tick by its
    first send: an instance that never sends (the registry's, answering `EmailAnswers`)
    opens nothing."""

    def __init__(self) -> None:
        super().__init__()
        self._local = threading.local()
        self._connections: list[BaseEmailBackend] = []
        self._lock = threading.Lock()
        # Suppressed addresses among the rows claimed so far, with those refused during this
        # tick, spelled by `addresses.normalise`: read by the workers, grown by `prepare` and
        # by refusals.
        self._suppressed: set[str] = set()
        # Addresses that turned a row's category off, by row (`leave_out`).
        self._opted_out: dict[Any, set[str]] = {}

    def prepare(self, rows: Sequence[Notification]) -> None:
        wanted = {
            addresses.bare(address)
            for row in rows
            if self.name in row.channel_list
            for value in (row.email_to, row.email_cc, row.email_bcc)
            for address in addresses.as_list(value)
        }
        found = Suppression.objects.among(wanted)
        with self._lock:
            self._suppressed |= found

    def leave_out(self, row: Notification, keys: Collection[str]) -> None:
        """Addresses that opted out of the row's category are left out, as suppressed ones are."""
        with self._lock:
            self._opted_out[row.pk] = set(keys)

    def _connection(self, alias: str) -> BaseEmailBackend:
        """This thread's connection of the mailer `alias` (a row's `mailer`; blank: the site's)."""
        connections: dict[str, BaseEmailBackend] = self._local.__dict__.setdefault("connections", {})
        conn = connections.get(alias)
        if conn is None:
            conn = open_mailer(alias)
            with self._lock:
                self._connections.append(conn)
            connections[alias] = conn
            self._local.connection = conn  # before open(): a failure to open is classed by it
            conn.open()  # held open: SMTP sends the tick's messages on one session
        self._local.connection = conn
        return conn

    def _deliverable(self, value: Any, owed: set[str] | None, opted_out: Collection[str] = ()) -> list[str]:
        """The addresses of `value` not suppressed, not opted out of the row's category and,
        when the firing owes only some recipients (`owed`, normalised), among those."""
        with self._lock:
            return [
                a
                for a in addresses.as_list(value)
                if (key := addresses.bare(a)) not in self._suppressed
                and key not in opted_out
                and (owed is None or key in owed)
            ]

    def describe(self, firing: Firing) -> tuple[str, str]:
        """The addresses this attempt was sent to and its subject, as `deliver` had them;
        the row's own when it stopped before (a template error, every address suppressed)."""
        line: tuple[str, str] | None = getattr(self._local, "line", None)
        if line is not None:
            return line
        row = firing.notification
        recipients = [a for v in (row.email_to, row.email_cc, row.email_bcc) for a in addresses.as_list(v)]
        return ", ".join(recipients), " ".join((row.subject or "").split())

    def deliver(self, firing: Firing) -> ChannelResult:
        row = firing.notification
        self._local.line = None  # the sent log's line (`describe`), once known
        links = message_links(row)
        try:
            content = render_content(row, extra=links.context())
        except TemplateRenderError as exc:
            # The same template fails the same way next time: no retry can help. The
            # message names the rule broken, never the payload.
            return ChannelResult(self.name, f"email: template error: {exc}", ErrorClass.PERMANENT)
        owed = row.owed_recipients
        with self._lock:
            opted_out = self._opted_out.pop(row.pk, set())
        to, cc, bcc = (self._deliverable(v, owed, opted_out) for v in (row.email_to, row.email_cc, row.email_bcc))
        if not (to or cc or bcc):
            return ChannelResult(self.name, ALL_SUPPRESSED, ErrorClass.PERMANENT)
        self._local.line = (", ".join(to + cc + bcc), content.subject)
        size = attachments.total_size(row.attachments)
        if not size:
            return self._send(firing, content, to, cc, bcc, links.headers())
        # Attachments are held in memory while the message is built and sent: wait for their
        # turn in this process's budget (notifications.channels.email.inflight).
        wait = positive_number("CHANNEL_TIMEOUT")
        with inflight.budget().holding(size, wait) as ready:
            if not ready:
                error = f"email: its attachments waited {wait:g}s for their turn ({IN_FLIGHT_SETTING})"
                return ChannelResult(self.name, error, ErrorClass.TRANSIENT, answered=True, not_sent=True)
            return self._send(firing, content, to, cc, bcc, links.headers())

    def _send(
        self,
        firing: Firing,
        content: Content,
        to: list[str],
        cc: list[str],
        bcc: list[str],
        headers: Mapping[str, str],
    ) -> ChannelResult:
        """Build the message of `firing` (with the queue's own `headers`: List-Unsubscribe)
        and send it on this thread's connection."""
        row = firing.notification
        try:
            message = build_message(firing, content, to, cc, bcc, extra_headers=headers)
        except AttachmentMissing as exc:
            # Nothing reached the mail server: not its failure, so the breaker does not count it.
            return ChannelResult(self.name, f"email: {exc}", exc.error_class, answered=True)
        self._local.connection = None
        try:
            conn = self._connection(row.mailer or "")
            with _smtp_refusals(conn) as refused, providers.idempotency(conn, message, firing.firing_id):
                sent = conn.send_messages([message])
        except Exception as exc:  # noqa: BLE001 - any backend's failure is data
            result = providers.failure(exc, conn=getattr(self._local, "connection", None))
            if result.error_class == ErrorClass.TRANSIENT and not isinstance(exc, _TRANSACTION_REFUSED):
                self._drop_connection(row.mailer or "")  # a connection that failed is not reused
        else:
            unsent = providers.unsent_answer(message, conn)
            if unsent is not None:
                result = unsent  # an error answer anymail read as recipient statuses: nothing sent
            else:
                result = self._sent(sent, refused, len(to) + len(cc) + len(bcc))
                result.refused = providers.smtp_refusals(refused) + providers.provider_refusals(
                    message, getattr(conn, "esp_name", None)
                )
        if result.refused:
            with self._lock:
                self._suppressed |= {addresses.bare(address) for address, _ in result.refused}
        return result

    def _sent(self, sent: int, refused: dict[str, tuple[int, bytes]], recipients: int) -> ChannelResult:
        """A send the backend returned from. Recipients the server deferred (4xx to RCPT)
        while it took the message for others are still owed: a transient failure that
        names only them (`deferred`), answered by a live server."""
        if not sent:
            return ChannelResult(self.name, "email: backend sent nothing", ErrorClass.TRANSIENT)
        deferred = providers.smtp_deferrals(refused)
        if not deferred:
            return ChannelResult(self.name)
        error = providers.deferred_error(refused, deferred, recipients)
        return ChannelResult(self.name, error, ErrorClass.TRANSIENT, deferred=deferred, answered=True)

    def _drop_connection(self, alias: str) -> None:
        conn = getattr(self._local, "connection", None)
        self._local.connection = None
        self._local.__dict__.setdefault("connections", {}).pop(alias, None)
        if conn is not None:
            with contextlib.suppress(Exception):  # closing a broken connection
                conn.close()

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            with contextlib.suppress(Exception):  # closing at the end of a tick
                conn.close()


@contextlib.contextmanager
def _smtp_refusals(conn: BaseEmailBackend) -> Iterator[dict[str, tuple[int, bytes]]]:
    """The recipients an SMTP server refused while others were accepted.

    smtplib returns them from `sendmail()` (it raises only when every recipient is
    refused) and Django's SMTP backend drops that return value, so it is read here, on
    this thread's own connection, for the length of one send.
    """
    refused: dict[str, tuple[int, bytes]] = {}
    smtp = getattr(conn, "connection", None)
    if not isinstance(smtp, smtplib.SMTP):
        yield refused
        return
    original = smtp.sendmail

    def sendmail(*args: Any, **kwargs: Any) -> Any:
        answer = original(*args, **kwargs)
        refused.update(providers.by_address(answer or {}))
        return answer

    setattr(smtp, "sendmail", sendmail)  # noqa: B010 - an instance attribute, removed below
    try:
        yield refused
    finally:
        with contextlib.suppress(AttributeError):
            delattr(smtp, "sendmail")
