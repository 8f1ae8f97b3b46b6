"""Field rules of a Notification, in one place.

`Notification.clean()` raises them as a ValidationError for every path the app owns
(API, admin, forms); the tick runs the same rules on claimed rows, so a row that
reached the table some other way (raw SQL, `bulk_create`) is dead-lettered with the
message instead of crashing the tick.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import requests
from django.core.exceptions import ValidationError
from django.utils import timezone

from notifications import registry
from notifications.conf import (
    MAX_DELAY_SECONDS,
    Defaults,
    app_settings,
    categories,
    is_backoff,
    is_positive,
    parse_networks,
)
from notifications.content import email as email_content
from notifications.content.templating import template_errors
from notifications.databases import MARIADB_JSON_DEPTH
from notifications.models import addresses, attachments
from notifications.rules import headers as header_rules
from notifications.rules import network, quiet, schedule
from notifications.rules.secrets import secret_errors

if TYPE_CHECKING:
    from notifications.models.notification import Notification

# Levels of nested objects and lists a payload may have. Real payloads need a handful;
# recursive JSON encoders and decoders (Python's among them) fail near 1,000, so a deeper
# row could be saved but neither sent nor shown.
MAX_PAYLOAD_DEPTH = 32
# UTF-8 bytes of the email body (a template). TextField has no limit of its own, and a
# body is loaded, parsed and rendered for every firing like the payload; 64 KiB of
# plain text is far more than any reminder needs. The subject is bounded by its column.
MAX_BODY_BYTES = 64 * 1024
# A row's `key` is unique among rows that have one (at most 200 characters: its column).
# The database decides (the constraint `notification_key_unique`); schedule(key=...,
# on_conflict="error") reports a taken key with this message on `key`.
# UTF-8 bytes of a queued message's text (its body and every alternative together): sent as
# it is, never parsed as a template, so it may be far longer than a template body.
MAX_MESSAGE_BYTES = 2 * 1024 * 1024
PRIORITIES = ("now", "high", "normal", "low")
KEY_TAKEN = 'Another notification has this key (schedule() with on_conflict="replace" or "keep" reuses it).'


ROUTINGS = ("all", "first")


def _choices(names: tuple[str, ...]) -> str:
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def channel_errors(channels: Any) -> list[str]:
    """A non-empty list of registered channels (`notifications.registry`), each once."""
    names = registry.names()
    if not isinstance(channels, list) or not channels:
        return [f"Give a non-empty list of channels: {', '.join(map(repr, names))}."]
    unknown = [c for c in channels if not registry.known(c)]
    if unknown:
        return [f"Unknown channel(s): {', '.join(map(repr, unknown))}. Use {_choices(names)}."]
    if len(set(channels)) != len(channels):
        return ["Each channel may appear only once."]
    return []


def channel_data_errors(row: Notification, channels: list[str]) -> Errors:
    """`channel_data` is an object; each site channel of the row has its entry, as its
    `validate` accepts it (`Channel.row_errors`)."""
    if not isinstance(row.channel_data, dict):
        return {"channel_data": ['Give a JSON object of channel name -> its data, e.g. {"sms": {"to": "+1..."}}.']}
    errors: Errors = {}
    for name in channels:
        found = registry.channel(name) if isinstance(name, str) else None
        if found is None or registry.is_built_in(name):
            continue
        for field, messages in found.row_errors(row).items():
            errors.setdefault(field, []).extend(messages)
    return errors


def routing_errors(routing: Any) -> list[str]:
    if routing not in ROUTINGS:
        return [f"Give {_choices(ROUTINGS)}."]
    return []


# A host name is at most 253 characters (RFC 1034 3.1), as Django's URLValidator says for
# rows it sees; a longer one (reached by bulk_create) would not fit the flow-control
# columns its target is stored in (Target, RateBucket) and crash every tick.
MAX_HOST_CHARS = 253


def host_length(host: str) -> int:
    """Characters of `host` as DNS spells it (IDNA-encoded), or as typed if it cannot be."""
    try:
        return len(host.encode("idna"))
    except UnicodeError:  # a label over 63 characters, or not encodable: count what is there
        return len(host.encode("utf-8", "replace"))


def url_errors(url: str) -> list[str]:
    """A webhook URL is http(s) with a host, a valid port and no credentials.

    The webhook channel applies the same rule again at send time, to rows that reached
    the table without validation.
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        return [f"Not a valid URL: {exc}."]
    if parts.scheme not in ("http", "https"):
        return ["Webhook URLs must use http or https."]
    if not parts.hostname:
        return ["The webhook URL has no host."]
    if host_length(parts.hostname) > MAX_HOST_CHARS:
        return [f"The webhook URL's host is longer than {MAX_HOST_CHARS} characters."]
    if parts.username is not None or parts.password is not None:
        return ["Put credentials in the payload or the signature, not in the URL."]
    if not parts.hostname.isascii():
        try:  # as the request will name it: requests IDNA-encodes the host (IDNA 2008)
            requests.PreparedRequest().prepare_url(url, None)
        except requests.exceptions.InvalidURL:
            return ["The webhook URL's host is not a name a request can be sent to (IDNA)."]
    return []


