"""What mail servers and providers answer: failures classed, refusals per recipient, idempotency keys.

django-anymail is optional: without it, only its part here is idle.
"""

from __future__ import annotations

import contextlib
import json
import smtplib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import requests
from django.core.mail import EmailMessage
from django.core.mail.backends.base import BaseEmailBackend

from notifications.channels.base import ChannelResult, ErrorClass
from notifications.channels.webhook.channel import classify_status, parse_retry_after

# Providers that de-duplicate sends on a key, by anymail's `esp_name`, and how the key
# travels. Resend: the `Idempotency-Key` HTTP header of the API request (kept 24 hours).
# Brevo: `idempotencyKey` among the message's headers in the API request (kept 15
# minutes). Others offer no such key: a retry after a stall may deliver twice there,
# with the same Message-ID.
IDEMPOTENCY_HTTP_HEADER = {"Resend": "Idempotency-Key"}
IDEMPOTENCY_MESSAGE_HEADER = {"Brevo": "idempotencyKey"}

REASON_CHARS = 120  # of a provider's own words in `last_error`
# Statuses anymail gives recipients a provider refused outright.
REFUSED_STATUSES = frozenset({"rejected", "invalid"})
# SMTP replies 500-599 to RCPT are final: the address is suppressed.
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
    """A short, classed error for any exception a mail backend raised."""
    if _timed_out(exc):
        timeout = getattr(conn, "timeout", None)
        after = f" after {timeout:g}s" if isinstance(timeout, int | float) and not isinstance(timeout, bool) else ""
        return ChannelResult("email", f"email: timed out{after}", ErrorClass.TRANSIENT)
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return _recipients_refused(exc)
    if isinstance(exc, smtplib.SMTPResponseException):
        # 5xx replies are final answers; 4xx ask us to come back later.
        klass = ErrorClass.PERMANENT if exc.smtp_code in PERMANENT_SMTP else ErrorClass.TRANSIENT
        return ChannelResult("email", f"email: {type(exc).__name__} {exc.smtp_code}", klass)
    exceptions = anymail_exceptions()
    if exceptions is not None and isinstance(exc, exceptions.AnymailError):
        return _anymail_failure(exc, exceptions)
    return ChannelResult("email", f"email: {_name(exc)}", ErrorClass.TRANSIENT)


def _timed_out(exc: BaseException) -> bool:
    """A timeout anywhere in the chain: smtplib reports its socket's own timeout as
    `SMTPServerDisconnected("Connection unexpectedly closed: timed out")`, anymail a
    requests timeout as AnymailRequestsAPIError."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, TimeoutError | requests.Timeout):
            return True
        current = current.__cause__ or current.__context__
    return False


def _recipients_refused(exc: smtplib.SMTPRecipientsRefused) -> ChannelResult:
    """Every recipient refused: permanent when every refusal is (5xx); the 5xx ones are suppressed."""
    refusals = {address: answer for address, answer in exc.recipients.items() if isinstance(answer, tuple)}
    refused = smtp_refusals(refusals)
    codes = sorted({code for code, _ in refusals.values()})
    if codes and all(code in PERMANENT_SMTP for code in codes):
        return ChannelResult(
            "email", "email: SMTPRecipientsRefused", ErrorClass.PERMANENT, refused=refused, answered=True
        )
    shown = " ".join(str(code) for code in codes)
    error = f"email: SMTPRecipientsRefused {shown}".rstrip()
    # A refusal per recipient is the server's answer about them (greylisting, a full
    # mailbox), not a sign that it is down: `answered`.
    return ChannelResult("email", error, ErrorClass.TRANSIENT, refused=refused, answered=bool(codes))


def _anymail_failure(exc: Exception, exceptions: ModuleType) -> ChannelResult:
    if isinstance(exc, exceptions.AnymailRecipientsRefused):
        message = getattr(exc, "email_message", None)
        return ChannelResult(
            "email",
            "email: all recipients rejected by the provider",
            ErrorClass.PERMANENT,
            refused=provider_refusals(message, getattr(exc, "esp_name", None)),
        )
    status = getattr(exc, "status_code", None)
    if isinstance(exc, exceptions.AnymailAPIError) and isinstance(status, int):
        response = getattr(exc, "response", None)
        reason = provider_reason(response, secret=getattr(getattr(exc, "backend", None), "api_key", None))
        retry_after = parse_retry_after(_header(response, "retry-after")) if status in (429, 503) else None
        return ChannelResult(
            "email",
            f"email: HTTP {status}" + (f" {reason}" if reason else ""),
            classify_status(status),
            http_status=status,
            retry_after=retry_after,
        )
    # An address anymail cannot parse, a feature the provider lacks, data it cannot
    # serialize: the same message fails the same way again.
    if isinstance(exc, ValueError | TypeError):
        return ChannelResult("email", f"email: {_name(exc)}", ErrorClass.PERMANENT)
    return ChannelResult("email", f"email: {_name(exc)}", ErrorClass.TRANSIENT)


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


def smtp_refusals(refused: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """(address, reason) for each recipient an SMTP server refused permanently (5xx)."""
    found = []
    for address, answer in refused.items():
        code, text = answer if isinstance(answer, tuple) and len(answer) == 2 else (0, b"")
        if code in PERMANENT_SMTP:
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
    """(address, reason) for each recipient anymail reported rejected or invalid."""
    status = getattr(message, "anymail_status", None)
    recipients = getattr(status, "recipients", None)
    if not isinstance(recipients, dict):
        return ()
    source = esp if isinstance(esp, str) else "provider"
    return tuple(
        (address, f"{source}: {recipient.status}")
        for address, recipient in recipients.items()
        if getattr(recipient, "status", None) in REFUSED_STATUSES
    )


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
