"""What a message queued by `QueuedEmailBackend` keeps beyond the row's columns, as JSON.

Its alternatives, the attributes that shape its MIME structure, and django-anymail's
attributes (`message_extras`), with datetimes, dates and bytes tagged so `restore` gives them
back as they were. The queued backend writes it (the row's `message`), the email channel
reads it.
"""

from __future__ import annotations

import base64
from datetime import date, datetime
from typing import Any

from django.core.mail import EmailMessage

# django-anymail's message attributes: kept as JSON and set on the message again when it is sent.
ANYMAIL_ATTRIBUTES = (
    "tags",
    "metadata",
    "merge_data",
    "merge_global_data",
    "merge_metadata",
    "merge_headers",
    "esp_extra",
    "template_id",
    "track_clicks",
    "track_opens",
    "envelope_sender",
    "send_at",
)
# EmailMessage attributes that shape its MIME structure, kept when set.
SHAPE_ATTRIBUTES = ("content_subtype", "mixed_subtype", "alternative_subtype", "encoding")
_DATETIME = "__datetime__"
_DATE = "__date__"  # anymail's `send_at` may be a date
_BYTES = "__base64__"


def message_extras(message: EmailMessage) -> dict[str, Any]:
    """What of `message` has no column of its own: alternatives, its MIME shape, anymail's attributes."""
    extras: dict[str, Any] = {
        "alternatives": [
            {"content": _jsonable(content), "mimetype": str(mimetype)}
            for content, mimetype in getattr(message, "alternatives", None) or []
        ]
    }
    defaults = EmailMessage
    for name in SHAPE_ATTRIBUTES:
        value = getattr(message, name, None)
        if value is not None and value != getattr(defaults, name, None):
            extras[name] = str(value)
    unset = _anymail_unset()
    anymail = {}
    for name in ANYMAIL_ATTRIBUTES:
        value = getattr(message, name, unset)
        if value is not unset:
            anymail[name] = _jsonable(value)
    if anymail:
        extras["anymail"] = anymail
    return extras


def _anymail_unset() -> Any:
    try:
        from anymail.utils import UNSET
    except ImportError:
        return object()
    return UNSET


def _jsonable(value: Any) -> Any:
    """`value` as JSON: datetimes, dates and bytes tagged, so `restore` gives them back."""
    if isinstance(value, datetime):  # before date: a datetime is a date too
        return {_DATETIME: value.isoformat()}
    if isinstance(value, date):
        return {_DATE: value.isoformat()}
    if isinstance(value, bytes):
        return {_BYTES: base64.b64encode(value).decode()}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def restore(value: Any) -> Any:
    """The inverse of `_jsonable`."""
    if isinstance(value, dict):
        if set(value) == {_DATETIME} and isinstance(value[_DATETIME], str):
            return datetime.fromisoformat(value[_DATETIME])
        if set(value) == {_DATE} and isinstance(value[_DATE], str):
            return date.fromisoformat(value[_DATE])
        if set(value) == {_BYTES} and isinstance(value[_BYTES], str):
            return base64.b64decode(value[_BYTES])
        return {k: restore(v) for k, v in value.items()}
    if isinstance(value, list):
        return [restore(v) for v in value]
    return value
