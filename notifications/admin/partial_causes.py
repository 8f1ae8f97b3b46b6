"""Why a partial failure's channels did not go out, read from the delivery log.

`last_error` of a partial failure says only which channels failed (`partial: webhook`,
the contract); the cause is each failed channel's latest failed attempt. The admin's list
reads it for a whole page in its one query (`latest_failure`, a correlated subquery over
the attempts' per-row index), the change page for one row (`causes_of`).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Case, OuterRef, Subquery, When

from notifications.models import DeliveryAttempt, Notification

ANNOTATION = "partial_cause"


def latest_failure() -> Case:
    """For a list's rows: the error of a partial failure's latest failed attempt (NULL for
    other rows). A partial failure has one failed channel at most (a row has two), so the
    latest failed attempt is that channel's."""
    failed = DeliveryAttempt.objects.filter(
        notification_id=OuterRef("pk"), outcome=DeliveryAttempt.AttemptOutcome.FAILED
    ).order_by("-attempted_at", "-id")
    return Case(When(failed_channels__isnull=False, then=Subquery(failed.values("error")[:1])), default=None)


def causes_of(row: Notification) -> dict[str, str]:
    """channel -> the error of its latest failed attempt, for the channels `row`'s partial
    failure left undelivered (one query; empty when the row is no partial failure or the
    attempts were pruned)."""
    failed = row.resend_channels
    if not failed:
        return {}
    cached = getattr(row, ANNOTATION, None)
    if isinstance(cached, str) and len(failed) == 1:
        return {failed[0]: cached}
    causes: dict[str, str] = {}
    attempts = DeliveryAttempt.objects.filter(
        notification_id=row.pk, channel__in=failed, outcome=DeliveryAttempt.AttemptOutcome.FAILED
    ).order_by("-attempted_at", "-id")
    for channel, error in attempts.values_list("channel", "error")[: 10 * len(failed)]:
        causes.setdefault(channel, error)
    return causes


def describe(row: Any) -> str | None:
    """`partial: webhook (webhook: HTTP 503)`: `last_error` with the cause the list read for
    the row beside it; None when the row carries no cause."""
    cause = getattr(row, ANNOTATION, None)
    if not isinstance(cause, str) or not cause or not row.last_error:
        return None
    return f"{row.last_error} ({cause})"
