"""The channels' part of validating a row: every registered channel's `RowAnswers`, asked
through the registry. Installed into the models by `NotificationsConfig.ready()`
(`notifications.models.channel_hook`), so `Notification.full_clean()` runs it on every
save without the models naming the registry or any channel.

Names no channel itself: each says what is wrong with a row for it (`row_errors` on a row
that names it, `unnamed_errors` on one that does not, `policy_errors` on every row).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from notifications.channels import registry

if TYPE_CHECKING:
    from notifications.channels.base import ChannelAnswers
    from notifications.models import Notification

Errors = dict[str, list[str]]


def names() -> tuple[str, ...]:
    return registry.names()


def _choices(choices: tuple[str, ...]) -> str:
    quoted = [repr(n) for n in choices]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def list_errors(channels: Any) -> list[str]:
    """A non-empty list of registered channels (`notifications.channels.registry`), each once."""
    offered = registry.offered_names()  # an internal channel (`task`) is no choice to offer
    if not isinstance(channels, list) or not channels:
        return [f"Give a non-empty list of channels: {', '.join(map(repr, offered))}."]
    unknown = [c for c in channels if not registry.known(c)]
    if unknown:
        return [f"Unknown channel(s): {', '.join(map(repr, unknown))}. Use {_choices(offered)}."]
    if len(set(channels)) != len(channels):
        return ["Each channel may appear only once."]
    return []


def row_errors(row: Notification, named: list[str]) -> Errors:
    """What each registered channel finds wrong with `row`: a channel the row names its
    `row_errors`, any other its `unnamed_errors` (its own fields, given anyway)."""
    errors: Errors = {}
    for name in registry.names():
        found = registry.channel(name)
        if found is None:
            continue
        part = found.row_errors(row) if name in named else found.unnamed_errors(row)
        for field, messages in part.items():
            if messages:
                known = errors.setdefault(field, [])
                # Channels that render the same fields alike (email, inbox) say it once.
                known.extend(m for m in messages if m not in known)
    if not isinstance(row.channel_data, dict):
        errors.pop("channel_data", None)  # the core says what it must be first
    return errors


def policy_errors(row: Notification) -> Errors:
    """What the site's settings refuse in `row`, by field: every registered channel's
    `policy_errors`, named by the row or not."""
    errors: Errors = {}
    for name in registry.names():
        found = registry.channel(name)
        for field, messages in (found.policy_errors(row) if found is not None else {}).items():
            if messages:
                errors.setdefault(field, []).extend(messages)
    return errors


def _named(named: list[str]) -> list[ChannelAnswers]:
    """The registered channels of the names in `named`, in order."""
    return [found for found in map(registry.channel, named) if found is not None] if named else []


def take_attachments(named: list[str]) -> bool:
    return any(c.takes_attachments for c in _named(named))


def bound_body(named: list[str]) -> bool:
    return any(c.bounds_body for c in _named(named))


def attachments_refused() -> str:
    """Why a row none of whose channels takes attachments may not carry any."""
    takers = [name for name in registry.names() if getattr(registry.channel(name), "takes_attachments", False)]
    return f"Attachments go with the {' or '.join(takers) or 'no'} channel."
