"""Inbox messages as the inbox channel leaves them, for tests of what people see of them."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.utils import timezone

from notifications.models import InboxMessage


def add_message(recipient: str, title: str = "Hello", *, created_at: datetime | None = None, **fields: Any):
    """One message in `recipient`'s inbox, as if a firing of its own had delivered it."""
    return InboxMessage.objects.create(
        recipient=recipient,
        title=title,
        created_at=created_at or timezone.now(),
        notification_id=fields.pop("notification_id", 1),  # no row behind it: db_constraint=False
        firing_id=uuid.uuid4(),
        **fields,
    )


def recipient_of(user: Any) -> str:
    """The default NOTIFICATIONS_INBOX_RECIPIENT's name for a signed-in user."""
    return f"user:{user.pk}"
