"""The names host code imports.

from notifications.api import schedule, cancel

schedule(channels=["email"], email_to="ada@example.com", subject="Hi", body="...",
         fire_at=timezone.now() + timedelta(hours=1), key="invoice-7-reminder")
cancel("invoice-7-reminder")
schedule_many([{"channels": ["webhook"], "webhook_url": url, "payload": {"n": n}} for n, url in hooks])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from notifications.models import Notification
from notifications.models.attachments import Attachment, calendar_event
from notifications.services import ActionResult, cancel, pause, purge, requeue, resume, run_now, schedule_notification
from notifications.services import schedule_many as _schedule_many
from notifications.tick.engine import TickReport, run_tick

__all__ = [
    "ActionResult",
    "Attachment",
    "Notification",
    "TickReport",
    "calendar_event",
    "cancel",
    "pause",
    "purge",
    "requeue",
    "resume",
    "run_now",
    "run_tick",
    "schedule",
    "schedule_many",
]


def schedule(
    *, fire_at: datetime | None = None, key: str = "", on_conflict: str = "error", **fields: Any
) -> Notification:
    """Validate and enqueue a notification; returns the saved row.

    Keyword arguments are the model's fields (`channels`, `email_to`, `subject`,
    `body`, `webhook_url`, `webhook_secret`, `payload`, `recurrence_rule`, `timezone`,
    `expires_at`, `max_delay`, `quiet_hours`, `max_retries`, `backoff`, and for email
    `from_email`, `headers`, `attachments` (`Attachment`s, `(filename, content, mimetype)`
    or MIME parts), `mailer` and `priority`) plus `fire_at`,
    the first due time. Without `fire_at`, a one-shot row is due now and a recurring row
    is due at its rule's next occurrence. Raises ValidationError naming each bad field.

    `key` is your own name for the row (at most 200 characters), unique among rows that
    have one. When a row holds it already, `on_conflict` decides: `"error"` (the default)
    raises ValidationError on `key`; `"replace"` gives that row (same pk) the new fields
    and a fresh start (no errors, not paused, a new firing due at the new due time; a
    firing in flight writes nothing back over it); `"keep"` returns it unchanged.
    Concurrent calls with one key leave exactly one row.

    `cancel`, `pause`, `resume` and `run_now` take the key (or the row) afterwards.
    """
    return schedule_notification(fire_at=fire_at, key=key, on_conflict=on_conflict, **fields)


def schedule_many(rows: Iterable[Mapping[str, Any]], on_conflict: str = "error") -> list[Notification]:
    """Validate and enqueue many notifications at once, all or none; returns the saved rows
    in the same order.

    `rows` is a list of dicts of `schedule()`'s keyword arguments (`fire_at`, `key`,
    attachments, templates, recurrence ... all as `schedule()` takes them). Every row is
    validated as `schedule()` validates it before anything is written; if any is invalid,
    nothing is saved and a ValidationError names each bad field by its row's index:
    `{"3.webhook_url": [...]}`.

    Keys behave as a run of `schedule()` calls in the list's order would, duplicates
    within the batch included: with `on_conflict="error"` a key held by a stored row or
    by an earlier row of the batch is an error on that index's key (nothing saved); with
    `"replace"` the later row wins whole (a stored row keeps its pk and starts afresh),
    and every index naming that key returns the one row; with `"keep"` the first is kept
    and returned for each index naming its key. A dict's own `on_conflict` overrides the
    batch's for that row.

    The new rows go in as multi-row INSERTs (one for a batch of a few thousand), in one
    transaction, with one wake-up of `runtick --loop` for the batch.
    """
    return _schedule_many(rows, on_conflict=on_conflict)
