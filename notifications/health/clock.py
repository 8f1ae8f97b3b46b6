"""How far this host's clock is from the database's: one query, reported, never enforced.

Leases are the database's: a claim ends at the database's `Now()` plus the lease and
is live until the database's clock passes it (`notifications.claims`), so a host whose
clock runs 200 s ahead never re-claims rows another tick is still sending. Due times,
quiet hours and backoffs are still read on each host's own clock, so a skewed host
sends early or late. The database's clock is the one every host shares, so each tick
measures its distance from it and keeps it on its `TickRun` record; the admin header,
`manage.py notifications_status` and the `notifications.W101` database check say so
when it is past `NOTIFICATIONS_MAX_CLOCK_OFFSET`.

The measurement only reports: a tick never refuses to run because of it, so tests
that move Python's clock with time-machine keep working (the database's clock is not
moved: SQLite reads the C library's clock, PostgreSQL the server's).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.utils import timezone

logger = logging.getLogger("notifications")

# The database's own wall clock, read when the statement runs (not when its
# transaction began: `now()` would be as old as the transaction).
CLOCK_QUERIES = {
    "postgresql": "SELECT clock_timestamp()",
    "sqlite": "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')",  # UTC, milliseconds
}


def measure_offset(using: str = DEFAULT_DB_ALIAS) -> float | None:
    """Seconds this host's clock is ahead of the database's (negative: behind).

    One query. The database's reading is compared with the local time halfway
    through the round trip, so a slow query does not count as skew. None when the
    database has no clock query here (not PostgreSQL or SQLite) or the query fails:
    a failed measurement is no reason to fail a tick.
    """
    connection = connections[using]
    sql = CLOCK_QUERIES.get(connection.vendor)
    if sql is None:
        return None
    try:
        before = timezone.now()
        with connection.cursor() as cursor:
            cursor.execute(sql)
            (value,) = cursor.fetchone()
        after = timezone.now()
        database_now = _as_datetime(value)
    except (DatabaseError, ValueError, TypeError) as error:
        logger.warning("could not read the database's clock: %s", type(error).__name__)
        return None
    midpoint = before + (after - before) / 2
    return (midpoint - database_now).total_seconds()


def _as_datetime(value: datetime | str) -> datetime:
    """The database's reading as an aware datetime (SQLite gives UTC text)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise TypeError(f"not a time: {type(value).__name__}")
    if timezone.is_naive(value):
        value = value.replace(tzinfo=UTC)
    return value
