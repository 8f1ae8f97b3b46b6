"""Marking a person's messages: each state one conditional UPDATE, so a message already in
the state is not counted as changed, and the rules hold in the statement itself."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from django.db.models import DateTimeField, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from notifications.models import InboxMessage

# state -> the messages it changes. Read sets seen too; archived sets read and seen too;
# unread and unarchived clear their own column alone (`_changes`).
MARKS: dict[str, Q] = {
    "seen": Q(seen_at__isnull=True),
    "read": Q(read_at__isnull=True),
    "archived": Q(archived_at__isnull=True),
    "unread": Q(read_at__isnull=False),
    "unarchived": Q(archived_at__isnull=False),
}


def _changes(state: str) -> dict[str, Any]:
    now = Value(timezone.now(), output_field=DateTimeField())
    changes: dict[str, dict[str, Any]] = {
        "seen": {"seen_at": now},
        "read": {"read_at": now, "seen_at": Coalesce("seen_at", now)},
        "archived": {"archived_at": now, "read_at": Coalesce("read_at", now), "seen_at": Coalesce("seen_at", now)},
        "unread": {"read_at": None},
        "unarchived": {"archived_at": None},
    }
    return changes[state]


def mark(recipient: str, ids: Iterable[Any] | str, state: str) -> int:
    """Put the recipient's messages `ids` (a list of message ids, or "all") in `state`
    ("seen", "read", "unread", "archived", "unarchived"); returns how many changed. Ids that
    are not the recipient's, or not ids at all, change nothing."""
    if state not in MARKS:
        raise ValueError(f"Unknown inbox mark {state!r}: one of {', '.join(MARKS)}.")
    found = InboxMessage.objects.filter(MARKS[state], recipient=recipient)
    if ids != "all":
        if isinstance(ids, str | bytes) or not isinstance(ids, Iterable):
            raise ValueError('Inbox ids are a list of message ids or "all".')
        found = found.filter(id__in=_message_ids(ids))
    return found.update(**_changes(state))


def _message_ids(ids: Iterable[Any]) -> set[uuid.UUID]:
    """The values that are message ids; anything else names no message."""
    parsed = set()
    for value in ids:
        try:
            parsed.add(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
        except (ValueError, TypeError, AttributeError):
            continue
    return parsed
