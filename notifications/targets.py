"""Targets: where a row's channels deliver, the unit of flow control.

A webhook's target is its URL's host, lowercased, with `:port` when the port is not
the scheme's default (`notifications.dispatch.target_of`, the one definition); email's
is the word `email`. A row with both channels has two targets: it is held while either
is, and takes a slot of each rate limit.
"""

from __future__ import annotations

from .dispatch import target_of
from .models import Notification

EMAIL = "email"


def channel_target(row: Notification, channel: str) -> str:
    """The target of one of `row`'s channels."""
    if channel == "webhook":
        return target_of(row) if row.webhook_url else ""
    return EMAIL


def targets_of(row: Notification) -> list[str]:
    """The targets of the channels the row's current firing still owes, in channel order."""
    targets = [channel_target(row, channel) for channel in row.owed_channels]
    return list(dict.fromkeys(t for t in targets if t))
