"""What an HTTP answer's status says about trying again: the rule every channel that
speaks HTTP shares (webhooks, email providers' APIs)."""

from __future__ import annotations

import time
from datetime import UTC
from email.utils import parsedate_to_datetime

from notifications.channels.base import ErrorClass

# 4xx answers that ask to come back later (Request Timeout, Too Many Requests): transient.
RETRY_LATER_STATUSES = (408, 429)


def classify_status(status: int) -> ErrorClass:
    """Whether a retry can help a non-2xx answer.

    4xx are the receiver's final word, except 408 and 429 which ask for later. 3xx are
    permanent too: redirects are never followed, so the same URL gets the same answer
    until someone points the row at the final URL. 5xx and anything else are transient.
    """
    if 300 <= status < 400:
        return ErrorClass.PERMANENT
    if 400 <= status < 500 and status not in RETRY_LATER_STATUSES:
        return ErrorClass.PERMANENT
    return ErrorClass.TRANSIENT


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds from a `Retry-After` header, given in seconds or as an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    now = time.time() if now is None else now
    return max(when.timestamp() - now, 0.0)
