"""Webhooks: a signed JSON POST (Standard Webhooks) under a total deadline."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC
from email.utils import parsedate_to_datetime

import requests
from django.core.serializers.json import DjangoJSONEncoder

from .. import signing, transport
from ..conf import app_settings
from .base import Channel, ChannelResult, ErrorClass, Firing

EVENT_TYPE = "notification.fired"


def message_id(firing: Firing) -> str:
    """The `webhook-id`: one per firing, the same for each of its attempts."""
    return f"msg_{firing.firing_id}"


def body(firing: Firing) -> bytes:
    row = firing.notification
    return json.dumps(
        {
            "id": message_id(firing),
            "type": EVENT_TYPE,
            "notification_id": row.pk,
            "fired_at": firing.fired_at.isoformat(),
            "channels": firing.channels,
            "payload": row.payload,
        },
        cls=DjangoJSONEncoder,
        separators=(",", ":"),
    ).encode()


def classify_status(status: int) -> ErrorClass:
    """4xx are the receiver's final word, except 408 and 429 which ask for later."""
    if 400 <= status < 500 and status not in (408, 429):
        return ErrorClass.PERMANENT
    return ErrorClass.TRANSIENT


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds from a `Retry-After` header, given in seconds or as an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    now = time.time() if now is None else now
    return max(when.timestamp() - now, 0.0)


class WebhookChannel(Channel):
    """POSTs with one requests session per worker thread, kept for the tick."""

    name = "webhook"

    def __init__(self) -> None:
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._lock = threading.Lock()
        self._watchdog = transport.Watchdog()
        self.timeout = float(app_settings.CHANNEL_TIMEOUT)
        self.body_limit = int(app_settings.RESPONSE_BODY_LIMIT)
        self.site_keys = [signing.secret_key(s) for s in app_settings.webhook_secrets]

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = transport.new_session()
            with self._lock:
                self._sessions.append(session)
        return session

    def keys(self, firing: Firing) -> list[bytes]:
        secret = firing.notification.webhook_secret
        return [signing.secret_key(secret)] if secret else self.site_keys

    def deliver(self, firing: Firing) -> ChannelResult:
        data = body(firing)
        headers = signing.headers(self.keys(firing), message_id(firing), int(firing.fired_at.timestamp()), data)
        headers["content-type"] = "application/json"
        headers["user-agent"] = "django-notifications-queue"
        with transport.deadline(self.timeout, self._watchdog) as limit:
            try:
                return self._post(firing.notification.webhook_url, data, headers, limit)
            except Exception as exc:  # noqa: BLE001 - mapped to a short error below
                return self._failure(exc, limit)

    def _post(self, url: str, data: bytes, headers: dict, limit: transport.Deadline) -> ChannelResult:
        response = self._session().post(
            url,
            data=data,
            headers=headers,
            timeout=(limit.remaining(), limit.remaining()),
            allow_redirects=False,
            stream=True,
        )
        try:
            self._drain(response)
        finally:
            response.close()
        status = response.status_code
        if 200 <= status < 300:
            return ChannelResult(self.name, http_status=status)
        retry_after = None
        if status in (429, 503):
            retry_after = parse_retry_after(response.headers.get("retry-after"))
        error = f"webhook: HTTP {status}"
        if 300 <= status < 400:
            error += " (redirects are not followed)"
        return ChannelResult(self.name, error, classify_status(status), http_status=status, retry_after=retry_after)

    def _drain(self, response: requests.Response) -> None:
        """Read the body up to the cap; a fully read body frees the connection for reuse."""
        read = 0
        while read <= self.body_limit:
            chunk = response.raw.read(8192, decode_content=False)
            if not chunk:
                response.raw.release_conn()
                response._content_consumed = True  # close() keeps the pooled connection
                return
            read += len(chunk)
        # Over the cap: stop reading; close() drops the connection.

    def _failure(self, exc: Exception, limit: transport.Deadline) -> ChannelResult:
        if limit.expired or isinstance(exc, requests.Timeout):
            return ChannelResult(self.name, f"webhook: timed out after {self.timeout:g}s", ErrorClass.TRANSIENT)
        if isinstance(
            exc,
            (
                requests.exceptions.InvalidURL,
                requests.exceptions.MissingSchema,
                requests.exceptions.InvalidSchema,
                requests.exceptions.URLRequired,
            ),
        ):
            return ChannelResult(self.name, "webhook: malformed URL", ErrorClass.PERMANENT)
        text = str(exc).lower()
        if "refused" in text:
            error = "webhook: connection refused"
        elif "reset" in text or "aborted" in text:
            error = "webhook: connection reset"
        elif "name or service not known" in text or "nodename nor servname" in text or "resolve" in text:
            error = "webhook: host not found"
        elif isinstance(exc, requests.exceptions.SSLError):
            error = "webhook: TLS error"
        elif isinstance(exc, requests.ConnectionError):
            error = "webhook: connection error"
        else:
            error = f"webhook: {type(exc).__name__}"
        return ChannelResult(self.name, error, ErrorClass.TRANSIENT)

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.close()
        self._watchdog.close()
