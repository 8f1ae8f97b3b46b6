"""Field rules of a Notification: the core's here, each channel's in its own package.

The fields a channel owns (recipients, a URL) are its to judge: `field_errors` asks the
channels' validation the app installed (`channel_hook.channels()`, filled by
`NotificationsConfig.ready()` with `notifications.channels.validation`, which asks every
registered channel), and names neither a channel nor the registry itself.

`Notification.clean()` raises them as a ValidationError for every path the app owns
(API, admin, forms); the tick runs the same rules on claimed rows, so a row that
reached the table some other way (raw SQL, `bulk_create`) is dead-lettered with the
message instead of crashing the tick.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import connections, router
from django.utils import timezone

from notifications.conf import (
    MAX_DELAY_SECONDS,
    Defaults,
    app_settings,
    categories,
    is_backoff,
    is_positive,
)
from notifications.databases import MARIADB_JSON_DEPTH, json_depth_limit
from notifications.models import attachments, channel_hook
from notifications.rules import quiet, schedule

if TYPE_CHECKING:
    from notifications.models.notification import Notification

# Levels of nested objects and lists a payload may have. Real payloads need a handful;
# recursive JSON encoders and decoders (Python's among them) fail near 1,000, so a deeper
# row could be saved but neither sent nor shown.
MAX_PAYLOAD_DEPTH = 32
# UTF-8 bytes of the body (a template). TextField has no limit of its own, and a
# body is loaded, parsed and rendered for every firing like the payload; 64 KiB of
# plain text is far more than any reminder needs. The subject is bounded by its column.
MAX_BODY_BYTES = 64 * 1024
# A row's `key` is unique among rows that have one (at most 200 characters: its column).
# The database decides (the constraint `notification_key_unique`); schedule(key=...,
# on_conflict="error") reports a taken key with this message on `key`.
PRIORITIES = ("now", "high", "normal", "low")
KEY_TAKEN = 'Another notification has this key (schedule() with on_conflict="replace" or "keep" reuses it).'


ROUTINGS = ("all", "first")
Errors = dict[str, list[str]]


# --- one batch of rows validated together --------------------------------------------------

_batch = threading.local()


@contextlib.contextmanager
def batch() -> Iterator[None]:
    """Rows validated inside share what does not depend on the row (the site's settings, as
    read once) and the answers for values they repeat (`remembered`): a batch of thousands
    parses a URL it repeats, or a setting, once. Nests; forgotten at its end."""
    if getattr(_batch, "memo", None) is not None:
        yield
        return
    _batch.memo = {}
    try:
        yield
    finally:
        _batch.memo = None


def per_batch(kind: str, compute: Callable[[], Any]) -> Any:
    """`compute()` (a setting as read now), once inside a `batch()`; every call outside one."""
    memo: dict[Any, Any] | None = getattr(_batch, "memo", None)
    if memo is None:
        return compute()
    if kind not in memo:
        memo[kind] = compute()
    return memo[kind]


def compact_json(value: Any) -> str | None:
    """`value` as compact JSON, or None when `json.dumps` cannot encode it (NaN is encoded,
    as Django's JSONField check allows it). Encoded once per object inside a `batch()`,
    where nothing changes the rows being validated; every call outside one encodes it."""
    memo: dict[Any, Any] | None = getattr(_batch, "memo", None)
    key = ("json", id(value))
    if memo is not None and key in memo and memo[key][0] is value:
        return memo[key][1]  # type: ignore[no-any-return]
    try:
        text: str | None = json.dumps(value, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        text = None
    if memo is not None:
        memo[key] = (value, text)  # the value is kept: its id names no other object meanwhile
    return text


def remembered(kind: str, value: Any, compute: Callable[[Any], list[str]]) -> list[str]:
    """`compute(value)` (a list of messages), computed once per `kind` and `value` inside a
    `batch()`; every call outside one computes it."""
    memo: dict[tuple[str, Any], list[str]] | None = getattr(_batch, "memo", None)
    if memo is None or not isinstance(value, str):
        return compute(value)
    key = (kind, value)
    found = memo.get(key)
    if found is None:
        found = memo[key] = compute(value)
    return list(found)


def channel_data_errors(row: Notification) -> Errors:
    """`channel_data` is an object (each channel says what its entry must be: `Channel.row_errors`)."""
    if not isinstance(row.channel_data, dict):
        return {"channel_data": ['Give a JSON object of channel name -> its data, e.g. {"sms": {"to": "+1..."}}.']}
    return {}


def routing_errors(routing: Any) -> list[str]:
    if routing not in ROUTINGS:
        return [f"Give {' or '.join(map(repr, ROUTINGS))}."]
    return []


PAYLOAD_SETTING = "NOTIFICATIONS_MAX_PAYLOAD_BYTES"


def max_payload_bytes() -> int:
    """NOTIFICATIONS_MAX_PAYLOAD_BYTES, or its default while it is misconfigured (check E016 says so)."""
    return int(per_batch("max_payload_bytes", _max_payload_bytes))


def _max_payload_bytes() -> int:
    limit: object = app_settings.MAX_PAYLOAD_BYTES
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        return Defaults.MAX_PAYLOAD_BYTES
    return limit


def max_payload_depth() -> int:
    """MAX_PAYLOAD_DEPTH, or less where the queue's database cannot store that much nesting
    (MariaDB: 31, see `notifications.databases.json_depth_limit`); read once per `batch()`."""
    return int(per_batch("max_payload_depth", _max_payload_depth))


def _max_payload_depth() -> int:
    # The model by its label: this module is the model's (Notification.clean asks it).
    queue = apps.get_model("notifications", "Notification")
    limit = json_depth_limit(connections[router.db_for_write(queue) or "default"])
    return MAX_PAYLOAD_DEPTH if limit is None else min(MAX_PAYLOAD_DEPTH, limit)


def _measure(value: Any, stop_above: int) -> tuple[bool, int]:
    """(nested deeper than `max_payload_depth()`?, a lower bound of its compact JSON size).

    Iterative, so no depth raises RecursionError; it stops as soon as the value is too
    deep or the bound passes `stop_above`, so a 10 MB payload costs no more than a big one.
    """
    size, deepest = 0, max_payload_depth()
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > deepest:
                return True, size
            size += 2 + max(len(item) - 1, 0)  # brackets and commas
            if isinstance(item, dict):
                size += sum(len(key) + 3 if isinstance(key, str) else 1 for key in item)  # "key":
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(item, str):
            size += len(item) + 2
        else:
            size += 1
        if size > stop_above:
            break
    return False, size


def _few_brackets(text: str) -> bool:
    """Whether JSON `text` opens no more brackets than `max_payload_depth()`: each level of
    nesting opens one, so such a value cannot be too deep (every real payload)."""
    return text.count("[") + text.count("{") <= max_payload_depth()


def payload_unencodable(payload: Any) -> bool:
    """Whether `payload` cannot be encoded as JSON at all (an integer of 4,300+ digits, a set,
    nesting too deep): Django's own JSONField check would raise on it, not refuse it."""
    text = compact_json(payload)  # a nesting thousands deep raises RecursionError there, at once
    if text is None:
        return True
    # Each level of nesting opens a bracket: a text with few of them (every real payload)
    # cannot be too deep, and is not walked in Python.
    if text.count("[") + text.count("{") <= MARIADB_JSON_DEPTH:
        return False
    return payload_too_deep(payload)


def payload_too_deep(payload: Any) -> bool:
    """Whether `payload` nests objects or lists deeper than `max_payload_depth()` levels."""
    too_deep, _ = _measure(payload, stop_above=sys.maxsize)
    return too_deep


def payload_errors(payload: Any) -> list[str]:
    """A payload is a JSON object, at most `max_payload_depth()` deep and MAX_PAYLOAD_BYTES as compact JSON.

    The size is that of `json.dumps(payload, separators=(",", ":"))`, the encoding the
    channels send it in.
    """
    if not isinstance(payload, dict):
        return ["The payload must be a JSON object."]
    limit = max_payload_bytes()
    too_large = [f"The payload is larger than {limit:,} bytes of compact JSON ({PAYLOAD_SETTING})."]
    text = compact_json(payload)  # once per batch: the storable check reads it too
    if text is not None and "NaN" not in text and "Infinity" not in text and _few_brackets(text):
        return too_large if len(text) > limit else []  # not too deep: no walk in Python
    too_deep, at_least = _measure(payload, stop_above=limit)
    if too_deep:
        return [f"The payload is nested deeper than {max_payload_depth()} levels."]
    if at_least > limit:
        return too_large  # known without encoding it
    text = compact_json(payload)
    if text is None or "NaN" in text or "Infinity" in text:  # encoded again only to say why (or to clear it)
        try:
            text = json.dumps(payload, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:  # a date, a set, NaN, an integer of 4,300+ digits
            return [f"The payload must hold only JSON values: {exc}."]
    return too_large if len(text) > limit else []  # ASCII: characters are bytes


def body_errors(body: str) -> list[str]:
    """The body is at most MAX_BODY_BYTES of UTF-8."""
    # Characters never outnumber UTF-8 bytes: a long body is refused without encoding it.
    if len(body) > MAX_BODY_BYTES or len(body.encode("utf-8", "surrogatepass")) > MAX_BODY_BYTES:
        return [f"The body is larger than {MAX_BODY_BYTES:,} bytes."]
    return []


# Text fields a row stores as given: a NUL or an unpaired surrogate in any of them is refused
# on that field (PostgreSQL stores neither, SQLite's driver cannot encode a surrogate).
TEXT_FIELDS = (
    "key",
    "recipient",
    "category",
    "subject",
    "body",
    "html_body",
    "template",
    "language",
    "webhook_url",
    "webhook_secret",
    "recurrence_rule",
    "timezone",
    "quiet_hours",
    "from_email",
    "mailer",
    "routing",
)
ADDRESS_FIELDS = ("email_to", "email_cc", "email_bcc", "reply_to")
# JSON a row stores: every string inside (keys too) is held to the same rule.
JSON_FIELDS = ("payload", "headers", "attachments", "message", "channel_data")
STORED_AS_GIVEN = (*TEXT_FIELDS, *ADDRESS_FIELDS, *JSON_FIELDS)
NUL_MESSAGE = "Remove the NUL character (\\u0000): no database stores it."
SURROGATE_MESSAGE = "Remove the unpaired surrogate (\\ud800-\\udfff): it is not Unicode text."


def text_errors(value: Any) -> list[str]:
    """Why the string `value` (or any string inside a list or object, keys too) cannot be
    stored: a NUL, or an unpaired surrogate. Iterative: no depth raises RecursionError."""
    if not value:  # most of a row's fields: blank, empty or None
        return []
    if type(value) is str and value.isascii():  # no surrogate: a NUL is all there is to find
        return [NUL_MESSAGE] if "\x00" in value else []
    if isinstance(value, dict | list):
        # Its JSON (once per batch) escapes every non-ASCII character, a NUL as \u0000 and
        # a surrogate as \udXXX: a text with neither escape holds neither (no walk).
        text = compact_json(value)
        if text is not None and "\\u0000" not in text and "\\ud" not in text:
            return []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return [NUL_MESSAGE]
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return [SURROGATE_MESSAGE]
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return []


def not_finite(value: Any) -> bool:
    """Whether `value` is a float infinity or NaN (no integer field can read it)."""
    return isinstance(value, float) and not math.isfinite(value)


def storable_errors(row: Notification) -> Errors:
    """Text fields, addresses and the payload holding what no database stores (NUL, an
    unpaired surrogate), by field; the other rules are not asked of such a field."""
    errors: Errors = {}
    for name in STORED_AS_GIVEN:
        value = getattr(row, name, None)
        if not value or (type(value) is str and value.isascii() and "\x00" not in value):
            continue  # blank, or plain text (most of a row's fields): `text_errors` finds nothing
        messages = text_errors(value)
        if messages:
            errors[name] = messages
    return errors


def field_errors(row: Notification, storable: Errors | None = None) -> Errors:
    """Every problem of `row`, by field name; empty when the row can be delivered.

    `storable`: `storable_errors(row)` when the caller has just computed it."""
    channels = channel_hook.channels()
    listed = row.channels if isinstance(row.channels, list) else []
    named = [c for c in listed if isinstance(c, str)]
    known = storable if storable is not None else storable_errors(row)
    errors: Errors = {field: list(messages) for field, messages in known.items()}
    unstorable = set(errors)
    for part in (
        {"channels": channels.list_errors(row.channels), "routing": routing_errors(row.routing)},
        channel_data_errors(row),
        channels.row_errors(row, named + escalation_channels(row, named)),
        {"payload": payload_errors(row.payload)},
        _schedule_errors(row),
        _limit_errors(row),
        _delivery_errors(row, named),
        digest_errors(row),
        escalation_errors(row, channels.names()),
    ):
        for field, messages in part.items():
            if messages and field not in unstorable:
                errors.setdefault(field, []).extend(messages)
    if not channels.bound_body(named):  # the body is bounded whatever the channels
        body = body_errors(row.body or "")
        if body:
            errors["body"] = body
    return errors


def _delivery_errors(row: Notification, named: list[str]) -> Errors:
    """Attachments (only with a channel that takes them, within the size limit) and the priority."""
    errors: Errors = {}
    if row.attachments:
        channels = channel_hook.channels()
        takes = channels.take_attachments(named)
        errors["attachments"] = (
            attachments.describe_errors(row.attachments) if takes else [channels.attachments_refused()]
        )
    elif row.attachments is None or not isinstance(row.attachments, list):
        errors["attachments"] = ["Give a list of attachments."]
    if row.priority not in PRIORITIES:
        errors["priority"] = [f"Give one of {', '.join(map(repr, PRIORITIES))}."]
    return errors


def _schedule_errors(row: Notification) -> Errors:
    errors: Errors = {}
    try:
        schedule.get_zone(row.timezone)
    except schedule.InvalidRule as exc:
        errors["timezone"] = [_sentence(exc)]
    if row.recurrence_rule:
        try:
            schedule.validate_rule(row.recurrence_rule)
        except schedule.InvalidRule as exc:
            errors["recurrence_rule"] = [_sentence(exc)]
    return errors


def _limit_errors(row: Notification) -> Errors:
    """Expiry, quiet hours and the row's own retry policy (blank: none, or the site's)."""
    errors: Errors = {}
    if isinstance(row.expires_at, datetime) and timezone.is_naive(row.expires_at):
        errors["expires_at"] = ["Give an aware datetime (USE_TZ is on)."]
    if row.max_delay is not None and not is_positive(row.max_delay, integer=True):
        errors["max_delay"] = ["Give a positive number of seconds."]
    if row.quiet_hours:
        errors["quiet_hours"] = quiet.errors(row.quiet_hours)
    if row.max_retries is not None and not is_positive(row.max_retries, integer=True):
        errors["max_retries"] = ["Give at least 1 (attempts of one firing before it is dead-lettered)."]
    elif row.max_retries is not None and row.retries_used_up():
        # No tick would claim the firing again, nor dead-letter it: it would wait forever.
        errors["max_retries"] = [
            f"This firing has already failed {row.error_count} times: give more than {row.error_count}, "
            "or requeue or purge the row."
        ]
    if row.backoff is not None and not is_backoff(row.backoff):
        errors["backoff"] = ["Give a non-empty list of positive seconds, e.g. [60, 300, 1800]."]
    elif row.backoff is not None and max(row.backoff) > MAX_DELAY_SECONDS:
        # A retry that far off is past what a date can hold: the write-back could not schedule it.
        errors["backoff"] = [f"Give steps of at most {MAX_DELAY_SECONDS:,} seconds (a hundred years)."]
    return errors


def digest_errors(row: Notification) -> Errors:
    """A digest needs both its key and its window, and a one-shot row: a recurring row's
    firings are each their own message."""
    key, window = row.digest_key, row.digest_window
    if not key and window is None:
        return {}
    if not key:
        return {"digest_key": ["A digest_window needs a digest_key: the rows sent together share it."]}
    if row.recurrence_rule:
        return {"digest_key": ["A recurring row cannot be part of a digest: give a one-shot row a digest_key."]}
    if window is None:
        return {"digest_window": ["A digest_key needs a digest_window: the seconds its digest collects rows."]}
    if not is_positive(window, integer=True):
        return {"digest_window": ["Give a positive number of seconds."]}
    if window > MAX_DELAY_SECONDS:
        return {"digest_window": [f"Give at most {MAX_DELAY_SECONDS:,} seconds (a hundred years)."]}
    return {}


ESCALATE_UNLESS = ("read", "seen")


def escalation_channels(row: Notification, named: list[str]) -> list[str]:
    """The channels the escalation goes out through, not already among `named`: the row
    must be right for them too (an email address for an escalation to email)."""
    to = row.escalate_to if isinstance(row.escalate_to, list) else []
    return [c for c in to if isinstance(c, str) and c not in named]


def escalation_errors(row: Notification, known: tuple[str, ...]) -> Errors:
    """`escalate_after` and `escalate_to` go together, on a one-shot row; `escalate_to` is a
    non-empty list of registered channels, each once; `escalate_unless` is "read" or "seen".
    What the inbox needs of such a row (itself among `channels`, not in `escalate_to`) is
    the inbox channel's rule."""
    after, to, unless = row.escalate_after, row.escalate_to, row.escalate_unless
    errors: Errors = {}
    if unless not in ESCALATE_UNLESS:
        errors["escalate_unless"] = [f"Give {' or '.join(map(repr, ESCALATE_UNLESS))}."]
    if after is None and to in (None, []):
        return errors
    if after is None:
        errors["escalate_after"] = ["An escalate_to needs an escalate_after: the seconds a message may stay unread."]
    elif not is_positive(after, integer=True):
        errors["escalate_after"] = ["Give a positive number of seconds."]
    elif after > MAX_DELAY_SECONDS:
        errors["escalate_after"] = [f"Give at most {MAX_DELAY_SECONDS:,} seconds (a hundred years)."]
    elif row.recurrence_rule:
        errors["escalate_after"] = ["A recurring row cannot escalate: give escalate_after to a one-shot row."]
    elif row.digest_key:
        errors["escalate_after"] = ["A row of a digest cannot escalate: its message is the digest's."]
    if not isinstance(to, list) or not to:
        errors["escalate_to"] = [f"Give a non-empty list of channels to escalate to: {', '.join(map(repr, known))}."]
    else:
        unknown = [c for c in to if c not in known]
        if unknown:
            errors["escalate_to"] = [f"Unknown channel(s): {', '.join(map(repr, unknown))}."]
        elif len(set(to)) != len(to):
            errors["escalate_to"] = ["Each channel may appear only once."]
    return errors


def _sentence(exc: Exception) -> str:
    # Not str.capitalize(): it would lowercase the rest, e.g. the zone name quoted.
    text = str(exc)
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def policy_errors(row: Notification) -> dict[str, list[str]]:
    """Problems that depend on site settings rather than the row alone.

    Checked on every save, but not again by the tick (each channel's `policy_errors`): a
    row saved while a setting allowed it and sent after it changed fails as a delivery
    outcome of that channel, so its other channels still go out.
    """
    errors = channel_hook.channels().policy_errors(row)
    if row.category:
        errors.update(category_errors(row.category))
    return errors


def category_errors(category: str) -> dict[str, list[str]]:
    """A category is a key of NOTIFICATIONS_CATEGORIES (or blank: none)."""
    known = categories()
    if category in known:
        return {}
    shown = ", ".join(map(repr, list(known)[:8])) or "none is configured"
    return {"category": [f"Unknown category {category[:100]!r}: use a key of NOTIFICATIONS_CATEGORIES ({shown})."]}


def stored_attachment_errors(value: Any) -> Errors:
    """Why a row's stored `attachments` list (what `attachments.store` returned) cannot be
    saved: the rules `Notification.full_clean` runs on that field, for a row validated
    before its attachments were stored."""
    messages = text_errors(value) or attachments.describe_errors(value)
    return {"attachments": messages} if messages else {}


def validate(row: Notification, storable: Errors | None = None) -> None:
    """Raise a ValidationError naming each bad field of `row` (`storable`: see `field_errors`)."""
    errors = field_errors(row, storable)
    for field, messages in policy_errors(row).items():
        errors.setdefault(field, []).extend(messages)
    if errors:
        raise ValidationError(errors)


def describe(errors: dict[str, list[str]]) -> str:
    """One line for `last_error`, e.g. `invalid: channels: Unknown channel(s): 'sms'.`"""
    return "invalid: " + "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in errors.items())
