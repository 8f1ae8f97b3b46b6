"""Webhooks: a signed JSON POST (Standard Webhooks) under a total deadline.

Sent through libcurl (`notifications.channels.http.curl`: the reason is there), or through
requests when a host project's tests replace requests' sending (`responses`) or the test
double of `notifications.testing` answers instead (`new_client` returns None then).
"""

from __future__ import annotations

import binascii
import functools
import http.client
import logging
import socket
import ssl
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import requests
import urllib3.exceptions
from django.core.serializers.json import DjangoJSONEncoder

from notifications import compat
from notifications.channels.base import Channel, ChannelAnswers, ChannelResult, ErrorClass, Firing
from notifications.channels.http import curl, guard, transport
from notifications.channels.http.statuses import RETRY_LATER_STATUSES as RETRY_LATER_STATUSES
from notifications.channels.http.statuses import classify_status, parse_retry_after
from notifications.channels.webhook import row_errors
from notifications.channels.webhook.answers import EVENT_TYPE as EVENT_TYPE
from notifications.channels.webhook.answers import WebhookAnswers
from notifications.conf import TickSettings
from notifications.rules import signing
from notifications.rules.secrets import secret_errors

DIGEST_EVENT_TYPE = "notification.digest"  # one firing for the rows of a digest
BLOCKED = "webhook: blocked address"
MALFORMED_URL = "webhook: malformed URL"
USER_AGENT = "django-notification-queue"  # the distribution's name
# Headers every POST carries beside the signature and the length.
STATIC_HEADERS = {"content-type": "application/json", "user-agent": USER_AGENT}
# Bytes read from a response body at a time; RESPONSE_BODY_LIMIT is checked between reads.
READ_CHUNK = 8192
# Answers whose Retry-After header is honoured (Too Many Requests, Service Unavailable).
RETRY_AFTER_STATUSES = (429, 503)
# Distinct webhook URLs whose prepared form (IDNA host, quoted path) is remembered: a
# burst sends many rows to few URLs, and preparing one is most of requests' own work.
PREPARED_URLS = 1024

logger = logging.getLogger("notifications.webhook")

# Exceptions that say the URL itself is unusable: no retry can help.
_MALFORMED = (
    requests.exceptions.InvalidURL,
    requests.exceptions.MissingSchema,
    requests.exceptions.InvalidSchema,
    requests.exceptions.URLRequired,
    urllib3.exceptions.LocationValueError,  # includes LocationParseError
    UnicodeError,  # a host name IDNA cannot encode
)


def message_id(firing: Firing) -> str:
    """The `webhook-id`: one per firing, the same for each of its attempts."""
    return f"msg_{firing.firing_id}"


# One encoder for every body (thread-safe: encoding reads its options, never changes them).
_ENCODER = DjangoJSONEncoder(separators=(",", ":"))


def body(firing: Firing) -> bytes:
    """The JSON body of one attempt: compact, as the payload limit measures it."""
    row = firing.notification
    content = {
        "id": message_id(firing),
        "type": EVENT_TYPE,
        "notification_id": row.pk,
        "fired_at": firing.fired_at.isoformat(),
        "channels": firing.channels,
        "payload": row.payload,
    }
    if firing.is_digest:
        content.update(digest_fields(firing))
    return _ENCODER.encode(content).encode()


def digest_fields(firing: Firing) -> dict[str, object]:
    """What a digest's body adds: its rows' payloads (`items`, oldest first) and ids."""
    row = firing.notification
    return {
        "type": DIGEST_EVENT_TYPE,
        "recipient": row.recipient,
        "digest_key": row.digest_key,
        "items": firing.items,
        "count": len(firing.rows),
        "notification_ids": [each.pk for each in firing.rows],
    }


