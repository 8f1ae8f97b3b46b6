"""Pruning flow control's own tables: idle `Target` and `RateBucket` rows (and, per target,
the monitoring totals of idle targets, folded into `other`).

Twenty thousand rows to as many hosts left as many Target and RateBucket rows behind,
never deleted: the list header named every open circuit and `notifications_status`
printed megabytes. The tick prunes a bounded batch of idle rows at its end, in the
transaction of its other housekeeping (`notifications.store.prune`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Exists, OuterRef, Q

from notifications.databases import delete_sliced
from notifications.flow.ratelimit import UNITS
from notifications.models import Notification, RateBucket, Target
from notifications.store import tallies

PRUNE_BATCH = 1000  # rows of each table per tick at most
# A Target row left alone this long is stale: closed with a failure streak nothing has
# extended, or open with no row held for it since its probe came due (the rows to it are
# gone). Deleting it is what a fresh target is anyway: closed, no streak.
TARGET_IDLE = timedelta(days=1)


def prune_idle(now: datetime, batch: int = PRUNE_BATCH) -> int:
    """Delete at most `batch` idle Target rows and `batch` idle RateBucket rows; how many went.

    Targets: not held open by hand, and either closed and untouched for TARGET_IDLE, or not
    closed with their probe due for TARGET_IDLE and no row held for them. Buckets: untouched
    for a whole period of their limit (`<target> N/<unit>`), so full again, as a missing
    one starts.
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
    deleted = delete_sliced(idle_targets)
    stamp = now.timestamp()
    idle_buckets = Q()
    for unit, seconds in UNITS.items():
        idle_buckets |= Q(key__endswith=f"/{unit}", stamp__lt=stamp - seconds)
    stale = RateBucket.objects.filter(idle_buckets).order_by("stamp").values("pk")[:batch]
    buckets = delete_sliced(stale)
    folded = tallies.fold_idle(now, batch)  # idle targets' metrics series, into `other`
    return deleted + buckets + folded
