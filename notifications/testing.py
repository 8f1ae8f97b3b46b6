"""A test double for host projects: run ticks in your tests with no network and no mail server.

    from notifications.api import schedule
    from notifications.testing import capture_notifications

    def test_signup_schedules_a_welcome_webhook(db):
        with capture_notifications() as captured:
            sign_up("ada@example.com")          # your code calls schedule(...)
            report = captured.tick()            # one tick, synchronously
        assert report.counts()["succeeded"] == 1
        assert captured.webhooks[0].payload == {"event": "signup", "email": "ada@example.com"}

Inside the block every webhook the app sends is answered by the double (200 unless
`respond()` says otherwise) and recorded, signed exactly as it would go out; every
email (the app's and your own code's) goes to a local-memory backend and is recorded
too; every send of a site's own channel (NOTIFICATIONS_CHANNELS, Apprise among them) is
recorded in `sends` and succeeds unless `fail()` says otherwise. The rows, claims,
retries and dead letters are the real ones in your test database, so a test can follow
a notification through its whole life.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from unittest import mock

import requests
from django.core import mail
from django.core.mail import EmailMessage
from django.core.mail.backends import locmem
from django.test.utils import override_settings
from requests.adapters import HTTPAdapter
from urllib3.response import HTTPResponse

from notifications.channels import Channel, ChannelResult, ErrorClass, Firing, registry
from notifications.channels.email.channel import site_mailers
from notifications.channels.http import transport
from notifications.channels.webhook import channel as webhook_channel
from notifications.conf import TickSettings, app_settings
from notifications.receiving import signature_matches
from notifications.rules import signing
from notifications.tick.engine import TickReport, run_tick

__all__ = ["Capture", "CapturedSend", "CapturedWebhook", "EmailBackend", "capture_notifications"]


@dataclass(frozen=True)
class CapturedWebhook:
    """One webhook POST as it would have gone out."""

    url: str
    headers: dict[str, str]  # lower-case names
    body: bytes

    @property
    def json(self) -> dict[str, Any]:
        """The decoded body: `id`, `type`, `notification_id`, `fired_at`, `channels`, `payload`."""
        event: dict[str, Any] = json.loads(self.body)
        return event

    @property
    def payload(self) -> Any:
        """The row's `payload`, as the receiver gets it."""
        return self.json["payload"]

    @property
    def message_id(self) -> str:
        """The `webhook-id` header: the same for every attempt of one firing."""
        return self.headers["webhook-id"]

    def verify(self, secret: str | None = None) -> bool:
        """Whether the Standard Webhooks signature matches `secret` (default: the site's secrets)."""
        keys = [signing.secret_key(s) for s in ([secret] if secret else app_settings.webhook_secrets)]
        timestamp = int(self.headers["webhook-timestamp"])
        return signature_matches(keys, self.message_id, timestamp, self.body, self.headers["webhook-signature"])


@dataclass(frozen=True)
class CapturedSend:
    """One send of a site's own channel, as the channel would have made it."""

    channel: str
    firing: Firing

    @property
    def notification(self) -> Any:
        """The row sent."""
        return self.firing.notification

    @property
    def data(self) -> Any:
        """The row's `channel_data` entry for this channel (`{"to": ...}`), or None."""
        data = self.firing.notification.channel_data
        return data.get(self.channel) if isinstance(data, dict) else None


