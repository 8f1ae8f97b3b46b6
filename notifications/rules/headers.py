"""A row's extra email headers (`headers`): what host code may set, checked before it is stored.

A header is a name and a value, both strings. Neither may hold a line break (CR or LF,
or NUL): a line break in a header is how a second header, or a second message body, is
smuggled into a message (header injection). Names are RFC 5322 field names: printable
ASCII without spaces or a colon.

Some headers are the queue's own and are refused: `Message-ID` (the same for every attempt
of one firing, so receivers can de-duplicate: see `notifications.channels.email`), the
Standard Webhooks headers (`webhook-id`, `webhook-timestamp`, `webhook-signature`), and
the MIME structure (`Content-Type`, `Content-Transfer-Encoding`, `MIME-Version`), which
the message's parts decide. Names are compared without regard to case.

This module imports nothing from the app, so validation, the queued backend and the
email channel share it.
"""

from __future__ import annotations

import re
from typing import Any

OWN_HEADERS = frozenset(
    {
        "message-id",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "content-type",
        "content-transfer-encoding",
        "mime-version",
    }
)
# RFC 5322 section 3.6.8: printable US-ASCII except the colon; no space.
_FIELD_NAME = re.compile(r"[!-9;-~]+")
_LINE_BREAKS = re.compile(r"[\r\n\x00]")
MAX_HEADERS = 50
MAX_VALUE_CHARS = 4000  # a header folds over many lines; this is far past any real one
_SHOWN = 40  # characters of a refused name quoted back


def is_own(name: str) -> bool:
    """Whether `name` is a header the queue sets itself."""
    return name.strip().lower() in OWN_HEADERS


def errors(value: Any) -> list[str]:
    """Why `value` cannot be a row's `headers`; empty when it can."""
    if value is None:
        return ["Give a JSON object of header names and values (or {} for none)."]
    if not isinstance(value, dict):
        return ['Give a JSON object of header names and values, e.g. {"X-Campaign": "spring"}.']
    if len(value) > MAX_HEADERS:
        return [f"At most {MAX_HEADERS} headers, not {len(value)}."]
    problems: list[str] = []
    seen: set[str] = set()
    for name, header_value in value.items():
        shown = repr(name[:_SHOWN]) if isinstance(name, str) else "a header"
        if not isinstance(name, str) or not _FIELD_NAME.fullmatch(name):
            problems.append(
                f"The header name {shown} is not a header name: printable ASCII, no spaces, colons or line breaks."
            )
            continue
        if name.lower() in seen:
            problems.append(f"The header {shown} appears twice (names are compared without case).")
        seen.add(name.lower())
        if is_own(name):
            problems.append(f"The header {shown} is the queue's own: it sets it for every message.")
            continue
        if not isinstance(header_value, str):
            problems.append(f"The value of {shown} must be a string.")
        elif _LINE_BREAKS.search(header_value):
            problems.append(f"The value of {shown} holds a line break: headers are one logical line.")
        elif len(header_value) > MAX_VALUE_CHARS:
            problems.append(f"The value of {shown} is longer than {MAX_VALUE_CHARS:,} characters.")
    return problems


def usable(value: Any) -> dict[str, str]:
    """The headers of a stored value that may go out: a row validated on save gives all of
    them; anything else (raw SQL) is dead-lettered by the tick before it is sent."""
    if not isinstance(value, dict):
        return {}
    return {
        name: header_value
        for name, header_value in value.items()
        if isinstance(name, str)
        and isinstance(header_value, str)
        and _FIELD_NAME.fullmatch(name)
        and not is_own(name)
        and not _LINE_BREAKS.search(header_value)
    }
