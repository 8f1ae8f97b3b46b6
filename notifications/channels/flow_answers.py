"""What flow control and the tick's holds ask of a channel (`FlowAnswers`): where it sends
a row, and whether a setting of the site keeps it from sending.

Asked by `notifications.flow` (targets, the circuit breaker, rate limits), the tick's
holds (`notifications.outcomes.holding`) and the queue's health. The defaults fit a
channel with one receiver and no setting of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django.db.models import Q

    from notifications.conf import TickSettings
    from notifications.models import Notification


@dataclass(frozen=True)
class SettingHold:
    """A setting of the site that keeps a channel from sending some of its rows, as the
    queue's health reports it (`FlowAnswers.setting_holds`; `FlowAnswers.held` says it of one row)."""

    problem: str  # why, starting with the channel's name: `webhook: NOTIFICATIONS_WEBHOOK_SECRET is empty`
    rows: Q  # the rows it holds, a filter of `Notification`
    headline: str  # what an operator reads first: `Webhooks are held: ...`
    remedy: str  # what to do, after how many rows wait: `for a key to sign with (...): set ...`

    def warning(self, waiting: int) -> str:
        rows = "1 row waits" if waiting == 1 else f"{waiting} rows wait"
        return f"{self.headline}. {rows} {self.remedy}"


class FlowAnswers:
    name: str = ""
    # Rows owing several channels queue in the tick under the target of the channel with the
    # highest rank (first listed among equals): a channel whose targets are many independent
    # receivers, one of which may hang (webhook hosts), ranks above one with a single target.
    dispatch_rank: int = 0

    def target(self, row: Notification) -> str:
        """Where this channel delivers `row`, the unit of flow control (circuit breaker, rate
        limits, the tick's per-target queues): its name unless the class says otherwise."""
        return self.name

    def held(self, row: Notification, settings: TickSettings | None = None) -> str | None:
        """Why the site's configuration keeps this channel from sending `row` now (a setting
        to fix, not a failure of the row: the tick holds it, spending no retry, and the
        admin says why), or None. `settings` is the tick's snapshot (None: read them now)."""
        return None

    def setting_holds(self) -> list[SettingHold]:
        """While settings of the site (read now) keep this channel from sending rows: for each,
        why, which rows, and what to do, for the queue's health and `notifications_status`;
        empty while none does. The whole picture of what `held` says row by row."""
        return []