@functools.lru_cache(maxsize=PREPARED_URLS)
def prepared_url(url: str) -> str:
    """`url` as requests sends it; raises what requests raises for an unusable one."""
    request = requests.PreparedRequest()
    request.prepare_url(url, None)
    prepared = str(request.url)
    if not prepared.lower().startswith(("http://", "https://")):  # what a Session would find no adapter for
        raise requests.exceptions.InvalidSchema("only http and https URLs are sent")
    return prepared


def prepared_request(url: str, data: bytes, headers: dict[str, str]) -> requests.PreparedRequest:
    """A POST ready for `HTTPAdapter.send`, built without a Session (cookies, proxies, hooks).

    `headers` stay the plain dict they are (urllib3 takes one as it is; a requests
    `CaseInsensitiveDict` is built, copied and iterated once more per send): so the
    length must be spelled `Content-Length`, as the adapter looks it up (else the body
    would go chunked).
    """
    request = requests.PreparedRequest()
    request.method = "POST"
    request.url = prepared_url(url)
    request.headers = headers  # type: ignore[assignment]
    request.body = data
    return request


def new_client(settings: TickSettings) -> curl.CurlClient | None:
    """The client a tick's webhooks go through: libcurl, or None for requests (when requests'
    sending is replaced, so that a host project's mock sees every webhook)."""
    if transport.requests_replaced():
        return None
    # Connections: one per send in flight, and as many idle ones for the sends that follow.
    connections = 2 * settings.concurrency
    return curl.CurlClient(
        allowed=settings.allowed_networks, body_limit=settings.response_body_limit, connections=connections
    )


