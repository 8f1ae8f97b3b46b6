"""Holds for a setting: why a setting of the site keeps one of a row's channels from
sending it now (each channel says what holds it: `Channel.held`). The tick asks its own
channel instances, the admin's status column the registry's."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from notifications.channels.base import Channel
    from notifications.conf import TickSettings
    from notifications.models import Notification


def configuration_hold(
    row: Notification, channel: Callable[[str], Channel | None], settings: TickSettings | None = None
) -> str | None:
    """Why a setting keeps one of the channels `row` owes from sending it now, or None.
    `channel`: a channel by name (None for a name no channel has)."""
    for name in row.owed_channels:
        found = channel(name)
        trouble = found.held(row, settings) if found is not None else None
        if trouble is not None:
            return trouble
    return None
