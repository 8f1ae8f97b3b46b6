"""Housekeeping: pruning old delivery and tick records, old inbox messages and idle
flow-control rows, recording a tick (and its duration in the monitoring totals)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import transaction

from notifications.databases import delete_sliced, let_others_write
from notifications.models import DeliveryAttempt, IdempotencyRecord, InboxMessage, TickRun
from notifications.models.tokens import IDEMPOTENCY_RETENTION
from notifications.store import tallies

PRUNE_BATCH = 1000  # records of each table per transaction


def prune_history(now: datetime, retention_days: float, batch: int = PRUNE_BATCH) -> int:
    """Delete at most `batch` delivery records (and tick records, and the HTTP API's expired
    idempotency records) past retention, the
    oldest first; how many delivery records went. A tick adds one tick record, so a batch of
    them per call keeps up; delivery records come by the thousand (see `prune`)."""
    cutoff = now - timedelta(days=retention_days)
    old = DeliveryAttempt.objects.filter(attempted_at__lt=cutoff).order_by("attempted_at").values("pk")[:batch]
    deleted = delete_sliced(old)
    delete_sliced(TickRun.objects.filter(finished_at__lt=cutoff).order_by("finished_at").values("pk")[:batch])
    # The HTTP API's Idempotency-Key records are replayed for a day, then go.
    expired = IdempotencyRecord.objects.filter(created_at__lt=now - IDEMPOTENCY_RETENTION)
    delete_sliced(expired.order_by("created_at").values("pk")[:batch])
    return deleted


def prune_inbox(now: datetime, retention_days: float, batch: int = PRUNE_BATCH) -> int:
    """Delete at most `batch` inbox messages older than `retention_days`, the oldest first;
    how many went."""
    cutoff = now - timedelta(days=retention_days)
    return delete_sliced(InboxMessage.objects.filter(created_at__lt=cutoff).order_by("created_at").values("pk")[:batch])


def prune(
    now: datetime,
    retention_days: float,
    also: Callable[[datetime], int] | None = None,
    *,
    until: float | None = None,
    inbox_retention_days: float | None = None,
) -> int:
    """The tick's housekeeping: old history (`prune_history`), old inbox messages
    (`prune_inbox`, when `inbox_retention_days` is given) and `also` (the tick passes flow
    control's `notifications.flow.pruning.prune_idle`); how many delivery records went.

    Each goes in batches of PRUNE_BATCH, each in a short transaction of its own, until
    none is left past retention or `time.monotonic()` passes `until` (the tick's budget;
    None: one batch). A site logging more than a batch per tick would otherwise keep more
    history every minute; the first batch always goes, and between batches the host
    site's writes get their turn (`let_others_write`).
    """

    def one_batch() -> tuple[int, bool]:
        pruned = prune_history(now, retention_days, PRUNE_BATCH)
        inbox = prune_inbox(now, inbox_retention_days, PRUNE_BATCH) if inbox_retention_days is not None else 0
        return pruned, PRUNE_BATCH in (pruned, inbox)

    began = time.monotonic()
    with transaction.atomic():
        deleted, more = one_batch()
        if also is not None:
            also(now)
    while more and until is not None and time.monotonic() < until:
        let_others_write(time.monotonic() - began)
        began = time.monotonic()
        with transaction.atomic():
            pruned, more = one_batch()
        deleted += pruned
    return deleted


def record_tick(
    started_at: datetime,
    finished_at: datetime,
    batches: int,
    counts: dict[str, int],
    clock_offset: float | None = None,
    held: str = "",
    fast_lane_off: str = "",
) -> TickRun:
    """Keep the tick's record, and count its duration in the monitoring totals (two
    statements; no transaction: a tick lost between them is one histogram count)."""
    tallies.add_tick((finished_at - started_at).total_seconds())
    return TickRun.objects.create(
        started_at=started_at,
        finished_at=finished_at,
        host=socket.gethostname()[:255],
        pid=os.getpid(),
        batches=batches,
        clock_offset=clock_offset,
        held=held[: TickRun._meta.get_field("held").max_length],
        fast_lane_off=fast_lane_off[: TickRun._meta.get_field("fast_lane_off").max_length],
        **counts,
    )
