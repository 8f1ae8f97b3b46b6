"""What mail servers and providers answer: failures classed, refusals per recipient, idempotency keys.

django-anymail is optional: without it, only its part here is idle.
"""

from __future__ import annotations

import contextlib
import json
import re
import smtplib
import socket
from collections.abc import Iterator
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import requests
from django.core.mail import EmailMessage
from django.core.mail.backends.base import BaseEmailBackend

from notifications.channels.base import ChannelResult, ErrorClass
from notifications.channels.http.statuses import classify_status, parse_retry_after
from notifications.models.addresses import is_address, mailbox

# Providers that de-duplicate sends on a key, by anymail's `esp_name`, and how the key
# travels. Resend: the `Idempotency-Key` HTTP header of the API request (kept 24 hours).
# Brevo: `idempotencyKey` among the message's headers in the API request (kept 15
# minutes). Others offer no such key: a retry after a stall may deliver twice there,
# with the same Message-ID.
IDEMPOTENCY_HTTP_HEADER = {"Resend": "Idempotency-Key"}
IDEMPOTENCY_MESSAGE_HEADER = {"Brevo": "idempotencyKey"}

REASON_CHARS = 120  # of a provider's own words in `last_error`
ERROR_CHARS = 400  # of a whole `email: ...` error: one recipient's answer or several
# Statuses anymail gives recipients a provider refused outright.
REFUSED_STATUSES = frozenset({"rejected", "invalid"})
# SMTP replies 500-599 to RCPT are final: the address is suppressed. Elsewhere see
# `refuses_the_message`.
PERMANENT_SMTP = range(500, 600)
# SMTP replies 400-499 to RCPT ask to come back later for that recipient.
TEMPORARY_SMTP = range(400, 500)


def anymail_exceptions() -> ModuleType | None:
    """anymail.exceptions when django-anymail is installed, else None."""
    try:
        from anymail import exceptions
    except ImportError:
        return None
    module: ModuleType = exceptions
    return module


# --- failures ------------------------------------------------------------------------------


def failure(exc: Exception, conn: BaseEmailBackend | None) -> ChannelResult:
    """A short, classed error for any exception a mail backend raised, keeping what the
    server or provider said: the SMTP code and text, the host and port that refused a
    connection, the provider's HTTP status and reason."""
    if _timed_out(exc):
        timeout = getattr(conn, "timeout", None)
        after = f" after {timeout:g}s" if isinstance(timeout, int | float) and not isinstance(timeout, bool) else ""
        return ChannelResult("email", f"email: timed out{after}", ErrorClass.TRANSIENT)
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return _recipients_refused(exc)
    if isinstance(exc, smtplib.SMTPResponseException):
        klass = ErrorClass.PERMANENT if refuses_the_message(exc) else ErrorClass.TRANSIENT
        return ChannelResult("email", clip(f"email: {smtp_answer(exc.smtp_code, exc.smtp_error)}"), klass)
    exceptions = anymail_exceptions()
    if exceptions is not None and isinstance(exc, exceptions.AnymailError):
        return _anymail_failure(exc, exceptions)
    unreachable = connection_failure(exc, conn)
    if unreachable is not None:
        return ChannelResult("email", unreachable, ErrorClass.TRANSIENT)
    return ChannelResult("email", f"email: {_name(exc)}", ErrorClass.TRANSIENT)


# An SMTP reply's enhanced status code (RFC 3463) at the start of its text: `5.1.1`.
_ENHANCED = re.compile(r"^([245]\.\d{1,3}\.\d{1,3})\s+")


# What of an SMTP reply to MAIL FROM or DATA is about the message itself, not about the
# site: RFC 3463 subject.detail pairs, any detail of subject 6 (content, media), and the
# basic 552 when no enhanced code says otherwise.
_MESSAGE_TOO_BIG = frozenset({(3, 4), (2, 3)})  # too big for the system; over a length limit
_MESSAGE_CONTENT = 6
_STORAGE_EXCEEDED = 552  # RFC 5321 "exceeded storage allocation": the message's size


