"""Housekeeping: pruning old delivery and tick records and idle flow-control rows, recording a
tick (and its duration in the monitoring totals)."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import transaction

from notifications.databases import delete_sliced
from notifications.models import DeliveryAttempt, TickRun
from notifications.services import tallies

PRUNE_BATCH = 1000


def prune_history(now: datetime, retention_days: float, batch: int = PRUNE_BATCH) -> int:
    """Delete at most `batch` delivery records (and tick records) past retention."""
    cutoff = now - timedelta(days=retention_days)
    old = DeliveryAttempt.objects.filter(attempted_at__lt=cutoff).order_by("attempted_at").values("pk")[:batch]
    deleted = delete_sliced(old)
    delete_sliced(TickRun.objects.filter(finished_at__lt=cutoff).order_by("finished_at").values("pk")[:batch])
    return deleted


def prune(now: datetime, retention_days: float, also: Callable[[datetime], int] | None = None) -> None:
    """The tick's housekeeping, in one short transaction: old history (`prune_history`) and
    `also` (the tick passes flow control's `notifications.flow.pruning.prune_idle`)."""
    with transaction.atomic():
        prune_history(now, retention_days)
        if also is not None:
            also(now)


def record_tick(
    started_at: datetime,
    finished_at: datetime,
    batches: int,
    counts: dict[str, int],
    clock_offset: float | None = None,
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
        **counts,
    )
