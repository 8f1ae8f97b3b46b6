"""Field rules of a Notification, in one place.

`Notification.clean()` raises them as a ValidationError for every path the app owns
(API, admin, forms); the tick runs the same rules on claimed rows, so a row that
reached the table some other way (raw SQL, `bulk_create`) is dead-lettered with the
message instead of crashing the tick.
"""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import validate_email

from . import guard, schedule
from .channels.email import template_errors

if TYPE_CHECKING:
    from .models import Notification

CHANNELS = ("email", "webhook")
SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret
MIN_SECRET_BYTES = 24


def channel_errors(channels: Any) -> list[str]:
    if not isinstance(channels, list) or not channels:
        return ["Give a non-empty list of channels: 'email', 'webhook'."]
    unknown = [c for c in channels if c not in CHANNELS]
    if unknown:
        return [f"Unknown channel(s): {', '.join(map(repr, unknown))}. Use 'email' or 'webhook'."]
    if len(set(channels)) != len(channels):
        return ["Each channel may appear only once."]
    return []


def url_errors(url: str) -> list[str]:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        return [f"Not a valid URL: {exc}."]
    if parts.scheme not in ("http", "https"):
        return ["Webhook URLs must use http or https."]
    if not parts.hostname:
        return ["The webhook URL has no host."]
    if parts.username is not None or parts.password is not None:
        return ["Put credentials in the payload or the signature, not in the URL."]
    return []


def address_errors(url: str) -> list[str]:
    """A URL whose host is a literal refused address (any spelling) is refused up front.

    Names are checked when the tick resolves them (see `notifications.guard`): their
    addresses can change, so a check now would prove nothing then.
    """
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return []
    refused = guard.literal_refusal(host) if host else None
    if refused is None:
        return []
    address, reason = refused
    shown = host if host == str(address) else f"{host} ({address})"
    return [
        f"Webhooks may not reach {shown}: it is {reason}. Use a public address, or open the range "
        "on purpose with NOTIFICATIONS_WEBHOOK_ALLOWED_NETWORKS."
    ]


def secret_errors(secret: str) -> list[str]:
    """A signing secret is `whsec_` followed by base64 of at least 24 bytes."""
    if not secret.startswith(SECRET_PREFIX):
        return [f"A webhook secret starts with {SECRET_PREFIX!r}."]
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        return [f"A webhook secret is {SECRET_PREFIX!r} followed by base64."]
    if len(key) < MIN_SECRET_BYTES:
        return [f"A webhook secret must hold at least {MIN_SECRET_BYTES} bytes."]
    return []


def field_errors(row: Notification) -> dict[str, list[str]]:
    """Every problem of `row`, by field name; empty when the row can be delivered."""
    errors: dict[str, list[str]] = {}

    def add(field: str, messages: list[str]) -> None:
        if messages:
            errors.setdefault(field, []).extend(messages)

    add("channels", channel_errors(row.channels))
    channels = row.channels if isinstance(row.channels, list) else []
    if "email" in channels:
        if not row.email_to:
            add("email_to", ["The email channel needs a recipient."])
        else:
            try:
                validate_email(row.email_to)
            except ValidationError:
                add("email_to", ["Enter a valid email address."])
    if "webhook" in channels and not row.webhook_url:
        add("webhook_url", ["The webhook channel needs a URL."])
    if row.webhook_url:
        add("webhook_url", url_errors(row.webhook_url))
    if row.webhook_secret:
        add("webhook_secret", secret_errors(row.webhook_secret))
    if not isinstance(row.payload, dict):
        add("payload", ["The payload must be a JSON object."])
    if "email" in channels:
        # Subject and body are Django templates rendered with the payload at send time.
        add("subject", template_errors(row.subject or ""))
        add("body", template_errors(row.body or ""))
    try:
        schedule.get_zone(row.timezone)
    except schedule.InvalidRule as exc:
        add("timezone", [_sentence(exc)])
    if row.recurrence_rule:
        try:
            schedule.validate_rule(row.recurrence_rule)
        except schedule.InvalidRule as exc:
            add("recurrence_rule", [_sentence(exc)])
    return errors


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
    if row.webhook_url and not url_errors(row.webhook_url):
        messages = address_errors(row.webhook_url)
        if messages:
            return {"webhook_url": messages}
    return {}


def validate(row: Notification) -> None:
    """Raise a ValidationError naming each bad field of `row`."""
    errors = field_errors(row)
    for field, messages in policy_errors(row).items():
        errors.setdefault(field, []).extend(messages)
    if errors:
        raise ValidationError(errors)


def describe(errors: dict[str, list[str]]) -> str:
    """One line for `last_error`, e.g. `invalid: channels: Unknown channel(s): 'sms'.`"""
    return "invalid: " + "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in errors.items())