def refuses_the_message(exc: smtplib.SMTPResponseException) -> bool:
    """Whether a reply refuses this message for good: a 5xx to MAIL FROM (smtplib announces
    the size there) or to DATA saying the message is too big or its content unacceptable.
    The same message fails the same way again.

    Every other reply is transient for the `email` target, 5xx included: a refused login
    (535), a greeting or HELO refused, a sender the server will not take (550 5.7.1, 553),
    a policy block. They are about the site's own connection, credentials or sender, not
    this message or its recipients: retried with backoff, counted by the circuit breaker,
    and fixed on the site's side. (A refused recipient is `SMTPRecipientsRefused`.)
    """
    if exc.smtp_code not in PERMANENT_SMTP:
        return False
    if not isinstance(exc, smtplib.SMTPSenderRefused | smtplib.SMTPDataError):
        return False
    text = exc.smtp_error.decode(errors="replace") if isinstance(exc.smtp_error, bytes) else str(exc.smtp_error)
    enhanced = _ENHANCED.match(text.strip())
    if enhanced is None:
        return exc.smtp_code == _STORAGE_EXCEEDED
    _, subject, detail = (int(part) for part in enhanced.group(1).split("."))
    return subject == _MESSAGE_CONTENT or (subject, detail) in _MESSAGE_TOO_BIG


def clip(error: str) -> str:
    """At most ERROR_CHARS of an error, on one line."""
    error = " ".join(error.split())
    return error[: ERROR_CHARS - 1] + "…" if len(error) > ERROR_CHARS else error


def smtp_answer(code: int, text: bytes | str, address: str | None = None) -> str:
    """`550 5.1.1 <ada@example.com>: No such user here`: an SMTP reply as the server gave it,
    one line, with the recipient it was about when the server's words do not name it."""
    said = text.decode(errors="replace") if isinstance(text, bytes) else str(text)
    said = " ".join(said.split())
    if address and address.lower() not in said.lower():
        enhanced = _ENHANCED.match(said)
        if enhanced:
            said = f"{enhanced.group(1)} <{address}>: {said[enhanced.end() :]}"
        else:
            said = f"<{address}>: {said}" if said else f"<{address}>"
    return f"{code} {said}".rstrip()


# Exceptions (anywhere in the chain) meaning nothing answered at the far end, as said.
_UNREACHABLE: tuple[tuple[type[BaseException], str, str], ...] = (
    (ConnectionRefusedError, "connection refused", "by"),
    (ConnectionResetError, "connection reset", "by"),
    (smtplib.SMTPServerDisconnected, "connection closed", "by"),
    (socket.gaierror, "host not found", "for"),
    (ConnectionError, "cannot connect", "to"),
)


def connection_failure(exc: BaseException, conn: BaseEmailBackend | None) -> str | None:
    """`email: connection refused by 127.0.0.1:2525`: a failure to reach the mail server or
    the provider's API, naming the host and port tried (never a URL's path or query), or
    None when `exc` is something else."""
    causes = list(_chain(exc))
    for kind, words, preposition in _UNREACHABLE:
        if any(isinstance(cause, kind) for cause in causes):
            where = _endpoint(causes, conn)
            return f"email: {words} {preposition} {where}" if where else f"email: {words}"
    return None


def _endpoint(causes: list[BaseException], conn: BaseEmailBackend | None) -> str:
    """`host:port` of the SMTP server (the backend's own settings) or the API (the URL of
    the request that failed)."""
    for cause in causes:
        request = getattr(cause, "request", None)
        url = getattr(request, "url", None)
        if isinstance(url, str):
            with contextlib.suppress(ValueError):
                parts = urlsplit(url)
                if parts.hostname:
                    url_port = parts.port or (443 if parts.scheme == "https" else 80)
                    return f"{parts.hostname}:{url_port}"
    host, port = getattr(conn, "host", None), getattr(conn, "port", None)
    if isinstance(host, str) and host and isinstance(port, int):
        return f"{host}:{port}"
    return ""


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _timed_out(exc: BaseException) -> bool:
    """A timeout anywhere in the chain: smtplib reports its socket's own timeout as
    `SMTPServerDisconnected("Connection unexpectedly closed: timed out")`, anymail a
    requests timeout as AnymailRequestsAPIError."""
    return any(isinstance(cause, TimeoutError | requests.Timeout) for cause in _chain(exc))


def _recipients_refused(exc: smtplib.SMTPRecipientsRefused) -> ChannelResult:
    """Every recipient refused: permanent when every refusal is (5xx); the 5xx ones are
    suppressed. The error keeps each answer: `email: 550 5.1.1 <a@b>: No such user; 451 ...`."""
    refusals = {address: answer for address, answer in by_address(exc.recipients).items() if isinstance(answer, tuple)}
    refused = smtp_refusals(refusals)
    codes = sorted({code for code, _ in refusals.values()})
    klass = ErrorClass.PERMANENT if codes and all(code in PERMANENT_SMTP for code in codes) else ErrorClass.TRANSIENT
    answers = "; ".join(smtp_answer(code, text, address) for address, (code, text) in refusals.items())
    # A refusal per recipient is the server's answer about them (greylisting, a full
    # mailbox), not a sign that it is down: `answered`.
    return ChannelResult(
        "email", clip(f"email: {answers or 'recipients refused'}"), klass, refused=refused, answered=bool(codes)
    )