def allowed_networks() -> tuple[Any, ...]:
    """NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS parsed (`conf.parse_networks`), once per value
    of the setting rather than once per row validated."""
    value = app_settings.WEBHOOK_ALLOWED_NETWORKS
    if isinstance(value, list | tuple) and all(isinstance(entry, str) for entry in value):
        return _parsed_networks(tuple(value))
    return parse_networks(value)


@functools.lru_cache(maxsize=16)
def _parsed_networks(entries: tuple[str, ...]) -> tuple[Any, ...]:
    return parse_networks(entries)


def address_errors(url: str) -> list[str]:
    """A URL whose host is a literal refused address (any spelling) is refused up front.

    Names are checked when the tick resolves them (see `notifications.channels.http.guard`): their
    addresses can change, so a check now would prove nothing then.
    """
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return []
    refused = network.literal_refusal(host, allowed_networks()) if host else None
    if refused is None:
        return []
    address, reason = refused
    shown = host if host == str(address) else f"{host} ({address})"
    return [
        f"Webhooks may not reach {shown}: it is {reason}. Use a public address, or open the range "
        "on purpose with NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS."
    ]


PAYLOAD_SETTING = "NOTIFICATIONS_MAX_PAYLOAD_BYTES"


def max_payload_bytes() -> int:
    """NOTIFICATIONS_MAX_PAYLOAD_BYTES, or its default while it is misconfigured (check E016 says so)."""
    limit: object = app_settings.MAX_PAYLOAD_BYTES
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        return Defaults.MAX_PAYLOAD_BYTES
    return limit


def max_payload_depth() -> int:
    """MAX_PAYLOAD_DEPTH, or less where the queue's database cannot store that much nesting
    (MariaDB: 31, see `notifications.databases.json_depth_limit`)."""
    from django.db import connections, router

    from notifications.databases import json_depth_limit
    from notifications.models.notification import Notification  # imported here: it imports this module

    limit = json_depth_limit(connections[router.db_for_write(Notification) or "default"])
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


def payload_unencodable(payload: Any) -> bool:
    """Whether `payload` cannot be encoded as JSON at all (an integer of 4,300+ digits, a set,
    nesting too deep): Django's own JSONField check would raise on it, not refuse it."""
    try:
        text = json.dumps(payload)  # a nesting thousands deep raises RecursionError here, at once
    except (TypeError, ValueError, RecursionError):
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
    webhook sends.
    """
    if not isinstance(payload, dict):
        return ["The payload must be a JSON object."]
    limit = max_payload_bytes()
    too_deep, at_least = _measure(payload, stop_above=limit)
    if too_deep:
        return [f"The payload is nested deeper than {max_payload_depth()} levels."]
    too_large = [f"The payload is larger than {limit:,} bytes of compact JSON ({PAYLOAD_SETTING})."]
    if at_least > limit:
        return too_large  # known without encoding it
    try:
        size = len(json.dumps(payload, separators=(",", ":"), allow_nan=False))  # ASCII: characters are bytes
    except (TypeError, ValueError) as exc:  # a date, a set, NaN, an integer of 4,300+ digits
        return [f"The payload must hold only JSON values: {exc}."]
    return too_large if size > limit else []


def body_errors(body: str) -> list[str]:
    """The email body is at most MAX_BODY_BYTES of UTF-8."""
    # Characters never outnumber UTF-8 bytes: a long body is refused without encoding it.
    if len(body) > MAX_BODY_BYTES or len(body.encode("utf-8", "surrogatepass")) > MAX_BODY_BYTES:
        return [f"The body is larger than {MAX_BODY_BYTES:,} bytes."]
    return []


Errors = dict[str, list[str]]

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
NUL_MESSAGE = "Remove the NUL character (\\u0000): no database stores it."
SURROGATE_MESSAGE = "Remove the unpaired surrogate (\\ud800-\\udfff): it is not Unicode text."


def text_errors(value: Any) -> list[str]:
    """Why the string `value` (or any string inside a list or object, keys too) cannot be
    stored: a NUL, or an unpaired surrogate. Iterative: no depth raises RecursionError."""
    if not value:  # most of a row's fields: blank, empty or None
        return []
    if type(value) is str and value.isascii():  # no surrogate: a NUL is all there is to find
        return [NUL_MESSAGE] if "\x00" in value else []
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
    for name in (*TEXT_FIELDS, *ADDRESS_FIELDS, *JSON_FIELDS):
        messages = text_errors(getattr(row, name, None))
        if messages:
            errors[name] = messages
    return errors


def field_errors(row: Notification, storable: Errors | None = None) -> Errors:
    """Every problem of `row`, by field name; empty when the row can be delivered.

    `storable`: `storable_errors(row)` when the caller has just computed it."""
    channels = row.channels if isinstance(row.channels, list) else []
    known = storable if storable is not None else storable_errors(row)
    errors: Errors = {field: list(messages) for field, messages in known.items()}
    unstorable = set(errors)
    for part in (
        {"channels": channel_errors(row.channels), "routing": routing_errors(row.routing)},
        channel_data_errors(row, channels),
        _email_errors(row) if "email" in channels else {},
        _webhook_errors(row, needed="webhook" in channels),
        {"payload": payload_errors(row.payload)},
        _schedule_errors(row),
        _limit_errors(row),
        _delivery_errors(row, email="email" in channels),
        digest_errors(row),
    ):
        for field, messages in part.items():
            if messages and field not in unstorable:
                errors.setdefault(field, []).extend(messages)
    if "email" not in channels:  # the body is bounded whatever the channels
        body = body_errors(row.body or "")
        if body:
            errors["body"] = body
    return errors


def _email_errors(row: Notification) -> Errors:
    """Recipients, language, and the message: subject, body and html_body (templates rendered
    with the payload at send time), or `template`, a prefix of the site's template files."""
    has_copies = bool(addresses.as_list(row.email_cc) or addresses.as_list(row.email_bcc))
    errors: Errors = {
        "email_to": addresses.errors(row.email_to, single=True, required=not has_copies),
        "email_cc": addresses.errors(row.email_cc, single=False),
        "email_bcc": addresses.errors(row.email_bcc, single=False),
        "reply_to": addresses.errors(row.reply_to, single=False),
    }
    if not any(errors.values()):
        errors["email_to"] = addresses.too_many(row.email_to, row.email_cc, row.email_bcc)
    if row.from_email and not addresses.is_valid(row.from_email):
        errors["from_email"] = [
            f"Enter a valid address, e.g. Billing <billing@example.com>, not {row.from_email[:80]!r}."
        ]
    errors["headers"] = header_rules.errors(row.headers)
    if row.language:
        errors["language"] = email_content.language_errors(row.language)
    if row.message is not None:
        errors["body"] = message_errors(row)
        return errors
    if row.template:
        errors["template"] = email_content.template_field_errors(row.template)
        for name in ("subject", "body", "html_body"):
            if getattr(row, name):
                errors[name] = ["Leave this blank: the template's files give the message."]
        return errors
    # An oversized body is not worth parsing as a template.
    errors["subject"] = template_errors(row.subject or "")
    errors["body"] = body_errors(row.body or "") or template_errors(row.body or "")
    errors["html_body"] = body_errors(row.html_body or "") or template_errors(row.html_body or "")
    return errors


