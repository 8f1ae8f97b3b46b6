"""Housekeeping: pruning old delivery and tick records, recording a tick."""

from __future__ import annotations

import os
import socket
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import QuerySet

from ..databases import sliced_ids
from ..models import DeliveryAttempt, TickRun

PRUNE_BATCH = 1000


def prune_history(now: datetime, retention_days: float, batch: int = PRUNE_BATCH) -> int:
    """Delete at most `batch` delivery records (and tick records) past retention."""
    cutoff = now - timedelta(days=retention_days)
    old = DeliveryAttempt.objects.filter(attempted_at__lt=cutoff).order_by("attempted_at").values("pk")[:batch]
    deleted = _delete(DeliveryAttempt.objects.all(), old)
    old_runs = TickRun.objects.filter(finished_at__lt=cutoff).order_by("finished_at").values("pk")[:batch]
    _delete(TickRun.objects.all(), old_runs)
    return deleted


def _delete(rows: QuerySet[Any], ids: QuerySet[Any]) -> int:
    """Delete the rows of `ids` (a sliced `.values("pk")`): one DELETE with a subquery, or,
    where the ids are read first (MariaDB/MySQL), none at all when there are none."""
    picked = sliced_ids(ids, connection)
    if isinstance(picked, list) and not picked:
        return 0
    deleted, _ = rows.filter(pk__in=picked).delete()
    return deleted


def record_tick(
    started_at: datetime,
    finished_at: datetime,
    batches: int,
    counts: dict[str, int],
    clock_offset: float | None = None,
) -> TickRun:
    return TickRun.objects.create(
        started_at=started_at,
        finished_at=finished_at,
        host=socket.gethostname()[:255],
        pid=os.getpid(),
        batches=batches,
        clock_offset=clock_offset,
        **counts,
    )