def _anymail_failure(exc: Exception, exceptions: ModuleType) -> ChannelResult:
    message = getattr(exc, "email_message", None)
    esp = getattr(exc, "esp_name", None)
    response = getattr(exc, "response", None)
    status = getattr(exc, "status_code", None)
    if not isinstance(status, int):
        status = getattr(response, "status_code", None)
    http = f"HTTP {status} " if isinstance(status, int) and not 200 <= status < 300 else ""
    if isinstance(exc, exceptions.AnymailRecipientsRefused):
        refused = provider_refusals(message, esp)
        reason = provider_reason(response, secret=_api_key(exc))
        named = ", ".join(f"{address} ({why.rsplit(': ', 1)[-1]})" for address, why in refused)
        words = "all recipients rejected by the provider" + (f": {named}" if named else "")
        return ChannelResult(
            "email",
            clip(f"email: {http}{words}" + (f": {reason}" if reason else "")),
            ErrorClass.PERMANENT,
            http_status=status if isinstance(status, int) else None,
            refused=refused,
        )
    if isinstance(exc, exceptions.AnymailAPIError) and isinstance(status, int):
        return http_failure(status, response, secret=_api_key(exc))
    unreachable = connection_failure(exc, None)
    if unreachable is not None:
        return ChannelResult("email", unreachable, ErrorClass.TRANSIENT)
    # An address anymail cannot parse, a feature the provider lacks, data it cannot
    # serialize: the same message fails the same way again.
    if isinstance(exc, ValueError | TypeError):
        return ChannelResult("email", f"email: {_name(exc)}", ErrorClass.PERMANENT)
    return ChannelResult("email", f"email: {_name(exc)}", ErrorClass.TRANSIENT)


def http_failure(status: int, response: Any, secret: Any = None) -> ChannelResult:
    """`email: HTTP 422 <the provider's reason>`, classed by its status."""
    reason = provider_reason(response, secret=secret)
    retry_after = parse_retry_after(_header(response, "retry-after")) if status in (429, 503) else None
    return ChannelResult(
        "email",
        f"email: HTTP {status}" + (f" {reason}" if reason else ""),
        classify_status(status),
        http_status=status,
        retry_after=retry_after,
    )


def _api_key(exc: Exception) -> Any:
    return getattr(getattr(exc, "backend", None), "api_key", None)


def unsent_answer(message: EmailMessage, conn: BaseEmailBackend) -> ChannelResult | None:
    """The failure a provider's error answer means, when anymail returned without raising.

    anymail reads some error answers as per-recipient statuses rather than raising: a
    Postmark 422 about a malformed `To` leaves the recipient `unknown` (and an "invalid"
    status on text that is no address). Nothing was sent then: the answer is an HTTP error,
    classed by its status, and only addresses among the message's recipients are refused.
    None when the answer was a success (or there was no HTTP answer: SMTP, console...).
    """
    status = getattr(message, "anymail_status", None)
    response = getattr(status, "esp_response", None)
    code = getattr(response, "status_code", None)
    if not isinstance(code, int) or 200 <= code < 300:
        return None
    result = http_failure(code, response, secret=getattr(conn, "api_key", None))
    result.refused = provider_refusals(message, getattr(conn, "esp_name", None))
    if result.refused:
        result.error_class = ErrorClass.PERMANENT
    return result


def provider_reason(response: Any, secret: Any = None) -> str:
    """A provider's own short reason for an error answer: the JSON `message` (or `error`,
    `errors`, `Message`, `detail`) of its body, else the HTTP reason; one line, at most
    REASON_CHARS, never the API key."""
    reason = ""
    with contextlib.suppress(AttributeError, ValueError, TypeError):  # no body, or not JSON
        reason = _json_reason(response.json())
    if not reason:
        reason = str(getattr(response, "reason", "") or "")
    reason = " ".join(reason.split())
    if isinstance(secret, str) and len(secret) >= 8:
        reason = reason.replace(secret, "[redacted]")
    return reason[: REASON_CHARS - 1] + "…" if len(reason) > REASON_CHARS else reason


def _json_reason(data: Any) -> str:
    if isinstance(data, str):
        return data
    if isinstance(data, list):
        return "; ".join(filter(None, (_json_reason(item) for item in data[:3])))
    if isinstance(data, dict):
        for key in ("message", "Message", "error", "errors", "detail", "description"):
            if key in data:
                found = _json_reason(data[key])
                if found:
                    return found
        if data:
            return json.dumps(data, separators=(",", ":"))[:REASON_CHARS]
    return ""


