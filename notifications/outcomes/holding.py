"""Rows held back before they are sent, in memory: too late, inside quiet hours, or held
for a setting of the site (`Hold`, `held_back`, `held_for_setting`, `settle_held`), and
rows that bypassed validation (`settle_invalid`). No query, and no question to a channel
or to validation: the tick hands in what they said. The tick asks before flow control,
so such rows take no rate-limit slot and are never a circuit's probe.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from notifications.outcomes.kinds import Kind, Outcome
from notifications.outcomes.settling import dead_letter, expire
from notifications.rules import expiry, quiet

if TYPE_CHECKING:
    from notifications.conf import Policy, TickSettings
    from notifications.models import Notification


@dataclass(frozen=True)
class Hold:
    """Why a claimed row is not sent now: too late (`EXPIRED`, with `reason`), inside
    quiet hours, or held for a setting of the site (`DEFERRED` until `until`)."""

    kind: Kind
    reason: str = ""
    until: datetime | None = None
    new_due_time: bool = False  # quiet hours: `until` is the firing's due time from now on


# A row that needs a setting of the site while it is unusable (the webhook's signing
# secret, the attachments' storage, ...) is held this long at a time: no retry spent, no
# attempt logged. Every tick reads the settings afresh, so the first tick after the fix sends it.
CONFIGURATION_HOLD = timedelta(seconds=60)  # one cron interval


def held_back(row: Notification, now: datetime, settings: TickSettings) -> Hold | None:
    """Whether `row`, claimed and valid, must not be sent at `now` for its time, and why.
    Changes nothing.

    Too late (past `expires_at`, or more than `max_delay` after the firing was due, however
    long it waited since: retries, an open circuit, a rate limit) expires the firing;
    inside quiet hours defers it to the window's end, unless that end is past `expires_at`
    too. `settings` is the tick's. A row this lets go may still be held for a setting
    (`held_for_setting`).
    """
    late = row.too_late(now)
    if late is not None:
        return Hold(Kind.EXPIRED, reason=late)
    end = quiet.end_of_window(quiet.effective(row.quiet_hours, settings.quiet_hours), row.timezone, now)
    if end is None:
        return None
    past = expiry.past_deadline(end, row.expires_at)
    if past is not None:
        return Hold(Kind.EXPIRED, reason=f"quiet hours end {expiry.describe(past)} past expires_at")
    return Hold(Kind.DEFERRED, until=end, new_due_time=True)


def held_for_setting(trouble: str, now: datetime) -> Hold:
    """A row a setting of the site keeps from sending (`trouble`, as its channel said it:
    `notifications.channels.holds.configuration_hold`), held for CONFIGURATION_HOLD instead
    of spending its retries: a webhook the site cannot sign (NOTIFICATIONS_WEBHOOK_SECRET
    empty, the warning notifications.W010, or malformed, E010), email that would go through
    the queue itself or an alias that names no mailer (E022)."""
    return Hold(Kind.DEFERRED, reason=f"held: {trouble}", until=now + CONFIGURATION_HOLD)


def settle_held(row: Notification, hold: Hold, now: datetime) -> Outcome:
    """Apply a `Hold` to `row`: nothing was sent, no retry is spent."""
    if hold.kind == Kind.DEFERRED and hold.until is not None:
        if hold.new_due_time:
            row.set_due(hold.until)
        else:  # held for a setting: the firing waits, still due when it was
            row.wait_until(hold.until)
        row.release_claim(now)
        detail = hold.reason or f"quiet hours until {hold.until:%Y-%m-%d %H:%M} UTC"
        return Outcome(row, Kind.DEFERRED, detail=detail)
    return expire(row, now, hold.reason)


def settle_invalid(row: Notification, reason: str, now: datetime, policy: Policy) -> Outcome:
    """A row that bypassed validation cannot be delivered: dead-letter it with the reason
    (`notifications.models.validation.describe` of its errors)."""
    return dead_letter(row, now, reason, policy, skip_forward=False, escalate=False)
