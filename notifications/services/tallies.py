"""Running totals for monitoring: what each write-back delivered, what each tick took.

`notifications.models.Tally` holds them; the tick adds to them in the transaction of what
they count (`add_deliveries` in the write-back, with the counts of
`notifications.tick.tallies.delivery_counts`; `add_tick` with the tick record), one
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

from django.db import connection

from notifications import compat
from notifications.models import Tally

DELIVERED = "delivered"
FAILED = "failed"
DEAD_LETTERED = "dead_lettered"
DEFERRED = "deferred"
EXPIRED = "expired"
DELIVERY_OUTCOMES = (DELIVERED, FAILED, DEAD_LETTERED, DEFERRED, EXPIRED)
OTHER = "other"  # the channel of an invalid row's unknown channel name

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
    count, total = (compat.quote_name(connection, c) for c in ("count", "total"))
    keys = sorted(rows)
    values = ", ".join(["(%s, %s, %s, %s, %s, %s)"] * len(keys))
    params: list[str | int | float] = []
    for key in keys:
        params.extend((*key, *rows[key]))
    if connection.vendor == "mysql":
        conflict = f"ON DUPLICATE KEY UPDATE {count} = {count} + VALUES({count}), {total} = {total} + VALUES({total})"
    else:  # SQLite 3.24+ and PostgreSQL
        conflict = (
            f"ON CONFLICT ({columns}) DO UPDATE SET {count} = {table}.{count} + excluded.{count}, "
            f"{total} = {table}.{total} + excluded.{total}"
        )
    # Only quoted model metadata goes into the text; values are parameters.
    sql = f"INSERT INTO {table} ({columns}, {count}, {total}) VALUES {values} {conflict}"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
