"""Housekeeping: pruning old delivery and tick records and idle flow-control rows, recording a tick."""

from __future__ import annotations

import os
import socket
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from ..models import DeliveryAttempt, Notification, RateBucket, Target, TickRun

PRUNE_BATCH = 1000
# A Target row left alone this long is stale: closed with a failure streak nothing has
# extended, or open with no row held for it since its probe came due (the rows to it are
# gone). Deleting it is what a fresh target is anyway: closed, no streak.
TARGET_IDLE = timedelta(days=1)


def prune_history(now: datetime, retention_days: float, batch: int = PRUNE_BATCH) -> int:
    """Delete at most `batch` delivery records (and tick records) past retention."""
    cutoff = now - timedelta(days=retention_days)
    old = DeliveryAttempt.objects.filter(attempted_at__lt=cutoff).order_by("attempted_at").values("pk")[:batch]
    deleted, _ = DeliveryAttempt.objects.filter(pk__in=old).delete()
    old_runs = TickRun.objects.filter(finished_at__lt=cutoff).order_by("finished_at").values("pk")[:batch]
    TickRun.objects.filter(pk__in=old_runs).delete()
    return deleted


def prune(now: datetime, retention_days: float) -> None:
    """The tick's housekeeping, in one short transaction: old history (`prune_history`) and
    idle flow-control rows (`prune_flow`), each bounded to PRUNE_BATCH rows."""
    with transaction.atomic():
        prune_history(now, retention_days)
        prune_flow(now)


def prune_flow(now: datetime, batch: int = PRUNE_BATCH) -> int:
    """Delete at most `batch` idle Target rows and `batch` idle RateBucket rows; how many went.

    Targets: not held open by hand, and either closed and untouched for TARGET_IDLE, or not
    closed with their probe due for TARGET_IDLE and no row held for them. Buckets: untouched
    for a whole period of their limit (`<target> N/<unit>`), so full again, as a missing
    one starts. Twenty thousand rows to as many hosts no longer leave as many rows behind.
    """
    cutoff = now - TARGET_IDLE
    held = Notification.objects.filter(held_for=OuterRef("key"))
    idle_targets = (
        Target.objects.filter(manual=False)
        .filter(
            Q(state=Target.State.CLOSED, updated_at__lt=cutoff)
            | (~Q(state=Target.State.CLOSED) & Q(retry_at__lt=cutoff, updated_at__lt=cutoff) & ~Exists(held))
        )
        .order_by("updated_at")
        .values("pk")[:batch]
    )
    deleted, _ = Target.objects.filter(pk__in=idle_targets).delete()
    from ..ratelimit import UNITS  # here: ratelimit imports the services through its targets

    stamp = now.timestamp()
    idle_buckets = Q()
    for unit, seconds in UNITS.items():
        idle_buckets |= Q(key__endswith=f"/{unit}", stamp__lt=stamp - seconds)
    stale = RateBucket.objects.filter(idle_buckets).order_by("stamp").values("pk")[:batch]
    buckets, _ = RateBucket.objects.filter(pk__in=stale).delete()
    return deleted + buckets


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
