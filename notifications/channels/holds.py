"""Holds for a setting: why a setting of the site keeps one of a row's channels from
sending it now (each channel says what holds it: `Channel.held`). The tick asks its own
channel instances, the admin's status column the registry's.

A setting only some rows need never stops the rest (a webhook the site cannot sign,
W010/E010; email through the queue itself or a mailer that is none, W022/W027;
attachments in an unknown or relative storage, W024/W028; unsubscribe links without a
usable public URL, W041; a site channel whose class cannot be loaded, W030/W031): the
rows that need it are held (no retry spent) and the first tick after the fix sends them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from notifications.channels.base import ChannelAnswers
    from notifications.conf import TickSettings
    from notifications.models import Notification


def configuration_hold(
    row: Notification, channel: Callable[[str], ChannelAnswers | None], settings: TickSettings | None = None
) -> str | None:
    """Why a setting keeps one of the channels `row` owes from sending it now, or None.
    `channel`: a channel by name (None for a name no channel has)."""
    for name in row.owed_channels:
        found = channel(name)
        trouble = found.held(row, settings) if found is not None else None
        if trouble is not None:
            return trouble
    return None
