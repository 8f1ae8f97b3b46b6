"""The inbox (`InboxMessage`): notifications shown inside the site, one per firing the
`inbox` channel delivered. Read and marked through `notifications.inbox`; written by the
tick's write-back, in the transaction that settles the firing."""

from __future__ import annotations

import uuid

from django.db import models

from notifications.models.recipients import MAX_RECIPIENT_CHARS
from notifications.rules.categories import MAX_CATEGORY_CHARS

MAX_TITLE_CHARS = 998  # a row's subject
MAX_URL_CHARS = 2000


class InboxMessage(models.Model):
    """One message in one person's inbox. `seen_at` (shown in a list or badge), `read_at`
    (opened) and `archived_at` (put away) are its state; archived implies read, read implies
    seen (`notifications.inbox.mark` keeps that so)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    recipient = models.CharField(max_length=MAX_RECIPIENT_CHARS)
    category = models.CharField(max_length=MAX_CATEGORY_CHARS, blank=True, default="")
    title = models.CharField(max_length=MAX_TITLE_CHARS, blank=True, default="")
    body = models.TextField(blank=True, default="")
    url = models.CharField(max_length=MAX_URL_CHARS, blank=True, default="")
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()
    seen_at = models.DateTimeField(null=True, blank=True)
    read_at = models.DateTimeField(null=True, blank=True)
    archived_at = models.DateTimeField(null=True, blank=True)
    # The firing that delivered it: unique with its row, so a second write-back of the same
    # firing (a retry of another channel, a requeue, a second tick) inserts nothing.
    notification = models.ForeignKey(
        "notifications.Notification",
        on_delete=models.DO_NOTHING,
        db_constraint=False,  # the message outlives a purged row
        related_name="+",
    )
    firing_id = models.UUIDField(editable=False)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["notification", "firing_id"], name="inbox_message_firing_unique"),
        ]
        indexes = [
            # `counts(recipient)`: one range of the index, read without the table.
            models.Index(fields=["recipient", "archived_at", "read_at", "seen_at"], name="inbox_counts_idx"),
            # `messages(recipient)`: newest first, and the cursor's (created_at, id) order.
            models.Index(fields=["recipient", "-created_at", "-id"], name="inbox_list_idx"),
            # Retention deletes the oldest.
            models.Index(fields=["created_at"], name="inbox_created_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.recipient}: {self.title[:60]}"