class WebhookChannel(WebhookAnswers, Channel):
    """POSTs through one client shared by the tick's worker threads (`new_client`).

    `settings` is the tick's snapshot (default: the settings as they are now): the
    deadline, the body cap, the site's secrets, the allowed networks and the pool sizes
    (connections per host as the per-target cap) come from it.
    """

    def __init__(self, settings: TickSettings | None = None) -> None:
        settings = settings or TickSettings.read()
        self.options = {}
        self._client = new_client(settings)
        self.asynchronous = self._client is not None  # libcurl's loop sends without a thread each
        # requests' path, when `new_client` gives none: adapters build nothing until used.
        self._adapter = transport.new_adapter(hosts=settings.concurrency, per_host=settings.target_concurrency)
        self._watchdog = transport.Watchdog()
        self.timeout = settings.channel_timeout
        self.body_limit = settings.response_body_limit
        self.allowed_networks = settings.allowed_networks
        self.site_keys, self.site_key_error = _site_keys(settings.webhook_secrets)

    @classmethod
    def open(cls, name: str, options: dict[str, Any], settings: TickSettings | None = None) -> Channel:
        """The tick's snapshot of the settings configures the transport (no OPTIONS)."""
        channel = cls(settings)
        channel.name = name
        return channel

    @classmethod
    def stateless(cls, name: str, options: dict[str, Any]) -> ChannelAnswers:
        """Its rules alone: no adapter, no watchdog, no settings read."""
        answers = WebhookAnswers()
        answers.name = name
        return answers

    def keys(self, firing: Firing) -> list[bytes]:
        """The row's own key, else every site key (all of them sign during a rotation)."""
        secret = firing.notification.webhook_secret
        return [signing.secret_key(secret)] if secret else self.site_keys

    def describe(self, firing: Firing) -> tuple[str, str]:
        """The receiver's host (never the URL's path, query or credentials) and the event type."""
        return firing.targets.get(self.name, ""), EVENT_TYPE

    def deliver(self, firing: Firing) -> ChannelResult:
        request = self._request(firing)
        if isinstance(request, ChannelResult):
            return request
        url, data, headers = request
        if self._client is not None:
            try:
                answer = self._client.post(prepared_url(url), data, _header_lines(headers), self.timeout)
            except Exception as exc:  # noqa: BLE001 - mapped to a short error below
                return self._failure(exc, expired=False)
            return self._answered(answer.status, answer.retry_after)
        headers["Content-Length"] = str(len(data))  # as `prepared_request` needs it spelled
        with transport.deadline(self.timeout, self._watchdog, self.allowed_networks) as limit:
            try:
                result = self._post(url, data, headers, limit)
            except Exception as exc:  # noqa: BLE001 - mapped to a short error below
                return self._failure(exc, limit.expired)
            if limit.finish():
                # The watchdog shut the socket mid-response: the EOF it caused ends a
                # dripped header block or a length-less body, so what parsed as a 2xx
                # is a truncated answer, not a success inside the deadline.
                return self._failure(TimeoutError(), expired=True)
            return result

    def begin(self, firing: Firing, done: Callable[[ChannelResult], None]) -> None:
        """The send through libcurl's loop (`asynchronous` when there is a client): `done`
        is called from the loop's thread with the answer, or here at once for a row that
        cannot be sent or a name the guard refuses."""
        assert self._client is not None
        request = self._request(firing)
        if isinstance(request, ChannelResult):
            done(request)
            return
        url, data, headers = request

        def answered(answer: curl.Answer | BaseException) -> None:
            if isinstance(answer, BaseException):
                done(self._failure(answer, expired=False))
            else:
                done(self._answered(answer.status, answer.retry_after))

        try:
            self._client.begin(prepared_url(url), data, _header_lines(headers), self.timeout, answered)
        except Exception as exc:  # noqa: BLE001 - refused or unknown name, malformed URL: mapped below
            done(self._failure(exc, expired=False))

    def _request(self, firing: Firing) -> tuple[str, bytes, dict[str, str]] | ChannelResult:
        """The URL, body and headers of `firing`'s POST, or the result of a row that cannot be sent."""
        url = firing.notification.webhook_url
        if row_errors.url_errors(url):  # the save rule again: raw SQL can store any URL
            return ChannelResult(self.name, MALFORMED_URL, ErrorClass.PERMANENT)
        try:
            keys = self.keys(firing)
        except (binascii.Error, ValueError):
            # Validation refuses such a row secret; one can only come from raw SQL.
            return ChannelResult(self.name, "webhook: malformed webhook_secret", ErrorClass.PERMANENT)
        if not firing.notification.webhook_secret and self.site_key_error:
            # A settings problem: fixing the setting makes the next attempt work.
            return ChannelResult(self.name, self.site_key_error, ErrorClass.TRANSIENT)
        if not keys:
            return ChannelResult(self.name, "webhook: no signing secret configured", ErrorClass.TRANSIENT)
        data = body(firing)
        headers = signing.headers(keys, message_id(firing), int(firing.fired_at.timestamp()), data)
        headers.update(STATIC_HEADERS)
        return url, data, headers

    def _post(self, url: str, data: bytes, headers: dict[str, str], limit: transport.Deadline) -> ChannelResult:
        # Straight to the adapter: it never follows a redirect (a Session would).
        response = self._adapter.send(
            prepared_request(url, data, headers),
            stream=True,
            timeout=(limit.remaining(), limit.remaining()),
        )
        try:
            self._drain(response)
        finally:
            response.close()
        status = response.status_code
        return self._answered(status, parse_retry_after(response.headers.get("retry-after")))

    def _answered(self, status: int, retry_after: float | None) -> ChannelResult:
        """The result of an answer: a 2xx succeeds; otherwise its status's class, and how
        long a 429 or 503 asked to wait."""
        if 200 <= status < 300:
            return ChannelResult(self.name, http_status=status)
        if status not in RETRY_AFTER_STATUSES:
            retry_after = None
        error = f"webhook: HTTP {status}"
        if 300 <= status < 400:
            error += " (redirects are not followed)"
        return ChannelResult(self.name, error, classify_status(status), http_status=status, retry_after=retry_after)

    def _drain(self, response: requests.Response) -> None:
        """Read the body up to the cap; a fully read body frees the connection for reuse."""
        read = 0
        while read <= self.body_limit:
            chunk = response.raw.read(READ_CHUNK, decode_content=False)
            # A body of known length ends with its last byte: no read for the end of it
            # (http.client has closed its response by then, so the connection is reusable).
            if not chunk or response.raw.length_remaining == 0:
                response.raw.release_conn()
                compat.mark_body_read(response)  # close() keeps the pooled connection
                return
            read += len(chunk)
        # Over the cap: stop reading; close() drops the connection.

    def _timed_out(self) -> str:
        return f"webhook: timed out after {self.timeout:g}s"

    def _failure(self, exc: BaseException, expired: bool) -> ChannelResult:
        """A short error and its class for an exception of one send. Never echoes the URL."""
        causes = list(_chain(exc))
        blocked = next((c for c in causes if isinstance(c, guard.BlockedAddress)), None)
        if blocked is not None:
            logger.info("webhook refused: %s", blocked)
            return ChannelResult(self.name, BLOCKED, ErrorClass.PERMANENT)
        if expired or any(isinstance(c, (requests.Timeout, guard.ResolutionTimeout, TimeoutError)) for c in causes):
            return ChannelResult(self.name, self._timed_out(), ErrorClass.TRANSIENT)
        if any(isinstance(c, _MALFORMED) for c in causes):
            return ChannelResult(self.name, MALFORMED_URL, ErrorClass.PERMANENT)
        if any(isinstance(c, ConnectionRefusedError) for c in causes):
            error = "webhook: connection refused"
        elif any(isinstance(c, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)) for c in causes):
            error = "webhook: connection reset"
        elif any(isinstance(c, (urllib3.exceptions.NameResolutionError, socket.gaierror)) for c in causes):
            error = "webhook: host not found"
        elif any(isinstance(c, (requests.exceptions.SSLError, ssl.SSLError)) for c in causes):
            error = "webhook: TLS error"
        elif any(isinstance(c, (http.client.RemoteDisconnected, urllib3.exceptions.ProtocolError)) for c in causes):
            error = "webhook: connection closed without a response"
        elif isinstance(exc, requests.ConnectionError):
            error = "webhook: connection error"
        else:
            error = f"webhook: {type(exc).__name__}"
        return ChannelResult(self.name, error, ErrorClass.TRANSIENT)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        self._adapter.close()
        self._watchdog.close()


