"""Escalation, in memory: after a one-shot row's firing settles, a row with
`escalate_after` waits as a follow-up firing of its own instead of going away.

Why here and driven by the row's fields: the follow-up is a firing like any other (its own
id, owed channels `escalate_to`, the retries, backoff, dead letters, preferences, throttles
and quiet hours of those channels, all the tick's usual route), so the core needs no new
path, only to keep the row with `next_fire_at` at the deadline and `escalation_of` naming
the firing whose message decides. What cancels it is the channel's to say
(`ChannelAnswers.escalation_cancelled`, a filter the claim leaves out and
`notifications.store.escalations` settles): the core never names the inbox.

The deadline counts from the settling time, which follows the message's `created_at` by
the firing's send time (milliseconds): the claim, not this time, decides between a mark
and the escalation.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from notifications.outcomes.kinds import Kind, Outcome

if TYPE_CHECKING:
    from notifications.channels import ChannelResult
    from notifications.models import Notification


def escalates(row: Notification) -> bool:
    """Whether this settled firing of `row` is followed by an escalation: a one-shot row
    with `escalate_after`, not itself the escalation."""
    return bool(row.escalate_after) and row.escalation_of is None and not row.is_recurring


def wait_as_escalation(
    row: Notification, now: datetime, kind: Kind, detail: str, results: list[ChannelResult]
) -> Outcome:
    """Keep `row` as its escalation: a new firing owing `escalate_to`, due at the deadline."""
    assert row.escalate_after is not None
    row.escalation_of = row.firing_id
    row.firing_id = uuid.uuid4()  # the escalation is a message of its own
    row.set_due(now + timedelta(seconds=row.escalate_after))
    row.error_count = 0
    row.dead_lettered_at = None  # the firing's dead letter is in the log; the row waits on
    row.pending_channels = None
    row.pending_recipients = None
    row.last_fired_at = now
    row.release_claim(now)
    return Outcome(row, kind, detail=detail, results=results)