def message_errors(row: Notification) -> list[str]:
    """A message queued by QueuedEmailBackend: its extras are an object, its text bounded."""
    extras = row.message
    alternatives = extras.get("alternatives", []) if isinstance(extras, dict) else None
    if not isinstance(alternatives, list) or not all(
        isinstance(a, dict) and isinstance(a.get("mimetype"), str) for a in alternatives
    ):
        return ["This row's queued message is malformed (its alternatives are not a list of parts)."]
    # surrogatepass: a lone surrogate is refused on its field (`storable_errors`), not here.
    size = len((row.body or "").encode("utf-8", "surrogatepass"))
    for alternative in alternatives:
        content = alternative.get("content")
        size += len(content.encode("utf-8", "surrogatepass")) if isinstance(content, str) else len(str(content))
    if size > MAX_MESSAGE_BYTES:
        return [f"The message's text is larger than {MAX_MESSAGE_BYTES:,} bytes."]
    return []


def _delivery_errors(row: Notification, *, email: bool) -> Errors:
    """Attachments (email only, within the size limit) and the priority."""
    errors: Errors = {}
    if row.attachments:
        errors["attachments"] = (
            attachments.describe_errors(row.attachments) if email else ["Attachments go with the email channel."]
        )
    elif row.attachments is None or not isinstance(row.attachments, list):
        errors["attachments"] = ["Give a list of attachments."]
    if row.priority not in PRIORITIES:
        errors["priority"] = [f"Give one of {', '.join(map(repr, PRIORITIES))}."]
    return errors


def _webhook_errors(row: Notification, *, needed: bool) -> Errors:
    if not row.webhook_url:
        return {"webhook_url": ["The webhook channel needs a URL."] if needed else []}
    secret = secret_errors(row.webhook_secret) if row.webhook_secret else []
    return {"webhook_url": url_errors(row.webhook_url), "webhook_secret": secret}


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


def _sentence(exc: Exception) -> str:
    # Not str.capitalize(): it would lowercase the rest, e.g. the zone name quoted.
    text = str(exc)
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def policy_errors(row: Notification) -> dict[str, list[str]]:
    """Problems that depend on site settings rather than the row alone.

    Checked on every save, but not again by the tick: a row saved while a range was
    open and sent after it closed fails as `webhook: blocked address` (a delivery
    outcome, so an email channel of the same row still goes out).
    """
    errors: dict[str, list[str]] = {}
    if row.webhook_url and not url_errors(row.webhook_url):
        messages = address_errors(row.webhook_url)
        if messages:
            errors["webhook_url"] = messages
    if row.category:
        errors.update(category_errors(row.category))
    if row.mailer:
        from notifications.mailers import problem

        trouble = problem(row.mailer)
        if trouble is not None:
            errors["mailer"] = [f"{trouble[:1].upper()}{trouble[1:]}."]
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
