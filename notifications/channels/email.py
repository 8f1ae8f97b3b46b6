"""Email through `django.core.mail` and the site's EMAIL_BACKEND (SMTP, console, anymail...)."""

from __future__ import annotations

import contextlib
import smtplib
import threading
from typing import Any, cast

from django.conf import settings
from django.core import mail
from django.core.mail import EmailMessage, get_connection
from django.core.mail.backends.base import BaseEmailBackend
from django.core.mail.utils import DNS_NAME

from ..templating import TemplateRenderError, render
from .base import Channel, ChannelResult, ErrorClass, Firing


def site_mailers() -> dict[str, Any] | None:
    """The site's MAILERS where Django reads them (6.1+, instead of EMAIL_BACKEND and EMAIL_*), else None."""
    mailers = getattr(settings, "MAILERS", None)
    if mailers is None or not hasattr(mail, "mailers"):
        return None
    return cast(dict[str, Any], mailers)


def message_id(firing: Firing) -> str:
    """The same Message-ID for every attempt of one firing, so duplicates can be spotted."""
    return f"<notification-{firing.notification.pk}.{firing.firing_id}@{DNS_NAME}>"


class EmailChannel(Channel):
    """Sends with one backend connection per worker thread, opened once per tick."""

    name = "email"

    def __init__(self) -> None:
        self._local = threading.local()
        self._connections: list[BaseEmailBackend] = []
        self._lock = threading.Lock()

    def _connection(self) -> BaseEmailBackend:
        conn: BaseEmailBackend | None = getattr(self._local, "connection", None)
        if conn is None:
            conn = get_connection(fail_silently=False)
            with self._lock:
                self._connections.append(conn)
            conn.open()  # held open: SMTP sends the tick's messages on one session
            self._local.connection = conn
        return conn

    def deliver(self, firing: Firing) -> ChannelResult:
        row = firing.notification
        payload = row.payload if isinstance(row.payload, dict) else {}
        try:
            subject = render(row.subject, payload).replace("\n", " ")
            body = render(row.body, payload)
        except TemplateRenderError as exc:
            # The same template fails the same way next time: no retry can help. The
            # message names the rule broken, never the payload.
            return ChannelResult(self.name, f"email: template error: {exc}", ErrorClass.PERMANENT)
        try:
            message = EmailMessage(
                subject=subject,
                body=body,
                from_email=settings.DEFAULT_FROM_EMAIL,
                to=[row.email_to],
                headers={"Message-ID": message_id(firing)},
                connection=self._connection(),
            )
            sent = message.send()
        except smtplib.SMTPRecipientsRefused:
            return ChannelResult(self.name, "email: SMTPRecipientsRefused", ErrorClass.PERMANENT)
        except smtplib.SMTPResponseException as exc:
            # 5xx replies are final answers; 4xx ask us to come back later.
            klass = ErrorClass.PERMANENT if 500 <= exc.smtp_code < 600 else ErrorClass.TRANSIENT
            return ChannelResult(self.name, f"email: {type(exc).__name__} {exc.smtp_code}", klass)
        except TimeoutError:
            return ChannelResult(self.name, "email: timed out", ErrorClass.TRANSIENT)
        except Exception as exc:  # noqa: BLE001 - any backend's failure is data
            self._drop_connection()
            return ChannelResult(self.name, f"email: {type(exc).__name__}", ErrorClass.TRANSIENT)
        if not sent:
            return ChannelResult(self.name, "email: backend sent nothing", ErrorClass.TRANSIENT)
        return ChannelResult(self.name)

    def _drop_connection(self) -> None:
        # A connection that failed is not reused by this thread.
        conn = getattr(self._local, "connection", None)
        self._local.connection = None
        if conn is not None:
            with contextlib.suppress(Exception):  # closing a broken connection
                conn.close()

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            with contextlib.suppress(Exception):  # closing at the end of a tick
                conn.close()
