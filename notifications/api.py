"""The names host code imports.

from notifications.api import schedule

schedule(channels=["email"], email_to="ada@example.com", subject="Hi", body="...",
         fire_at=timezone.now() + timedelta(hours=1))
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .engine import TickReport, run_tick
from .models import Notification
from .services import purge, requeue, schedule_notification

__all__ = ["Notification", "TickReport", "purge", "requeue", "run_tick", "schedule"]


def schedule(*, fire_at: datetime | None = None, **fields: Any) -> Notification:
    """Validate and enqueue a notification; returns the saved row.

    Keyword arguments are the model's fields (`channels`, `email_to`, `subject`,
    `body`, `webhook_url`, `webhook_secret`, `payload`, `recurrence_rule`, `timezone`)
    plus `fire_at`, the first due time. Without `fire_at`, a one-shot row is due now
    and a recurring row is due at its rule's next occurrence. Raises ValidationError
    naming each bad field.
    """
    return schedule_notification(fire_at=fire_at, **fields)
