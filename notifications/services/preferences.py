"""Recipients' choices: `set_preference` saves one, `preferences` reads what is in effect."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from notifications.channels import registry
from notifications.conf import categories
from notifications.models import Preference
from notifications.models.addresses import bare, is_valid
from notifications.models.recipients import MAX_KEY_CHARS
from notifications.rules import categories as rules


def recipient_errors(recipient: Any) -> list[str]:
    if not isinstance(recipient, str) or not recipient.strip():
        return ["Give the recipient's id (e.g. user:42) or an email address."]
    if len(recipient) > MAX_KEY_CHARS:
        return [f"At most {MAX_KEY_CHARS} characters."]
    if "\x00" in recipient:
        return ["A recipient may not hold a NUL character."]
    return []


def recipient_key(recipient: str) -> str:
    """How a recipient is stored: an email address as the tick spells it (`addresses.bare`:
    `Ada@Example.com` is `ada@example.com`), any other id as given."""
    if isinstance(recipient, str) and "@" in recipient and is_valid(recipient):
        return bare(recipient)
    return recipient


def set_preference(recipient: str, category: str, enabled: bool, channel: str = "") -> Preference:
    """Save `recipient`'s choice for `category` on `channel` (blank: every channel).

    Raises ValidationError on `category` for an unknown or a required one (it cannot be
    turned off), on `channel` for a channel the site does not have, on `recipient` for a
    blank or too long one. Concurrent calls leave one preference: the last one wins.
    """
    known = categories()
    recipient = recipient_key(recipient)
    errors: dict[str, list[str]] = {}
    if recipient_errors(recipient):
        errors["recipient"] = recipient_errors(recipient)
    if not isinstance(category, str) or category not in known:
        errors["category"] = [f"Unknown category {str(category)[:100]!r}: use a key of NOTIFICATIONS_CATEGORIES."]
    elif known[category].required:
        errors["category"] = [f"{known[category].label} is required: it is always sent and cannot be turned off."]
    if not isinstance(channel, str) or (channel and channel not in registry.audience_names()):
        errors["channel"] = [
            f"Unknown channel {str(channel)[:20]!r}: use one of {', '.join(registry.audience_names())}."
        ]
    if errors:
        raise ValidationError(errors)
    for _ in range(3):  # a concurrent first save of the same preference: update it instead
        try:
            with transaction.atomic():
                pref, _created = Preference.objects.update_or_create(
                    recipient=recipient, category=category, channel=channel, defaults={"enabled": bool(enabled)}
                )
            return pref
        except IntegrityError:
            continue
    raise RuntimeError("the preference could not be saved: it kept being created and deleted")


def preferences(recipient: str) -> dict[str, dict[str, bool]]:
    """`{category: {channel: enabled}}`, in effect for `recipient`, for every category and
    every channel (built-in and the site's): a choice for the channel beats one for every
    channel, which beats the category's default; required categories are always on."""
    recipient = recipient_key(recipient)
    choices = Preference.objects.choices_of([recipient]).get(recipient, {})
    return rules.table(categories().values(), registry.audience_names(), choices)
