"""Rows in each admin state, for the admin, health and browser tests."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from notifications.api import schedule
from notifications.models import Notification

SECRET = "whsec_c2VjcmV0LW9mLXRoZS1yb3ctbm90LWZvci1wYWdlcw=="  # a row's own secret: never on a page


def make(state: str, **fields) -> Notification:
    """A valid row through the API, then moved into `state` the way the tick leaves it."""
    now = timezone.now()
    fields.setdefault("channels", ["email", "webhook"])
    fields.setdefault("email_to", f"{state}@example.com")
    fields.setdefault("subject", f"{state} reminder")
    fields.setdefault("body", "Hello")
    fields.setdefault("webhook_url", f"https://{state}.example.com/hooks/secret-path?token=abc")
    fields.setdefault("webhook_secret", SECRET)
    if not fields.get("recurrence_rule"):
        fields.setdefault("fire_at", now + timedelta(hours=1))
    row = schedule(**fields)
    changes = state_changes(state, now)
    if changes:
        Notification.objects.filter(pk=row.pk).update(**changes)
        row.refresh_from_db()
    return row


def state_changes(state: str, now: datetime) -> dict:
    """What the tick leaves on a row in `state` (beside a row scheduled an hour ahead)."""
    return {
        "due": {"next_fire_at": now - timedelta(minutes=5)},
        "scheduled": {},
        "retrying": {"error_count": 1, "last_error": "webhook: HTTP 503", "next_fire_at": now + timedelta(minutes=1)},
        "partial": {
            "last_error": "partial: webhook",
            "failed_channels": ["webhook"],
            "next_fire_at": None,
            "last_fired_at": now,
        },
        "dead": {
            "error_count": 3,
            "last_error": "webhook: HTTP 410",
            "dead_lettered_at": now,
            "next_fire_at": None,
            "last_fired_at": now,
        },
        "parked": {"next_fire_at": None},
        "paused": {"paused_at": now},
        "expired": {  # a one-shot firing that came too late: kept as a dead letter
            "last_error": "expired: 2h past expires_at",
            "expired_at": now,
            "dead_lettered_at": now,
            "next_fire_at": None,
        },
    }[state]


def many(n: int, state: str, **fields) -> None:
    """`n` webhook rows in `state` at once (bulk_create: no validation, no signals), for big
    selections; they are scheduled an hour ahead before `state` applies."""
    now = timezone.now()
    row = {
        "channels": ["webhook"],
        "webhook_url": f"https://{state}.example.com/in",
        "payload": {},
        "timezone": "UTC",
        "next_fire_at": now + timedelta(hours=1),
        **state_changes(state, now),
        **fields,
    }
    Notification.objects.bulk_create([Notification(**row) for _ in range(n)], batch_size=500)


def one_of_each() -> dict[str, Notification]:
    return {state: make(state) for state in ("due", "scheduled", "retrying", "partial", "dead", "parked")}
