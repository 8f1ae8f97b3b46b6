"""The position after a page of `inbox/messages`: opaque, signed, stable while messages arrive.

A cursor names the last message a page showed by its (`created_at`, `id`); the next page
is the messages strictly older in that order (keyset pagination), so messages that arrive
meanwhile (newer, by definition) neither shift nor repeat what follows. It is signed so a
hand-made one is refused (400) rather than reaching the query.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from django.core import signing
from django.db.models import Q, QuerySet

from notifications.models import InboxMessage

SALT = "notifications.inbox.cursor"
ORDER = ("-created_at", "-id")  # newest first; the id breaks ties of one instant


class BadCursor(ValueError):
    """A cursor that this site did not sign, or that names no position."""


def after(message: InboxMessage) -> str:
    """The cursor of the page that follows `message`."""
    return signing.dumps([message.created_at.isoformat(), str(message.pk)], salt=SALT, compress=True)


def position(cursor: str) -> tuple[datetime, uuid.UUID]:
    """The (created_at, id) a cursor names. Raises BadCursor."""
    try:
        created_at, pk = signing.loads(cursor, salt=SALT)
        when = datetime.fromisoformat(created_at)
        if when.tzinfo is None:
            raise ValueError(created_at)
        return when, uuid.UUID(pk)
    except (signing.BadSignature, TypeError, ValueError) as error:
        raise BadCursor("not a cursor of this inbox") from error


def older_than(messages: QuerySet[InboxMessage], cursor: str | None) -> QuerySet[InboxMessage]:
    """`messages` in page order, from the position after `cursor` (all of them for None)."""
    messages = messages.order_by(*ORDER)
    if cursor is None:
        return messages
    when, pk = position(cursor)
    return messages.filter(Q(created_at__lt=when) | Q(created_at=when, id__lt=pk))