def _header_lines(headers: dict[str, str]) -> list[str]:
    """`headers` as libcurl takes them, with no 100-continue round trip for a large body."""
    lines = [f"{name}: {value}" for name, value in headers.items()]
    lines.append("Expect:")
    return lines


def _site_keys(secrets: Sequence[str] | None) -> tuple[list[bytes], str | None]:
    """The site's signing keys, or the error to report when the setting is malformed.

    `secrets` as the settings snapshot has them: None when NOTIFICATIONS_WEBHOOK_SECRET
    is not a string or a list of strings.

    `manage.py check` reports a malformed NOTIFICATIONS_WEBHOOK_SECRET (E009/E010);
    here it must not crash the tick, and the error must not echo the value.
    """
    malformed = "webhook: NOTIFICATIONS_WEBHOOK_SECRET is malformed"
    try:
        if secrets is None:
            return [], malformed
        # The rule validation applies to a row's secret: a lenient decode would turn a
        # typo into a different, shorter key that no receiver has.
        if any(secret_errors(s) for s in secrets):
            return [], malformed
        return [signing.secret_key(s) for s in secrets], None
    except (binascii.Error, ValueError, TypeError, AttributeError):
        return [], malformed


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """`exc` and what caused it (requests wraps urllib3, which wraps socket errors)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        # urllib3 tucks the socket error into an argument (ProtocolError) or `reason`.
        inner = [a for a in exc.args if isinstance(a, BaseException)]
        if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
            inner.append(exc.reason)
        exc = inner[0] if inner else exc.__cause__ or exc.__context__
