"""Settling cancelled escalations: rows waiting as an escalation (`escalation_of`) whose
message reached `escalate_unless` before a claim took them go away, and the delivery log
records each of their channels as `cancelled: read` (or `seen`).

What "cancelled" means is the channels' to say (`registry.escalation_cancelled`); the claim
(`claims.selection`) leaves the same rows out, so a mark committed before the claim always
wins and such a row is never sent. Run by the tick before it claims.
"""

from __future__ import annotations

from datetime import datetime

from django.db import connection, transaction
from django.db.models import Q

from notifications.channels import registry
from notifications.models import DeliveryAttempt, Notification

BATCH = 500  # rows settled per statement; the rest wait for the next tick


def settle_cancelled(now: datetime) -> int:
    """Delete up to BATCH cancelled escalations not held by a live claim, logging each; returns how many."""
    cancelled = registry.escalation_cancelled()
    if cancelled is None:
        return 0
    unclaimed = Q(claim_token__isnull=True) | Q(claimed_until__lt=now)
    found = Notification.objects.filter(unclaimed, cancelled, escalation_of__isnull=False)
    if not found.exists():  # the usual tick: one read off the escalation index, no transaction
        return 0
    with transaction.atomic():
        locked = (
            found.select_for_update(skip_locked=True)
            if connection.features.has_select_for_update_skip_locked
            else found
        )
        rows = list(locked.values("pk", "firing_id", "escalate_to", "escalate_unless", "recipient")[:BATCH])
        if not rows:
            return 0
        DeliveryAttempt.objects.bulk_create(
            [
                DeliveryAttempt(
                    notification_id=row["pk"],
                    firing_id=row["firing_id"],
                    channel=str(channel)[:16],
                    recipient=row["recipient"] or "",
                    summary=f"cancelled: {row['escalate_unless']}",
                    outcome=DeliveryAttempt.AttemptOutcome.CANCELLED,
                    error="",
                    attempted_at=now,
                )
                for row in rows
                for channel in (row["escalate_to"] if isinstance(row["escalate_to"], list) else [])
            ]
        )
        found.filter(pk__in=[row["pk"] for row in rows]).delete()
    return len(rows)
