"""Email held for the attachments' storage: while the tick cannot read attachments where
the site keeps them (`attachments.storage_problem`: the storage named by
NOTIFICATIONS_ATTACHMENT_STORAGE is unknown, or a file storage's location is relative or
unset), a row that owes email with attachments waits (no retry spent) instead of failing
or going out without them; every other row goes out. The first tick after the fix sends it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import Q

from notifications.models import attachments, states

if TYPE_CHECKING:
    from notifications.models import Notification

CHANNEL = "email"


def attachments_held(row: Notification) -> str | None:
    """Why `row`'s email is held for its attachments (the settings read now), or None."""
    if not attachments.stored(row.attachments):
        return None  # most rows: no setting to read
    problem = attachments.storage_problem()
    return None if problem is None else f"{CHANNEL}: {problem}"


def rows_with_attachments() -> Q:
    """Rows that will send email with attachments: going to fire, not paused."""
    return Q(states.sends_on(CHANNEL), next_fire_at__isnull=False, paused_at__isnull=True) & ~Q(attachments=[])
