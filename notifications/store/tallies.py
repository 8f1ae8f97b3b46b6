"""Running totals for monitoring: what each write-back delivered, what each tick took.

`notifications.models.Tally` holds them; the tick adds to them in the transaction of what
they count (`add_deliveries` in the write-back, with the counts of
`notifications.store.writeback.delivery_counts`; `add_tick` with the tick record), one
statement each, and `notifications.health.monitoring` reads them for the metrics. A tick
is a short-lived process: a counter kept in its memory would die with it.

Delivery outcomes, per channel and target:

- `delivered`, `failed`: one per channel attempted (what the delivery log records);
- `dead_lettered`: a firing given up (retries spent, a permanent failure, an invalid
  row), one per channel that failed it;
- `deferred`: a firing not sent now and due later (quiet hours, an open circuit, a rate
  limit, a held setting), one per channel it owes;
- `expired`: a firing too late to send, one per channel it owed.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from notifications import compat
from notifications.models import Tally

DELIVERED = "delivered"
FAILED = "failed"
DEAD_LETTERED = "dead_lettered"
DEFERRED = "deferred"
EXPIRED = "expired"
DELIVERY_OUTCOMES = (DELIVERED, FAILED, DEAD_LETTERED, DEFERRED, EXPIRED)
OTHER = "other"  # the channel of an invalid row's unknown channel name; the target of folded totals
# A target's totals untouched this long are folded into `other` (`fold_idle`), at most
# FOLD_BATCH rows per tick.
TARGET_IDLE = timedelta(days=7)
FOLD_BATCH = 1000

# Upper bounds (seconds) of the tick-duration histogram's buckets: a tick of a few rows
# takes well under a second; the budget (50 s by default) bounds a draining one.
TICK_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 120.0, math.inf)

# (channel, target, outcome)
Key = tuple[str, str, str]


def add_deliveries(counts: Mapping[Key, int]) -> None:
    """Add delivery counts to the totals (one statement; none when there is nothing)."""
    kind = Tally.Kind.DELIVERY.value
    _add({(kind, ch, target[:300], outcome): (n, 0.0) for (ch, target, outcome), n in counts.items()})


def add_skipped(counts: Mapping[tuple[str, str], int]) -> None:
    """Count firings skipped whole, by (category, reason: `skipped` or `throttled`)."""
    kind = Tally.Kind.SKIPPED.value
    _add({(kind, "", category[:300], reason): (n, 0.0) for (category, reason), n in counts.items()})


def tick_bucket(seconds: float) -> str:
    """The histogram bucket a tick of `seconds` falls in, by its upper bound (`+Inf` last)."""
    bound = TICK_BUCKETS[bisect.bisect_left(TICK_BUCKETS, seconds)]
    return "+Inf" if math.isinf(bound) else repr(bound)


def add_tick(seconds: float) -> None:
    """Count one tick of `seconds` in the duration histogram."""
    seconds = max(seconds, 0.0)
    _add({(Tally.Kind.TICK.value, "", "", tick_bucket(seconds)): (1, seconds)})


def _add(rows: Mapping[tuple[str, str, str, str], tuple[int, float]]) -> None:
    """Upsert `rows` (key -> count, total to add) in one statement, keys in order, so that
    ticks adding to the same totals at once take their row locks in one order."""
    if not rows:
        return
    table = compat.quote_name(connection, Tally._meta.db_table)
    columns = ", ".join(compat.quote_name(connection, c) for c in ("kind", "channel", "target", "outcome"))
    count, total, updated = (compat.quote_name(connection, c) for c in ("count", "total", "updated_at"))
    keys = sorted(rows)
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s)"] * len(keys))
    stamp = connection.ops.adapt_datetimefield_value(timezone.now())
    params: list[Any] = []
    for key in keys:
        params.extend((*key, *rows[key], stamp))
    if connection.vendor == "mysql":
        conflict = (
            f"ON DUPLICATE KEY UPDATE {count} = {count} + VALUES({count}), {total} = {total} + VALUES({total}), "
            f"{updated} = VALUES({updated})"
        )
    else:  # SQLite 3.24+ and PostgreSQL
        conflict = (
            f"ON CONFLICT ({columns}) DO UPDATE SET {count} = {table}.{count} + excluded.{count}, "
            f"{total} = {table}.{total} + excluded.{total}, {updated} = excluded.{updated}"
        )
    # Only quoted model metadata goes into the text; values are parameters.
    sql = f"INSERT INTO {table} ({columns}, {count}, {total}, {updated}) VALUES {values} {conflict}"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def fold_idle(now: datetime, batch: int = FOLD_BATCH) -> int:
    """Fold the delivery totals of at most `batch` idle targets' rows (nothing added for
    TARGET_IDLE) into their channel's `other` target, and delete them; how many went.

    Whoever chooses webhook URLs chooses how many targets there are: without this the
    table, and the metrics' label values, would grow with every host ever sent to. The sums
    by channel and outcome never go down. The rows are locked first, so a write-back adding
    to one meanwhile waits, then makes it anew. Nothing to fold costs one SELECT (inside the
    tick's housekeeping transaction no savepoint is taken).
    """
    with transaction.atomic(savepoint=False):
        idle = list(
            Tally.objects.select_for_update()
            .filter(kind=Tally.Kind.DELIVERY, updated_at__lt=now - TARGET_IDLE)
            .exclude(target=OTHER)
            .order_by("updated_at", "pk")
            .values_list("pk", "channel", "outcome", "count", "total")[:batch]
        )
        if not idle:
            return 0
        folded: dict[tuple[str, str, str, str], tuple[int, float]] = {}
        for _pk, channel, outcome, count, total in idle:
            key = (Tally.Kind.DELIVERY.value, channel, OTHER, outcome)
            before = folded.get(key, (0, 0.0))
            folded[key] = (before[0] + count, before[1] + total)
        Tally.objects.filter(pk__in=[row[0] for row in idle]).delete()
        _add(folded)
    return len(idle)
