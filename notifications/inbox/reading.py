"""Reading a person's inbox: the lists and the counts."""

from __future__ import annotations

from django.db.models import Count, Q, QuerySet

from notifications.models import InboxMessage

# The lists `messages` gives, each a filter on a recipient's messages.
LISTS: dict[str, Q] = {
    "unread": Q(archived_at__isnull=True, read_at__isnull=True),
    "all": Q(archived_at__isnull=True),
    "archived": Q(archived_at__isnull=False),
}


def messages(recipient: str, state: str = "unread", category: str | None = None) -> QuerySet[InboxMessage]:
    """The recipient's messages in `state` ("unread", "all": not archived, or "archived"),
    of one category if given, newest first."""
    if state not in LISTS:
        raise ValueError(f"Unknown inbox state {state!r}: one of {', '.join(LISTS)}.")
    found = InboxMessage.objects.filter(LISTS[state], recipient=recipient)
    if category is not None:
        found = found.filter(category=category)
    return found.order_by("-created_at", "-id")


def counts(recipient: str) -> dict[str, int]:
    """`{"unseen": n, "unread": n, "total": n}` of the recipient's messages that are not
    archived: one query, read from the counts index alone."""
    # Counting `recipient` (not the primary key) keeps every column read inside the index.
    found = InboxMessage.objects.filter(recipient=recipient, archived_at__isnull=True).aggregate(
        unseen=Count("recipient", filter=Q(seen_at__isnull=True)),
        unread=Count("recipient", filter=Q(read_at__isnull=True)),
        total=Count("recipient"),
    )
    return {"unseen": found["unseen"], "unread": found["unread"], "total": found["total"]}
