"""What a firing came to (`Kind`, `Outcome`) and the counts of a tick's summary (`TICK_COUNTS`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from notifications.channels import ChannelResult
    from notifications.models import Notification


class Kind(StrEnum):
    """What a firing came to. Counted in the tick's summary line."""

    SUCCEEDED = "succeeded"
    PARTIAL = "partial"
    RETRIED = "retried"
    DEAD_LETTERED = "dead_lettered"
    EXPIRED = "expired"  # not sent: too late (`expires_at`, `max_delay`)
    DEFERRED = "deferred"  # not sent yet: quiet hours, an open circuit or a rate limit
    SKIPPED = "skipped"  # every channel skipped: the recipient turned it off, or a throttle
    RELEASED = "released"  # not attempted (the tick was stopping): claim handed back


# The counts of the tick's summary line and of its `TickRun` record, in the line's order.
TICK_COUNTS = ("claimed", *(kind.value for kind in Kind))


@dataclass
class Outcome:
    """One row's result in a tick: what happened, and whether the row goes away."""

    row: Notification
    kind: Kind
    delete: bool = False
    detail: str = ""
    results: list[ChannelResult] = field(default_factory=list)
    # A send of this firing still runs past its deadline (the monitor left it behind): the
    # write-back keeps the row claimed, and the tick renews the claim until the send returns,
    # so a retry never runs beside it (`notifications.tick.overruns`).
    still_sending: bool = False