def _header(response: Any, name: str) -> str | None:
    headers = getattr(response, "headers", None)
    value = headers.get(name) if headers is not None else None
    return value if isinstance(value, str) else None


def _name(exc: BaseException) -> str:
    return type(exc).__name__


# --- refusals per recipient ---------------------------------------------------------------


def by_address(answers: dict[str, Any]) -> dict[str, Any]:
    """An SMTP server's answers per recipient keyed by the bare address.

    smtplib keys them by the recipient as Django's backend passed it, display name and all
    (`Ada <ada@example.com>`): suppression, the recipients a firing still owes and the
    error's words all work on the address alone.
    """
    return {mailbox(str(recipient)): answer for recipient, answer in answers.items()}


def smtp_refusals(refused: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """(address, reason) for each recipient an SMTP server refused permanently (5xx)."""
    found = []
    for address, answer in refused.items():
        code, text = answer if isinstance(answer, tuple) and len(answer) == 2 else (0, b"")
        if code in PERMANENT_SMTP and is_address(address):
            said = text.decode(errors="replace") if isinstance(text, bytes) else str(text)
            found.append((address, f"SMTP {code} {' '.join(said.split())}"[:200]))
    return tuple(found)


def smtp_deferrals(refused: dict[str, Any]) -> tuple[str, ...]:
    """The recipients an SMTP server deferred (4xx to RCPT: greylisting, a full mailbox)."""
    return tuple(
        address
        for address, answer in refused.items()
        if isinstance(answer, tuple) and len(answer) == 2 and answer[0] in TEMPORARY_SMTP
    )


def deferred_error(refused: dict[str, Any], deferred: tuple[str, ...], recipients: int) -> str:
    """`email: SMTP 451 for 1 of 3 recipients`: the codes of the deferrals, and how many."""
    codes = " ".join(str(code) for code in sorted({refused[a][0] for a in deferred}))
    return f"email: SMTP {codes} for {len(deferred)} of {recipients} recipients"


def provider_refusals(message: EmailMessage | None, esp: Any = None) -> tuple[tuple[str, str], ...]:
    """(address, reason) for each recipient anymail reported rejected or invalid.

    Only valid addresses the message was sent to: anymail reads some addresses out of the
    provider's prose (Postmark's "Illegal email address '...'"), which can yield text that
    is no address at all, or not one of ours.
    """
    status = getattr(message, "anymail_status", None)
    recipients = getattr(status, "recipients", None)
    if not isinstance(recipients, dict) or message is None:
        return ()
    ours = {address.lower() for address in _recipient_addresses(message)}
    source = esp if isinstance(esp, str) else "provider"
    return tuple(
        (address, f"{source}: {recipient.status}")
        for address, recipient in recipients.items()
        if getattr(recipient, "status", None) in REFUSED_STATUSES
        and isinstance(address, str)
        and address.lower() in ours
        and is_address(address)
    )


def _recipient_addresses(message: EmailMessage) -> list[str]:
    """The bare addresses of To, Cc and Bcc (`Ada <ada@example.com>` is `ada@example.com`)."""
    from email.utils import getaddresses

    return [address for _, address in getaddresses(message.recipients()) if address]


# --- idempotency keys ---------------------------------------------------------------------


@contextlib.contextmanager
def idempotency(conn: BaseEmailBackend, message: EmailMessage, key: str) -> Iterator[None]:
    """Send `key` as the provider's idempotency key, where it takes one, for one send.

    The HTTP header goes on this connection's own requests session (one per worker
    thread) and comes off after the send; the message header rides on the message.
    """
    esp = getattr(conn, "esp_name", None)
    if esp in IDEMPOTENCY_MESSAGE_HEADER:
        message.extra_headers[IDEMPOTENCY_MESSAGE_HEADER[esp]] = key
    header = IDEMPOTENCY_HTTP_HEADER.get(esp) if isinstance(esp, str) else None
    session = getattr(conn, "session", None)
    if header is None or session is None:
        yield
        return
    session.headers[header] = key
    try:
        yield
    finally:
        session.headers.pop(header, None)


def idempotent_providers() -> list[str]:
    """The providers (anymail `esp_name`) a retry after a stall cannot deliver twice to."""
    return sorted({*IDEMPOTENCY_HTTP_HEADER, *IDEMPOTENCY_MESSAGE_HEADER})
