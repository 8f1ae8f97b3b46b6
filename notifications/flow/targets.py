"""Targets: where a row's channels deliver, the unit of flow control. The one definition.

Each channel says where it delivers a row (`Channel.target`): a webhook's target is its
URL's host (`notifications.rules.hosts`), every other channel's its own name (`email`,
`sms`) unless its class says otherwise. A row with several channels has several targets:
it is held while any is, and takes a slot of each rate limit. The dispatcher, the circuit
breaker and the rate limits all read a row's targets from here, so a row is queued,
capped, held and limited under the same names. The tick works them out once per firing
(`targets_by_channel`) and carries them on: flow control, the dispatcher and the
write-back take them as they are (`RowTargets`, `distinct`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from notifications.channels import registry
from notifications.models import Notification
from notifications.rules.hosts import DEFAULT_PORTS, ascii_host, host_target

if TYPE_CHECKING:
    from notifications.channels.base import ChannelAnswers

# One row's targets: channel -> where it delivers, for the channels its firing owes.
Targets = Mapping[str, str]
# A batch's: row pk -> its targets.
RowTargets = Mapping[Any, Targets]

__all__ = [
    "DEFAULT_PORTS",
    "RowTargets",
    "Targets",
    "ascii_host",
    "channel_target",
    "dispatch_target",
    "distinct",
    "host_target",
    "targets_by_channel",
    "targets_of",
]


# A channel by name, None for a name no channel has: the registry's (`registry.channel`),
# or a tick's own instances (`dict.get` of `registry.open_for_tick`).
Lookup = Callable[[str], "ChannelAnswers | None"]


def channel_target(row: Notification, channel: str, lookup: Lookup = registry.channel) -> str:
    """The target of one of `row`'s channels; "" for a name no registered channel has."""
    found = lookup(channel)
    return found.target(row) if found is not None else ""


def targets_of(row: Notification) -> list[str]:
    """The targets of the channels the row's current firing still owes, in channel order."""
    return distinct(targets_by_channel(row))


def distinct(targets: Targets) -> list[str]:
    """A row's targets (`targets_by_channel`) each once, in channel order, "" left out."""
    return list(dict.fromkeys(t for t in targets.values() if t))


def targets_by_channel(row: Notification, lookup: Lookup = registry.channel) -> dict[str, str]:
    """channel -> its target, for the channels the row's current firing still owes."""
    return {channel: channel_target(row, channel, lookup) for channel in row.owed_channels}


def dispatch_target(row: Notification, targets: Targets | None = None, lookup: Lookup = registry.channel) -> str:
    """The one target a row waits on in the tick's dispatcher: that of the owed channel of
    the highest `dispatch_rank` (a webhook's host: one slow host must not hold every
    worker), the first listed among equals; "" when it owes none. `targets`: the row's
    `targets_by_channel`, when worked out already."""
    best, rank = "", -1
    for name in row.owed_channels:
        found = lookup(name)
        if found is not None and found.dispatch_rank > rank:
            best, rank = targets[name] if targets is not None else found.target(row), found.dispatch_rank
    return best