@dataclass
class Reply:
    """How the double answers a webhook: a status (and body, headers), or an exception."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    exception: BaseException | None = None


class Capture:
    """What was sent inside `capture_notifications()`, and the controls of the double."""

    def __init__(self) -> None:
        self.webhooks: list[CapturedWebhook] = []
        self.emails: list[EmailMessage] = []
        self.sends: list[CapturedSend] = []
        self._failures: dict[str, tuple[str, ErrorClass]] = {}
        self._default = Reply()
        self._replies: dict[str, Reply] = {}
        self._lock = threading.Lock()

    def respond(
        self,
        status: int = 200,
        *,
        url: str | None = None,
        body: bytes | str = b"",
        headers: dict[str, str] | None = None,
        exception: BaseException | None = None,
    ) -> None:
        """Answer webhooks to `url` (or, without it, every URL) with `status`, or raise `exception`.

        `respond(503)` makes every webhook fail so the row retries; `respond(410)` makes it
        a permanent failure (dead letter at once); `respond(exception=requests.ConnectTimeout())`
        looks like an endpoint that never answers. `body` is bytes, or a str sent as UTF-8;
        anything else is a TypeError here, not a failed delivery later.
        """
        if isinstance(body, str):
            body = body.encode()
        elif isinstance(body, (bytearray, memoryview)):
            body = bytes(body)
        elif not isinstance(body, bytes):
            raise TypeError(f"respond(body=...) must be bytes or str, not {type(body).__name__}")
        reply = Reply(status, body, dict(headers or {}), exception)
        with self._lock:
            if url is None:
                self._default = reply
            else:
                self._replies[url] = reply

    def fail(self, channel: str, error: str | None = "", *, permanent: bool = False) -> None:
        """Make every send of the site channel `channel` fail from now on, transiently (a
        retry follows) or `permanent`ly (a dead letter); `error` defaults to
        `"<channel>: failed"`. `fail(channel, None)` makes it succeed again."""
        with self._lock:
            if error is None:
                self._failures.pop(channel, None)
            else:
                kind = ErrorClass.PERMANENT if permanent else ErrorClass.TRANSIENT
                self._failures[channel] = (error or f"{channel}: failed", kind)

    def sent(self, channel: str) -> list[CapturedSend]:
        """The recorded sends of the site channel `channel`, oldest first."""
        with self._lock:
            return [send for send in self.sends if send.channel == channel]

    def tick(self, *, now: datetime | None = None, limit: int | None = None) -> TickReport:
        """Run one tick now, in this thread, and return its report.

        Pass `now` to tick at another time, e.g. after a retry's backoff has passed.
        """
        return run_tick(now=now, limit=limit)

    def clear(self) -> None:
        """Forget what was captured so far."""
        with self._lock:
            self.webhooks.clear()
            self.emails.clear()
            self.sends.clear()

    def _record_webhook(self, request: requests.PreparedRequest) -> Reply:
        body = request.body or b""
        captured = CapturedWebhook(
            url=request.url or "",
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body.encode() if isinstance(body, str) else body,
        )
        with self._lock:
            self.webhooks.append(captured)
            return self._replies.get(captured.url, self._default)

    def _record_send(self, channel: str, firing: Firing) -> ChannelResult:
        with self._lock:
            self.sends.append(CapturedSend(channel, firing))
            failure = self._failures.get(channel)
        if failure is None:
            return ChannelResult(channel)
        return ChannelResult(channel, error=failure[0], error_class=failure[1])

    def _record_email(self, message: EmailMessage) -> None:
        with self._lock:
            self.emails.append(message)


class CaptureAdapter(HTTPAdapter):
    """A requests adapter that answers from the capture instead of opening a socket."""

    def __init__(self, capture: Capture) -> None:
        super().__init__()
        self.capture = capture

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        reply = self.capture._record_webhook(request)
        if reply.exception is not None:
            raise reply.exception
        raw = HTTPResponse(
            body=io.BytesIO(reply.body),
            headers={"content-length": str(len(reply.body)), **reply.headers},
            status=reply.status,
            preload_content=False,
            decode_content=False,
        )
        return self.build_response(request, raw)


class CapturedChannel(Channel):
    """Stands in for a site channel during a capture: records each send, sends nothing."""

    def __init__(self, capture: Capture, **options: Any) -> None:
        super().__init__(**options)
        self.capture = capture

    def deliver(self, firing: Firing) -> ChannelResult:
        return self.capture._record_send(self.name, firing)


def _site_channels_to(capture: Capture) -> Any:
    """`registry.open_for_tick` with every site channel replaced by a `CapturedChannel`."""
    real = registry.open_for_tick

    def open_for_tick(settings: TickSettings) -> dict[str, Channel]:
        opened = real(settings)
        for name, channel in opened.items():
            if not registry.is_built_in(name):
                stand_in = CapturedChannel(capture, **channel.options)
                stand_in.name, stand_in.timeout = name, channel.timeout
                opened[name] = stand_in
        return opened

    return mock.patch.object(registry, "open_for_tick", open_for_tick)


_active: list[Capture] = []
_active_lock = threading.Lock()


class EmailBackend(locmem.EmailBackend):
    """Django's local-memory backend (`mail.outbox`), also recording into every active capture."""

    def send_messages(self, email_messages: Any) -> int:
        sent = super().send_messages(email_messages)
        with _active_lock:
            captures = list(_active)
        for message in email_messages:
            for capture in captures:
                capture._record_email(message)
        return sent


def _email_to_capture() -> override_settings:
    """Route the site's mail to EmailBackend: every mailer on Django 6.1+ (a site still on
    the deprecated EMAIL_* settings gets a default one; setting EMAIL_BACKEND there would
    warn), else EMAIL_BACKEND."""
    backend = f"{__name__}.EmailBackend"
    if hasattr(mail, "mailers"):
        aliases = site_mailers() or {"default": {}}
        return override_settings(MAILERS={alias: {"BACKEND": backend} for alias in aliases})
    return override_settings(EMAIL_BACKEND=backend)


@contextmanager
def capture_notifications() -> Iterator[Capture]:
    """Capture every webhook and email sent inside the block; nothing leaves the process.

    Webhooks are answered 200 unless `Capture.respond()` says otherwise; emails go to
    `Capture.emails` (and Django's `mail.outbox`). `Capture.tick()` runs a tick.
    """
    capture = Capture()

    def adapter(hosts: int, per_host: int) -> HTTPAdapter:
        return CaptureAdapter(capture)

    with _active_lock:
        _active.append(capture)
    try:
        with (
            _email_to_capture(),
            mock.patch.object(webhook_channel, "new_client", lambda settings: None),  # through the adapter
            mock.patch.object(transport, "new_adapter", adapter),
            _site_channels_to(capture),
        ):
            yield capture
    finally:
        with _active_lock:
            _active.remove(capture)
