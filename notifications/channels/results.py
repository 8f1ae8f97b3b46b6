"""A channel's result as the tick receives it, cleaned and bounded: the one place where
what a remote server or a site's channel answered becomes something the write-back can
store (SPEC v5, "Hardening rules of version 5").

`received` is applied by the tick's workers to every `Channel.send`'s return (a site
channel may override `send` as well as `deliver`). Text (the error, the sent log's line,
a refusal's reason) becomes one bounded line without control characters
(`notifications.rules.remote_text`); an `http_status` that is no integer HTTP status, a
`retry_after` that is no finite number of seconds, a refused or deferred address that is
not clean text are dropped. What cannot be read at all (no `ChannelResult`, an
`error_class` neither the enum nor its value, an `error` that is not text) is an internal
failure of that row, `"<name>: internal: ..."`: transient, like an exception in `deliver`.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from django.db.models import Model

from notifications.channels.base import ChannelResult, ErrorClass
from notifications.rules.remote_text import ERROR_CHARS, REASON_CHARS, SENT_TO_CHARS, SUMMARY_CHARS, one_line

logger = logging.getLogger("notifications.tick")

__all__ = ["received"]

# An address (refused, deferred) longer than this is no address: dropped.
ADDRESS_CHARS = 320
# Addresses one result may refuse or defer: a message's recipients, never a flood.
MAX_ADDRESSES = 1000


class Unreadable(ValueError):
    """A result the tick cannot take as it is: the row fails, transiently."""


def received(name: str, result: object) -> ChannelResult:
    """`result` (what channel `name`'s `send` returned) cleaned and bounded; an internal
    failure of the row when it cannot be read."""
    try:
        if isinstance(result, BaseException):
            raise Unreadable(f"send() raised {type(result).__name__}")
        if not isinstance(result, ChannelResult):
            raise Unreadable(f"send() returned {type(result).__name__}, not a ChannelResult")
        return result if _ordinary(result) else _cleaned(name, result)
    except Exception as exc:  # noqa: BLE001 - whatever a site's result holds, the row settles
        why = str(exc) if isinstance(exc, Unreadable) else type(exc).__name__
        logger.warning("channel %s: an unreadable result: %s", name, why)
        return ChannelResult(
            name, error=f"{name}: internal: {one_line(why, ERROR_CHARS // 2)}", error_class=ErrorClass.TRANSIENT
        )


def _ordinary(result: ChannelResult) -> bool:
    """A success that says only its status, duration and log line, each already clean:
    what `_cleaned` would copy field for field (most answers of a burst, so not copied)."""
    return (
        type(result) is ChannelResult  # a subclass may compute its fields: copy what it says
        and result.error is None
        and result.error_class is None
        and result.retry_after is None
        and result.refused == ()
        and result.deferred == ()
        and result.inserts == ()
        and result.answered is False
        and result.not_sent is False
        and (result.http_status is None or _http_status(result.http_status) is not None)
        and type(result.duration) is float
        and _seconds(result.duration) is not None
        and _clean_line(result.sent_to, SENT_TO_CHARS)
        and _clean_line(result.summary, SUMMARY_CHARS)
    )


def _clean_line(text: object, limit: int) -> bool:
    if type(text) is not str:
        return False
    if len(text) <= limit and text.isascii() and text.isprintable():  # a host, an event type
        return "  " not in text and text == text.strip()  # what one_line would keep as it is
    return one_line(text, limit) == text


def _cleaned(name: str, result: ChannelResult) -> ChannelResult:
    error = result.error
    if error is not None and not isinstance(error, str):
        raise Unreadable(f"error is {type(error).__name__}, not text")
    error_class = None if error is None else _error_class(result.error_class)
    if error is not None:
        error = one_line(error, ERROR_CHARS) or f"{name}: failed"
    return ChannelResult(
        name,
        error=error,
        error_class=error_class,
        http_status=_http_status(result.http_status),
        retry_after=_seconds(result.retry_after),
        duration=_seconds(result.duration) or 0.0,
        refused=tuple(
            (address, one_line(reason, REASON_CHARS))
            for address, reason in _pairs(result.refused)[:MAX_ADDRESSES]
            if _address(address)
        ),
        deferred=tuple(a for a in _items(result.deferred)[:MAX_ADDRESSES] if _address(a)),
        answered=result.answered is True,
        sent_to=one_line(result.sent_to, SENT_TO_CHARS) if isinstance(result.sent_to, str) else "",
        summary=one_line(result.summary, SUMMARY_CHARS) if isinstance(result.summary, str) else "",
        not_sent=result.not_sent is True,
        # What the write-back inserts with the outcome (the inbox's message): model instances only.
        inserts=tuple(item for item in _items(result.inserts) if isinstance(item, Model)),
    )


def _error_class(value: object) -> ErrorClass | None:
    """The enum, or its value as a string ("permanent", "transient"); None stays None."""
    if value is None or isinstance(value, ErrorClass):
        return value
    if isinstance(value, str) and value in ErrorClass._value2member_map_:
        return ErrorClass(value)
    raise Unreadable(f"error_class is not one of {', '.join(ErrorClass)}")


def _http_status(value: object) -> int | None:
    """An integer HTTP status (100-599), else None: the column holds a small integer."""
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
        return value
    return None


def _seconds(value: object) -> float | None:
    """A finite, non-negative number of seconds, else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        return float(value)
    return None


def _items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple, set, frozenset)) else []


def _pairs(value: Any) -> list[tuple[str, str]]:
    return [
        (item[0], item[1])
        for item in _items(value)
        if isinstance(item, (list, tuple)) and len(item) == 2 and all(isinstance(part, str) for part in item)
    ]


def _address(value: object) -> bool:
    """Text an address column stores as it is: bounded, one line, no control character."""
    return isinstance(value, str) and 0 < len(value) <= ADDRESS_CHARS and one_line(value, ADDRESS_CHARS) == value
