"""What the ORM does not paper over between the databases the queue runs on, in one place.

Each concern keeps its own SQL where it lives (the claim in `claims`, the buckets'
upsert in `ratelimit`, the clock query in `clock`, the MariaDB/MySQL checks in
`checks`); this module holds the few helpers several of them share, so a vendor test
is written once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from django.db import connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import QuerySet
from django.db.models.functions import Now


def is_mysql(connection: BaseDatabaseWrapper) -> bool:
    """MariaDB or MySQL (Django's `mysql` backend serves both)."""
    return connection.vendor == "mysql"


# SQLite gives its write lock to no one in particular: a writer waiting in its busy handler
# polls (at last every 100 ms), and a loop that begins its next transaction at once would
# take the lock again each time. Between chunks a bulk job leaves the lock free as long as
# it held it, within these bounds (seconds), so the host site's writes get their turn.
SQLITE_GAP = (0.02, 0.1)


def let_others_write(held: float) -> None:
    """Between two chunks of a bulk job on SQLite: leave the write lock free for a while
    (SQLITE_GAP), `held` being how long the last chunk held it. Elsewhere, nothing."""
    if connection.vendor == "sqlite" and not connection.in_atomic_block:
        time.sleep(min(max(held, SQLITE_GAP[0]), SQLITE_GAP[1]))


def sliced_ids(query: QuerySet[Any, Any], connection: BaseDatabaseWrapper) -> QuerySet[Any, Any] | list[Any]:
    """`query` (a sliced `.values("pk")` queryset) as something `pk__in=` takes.

    The subquery itself where the database takes a LIMIT inside IN; MariaDB and MySQL do
    not (error 1235), so there its ids are read first: one more round trip, the same rows.
    Inside a transaction with `select_for_update()`, the rows stay locked in between.
    """
    if connection.features.allow_sliced_subqueries_with_in:
        return query
    return [row["pk"] if isinstance(row, dict) else row for row in query]


def delete_sliced(ids: QuerySet[Any, Any]) -> int:
    """Delete the rows of `ids` (a sliced `.values("pk")` of a model); how many went.

    One DELETE with the subquery, or, where the ids are read first (MariaDB/MySQL), no
    DELETE at all when there are none.
    """
    picked = sliced_ids(ids, connections[ids.db])
    if isinstance(picked, list) and not picked:
        return 0
    deleted, _ = ids.model._default_manager.using(ids.db).filter(pk__in=picked).delete()
    return int(deleted)


def exact_collation(connection: BaseDatabaseWrapper) -> str:
    """MariaDB/MySQL's collation that compares utf8mb4 text byte for byte, trailing spaces too.

    NO PAD where the server has one (MariaDB's `utf8mb4_nopad_bin`, MySQL 8.0.17's
    `utf8mb4_0900_bin`); before that MySQL's `utf8mb4_bin` (which ignores trailing spaces).
    """
    if connection.mysql_is_mariadb:  # type: ignore[attr-defined]  # Django's mysql backend
        return "utf8mb4_nopad_bin"
    if connection.mysql_version >= (8, 0, 17):  # type: ignore[attr-defined]
        return "utf8mb4_0900_bin"
    return "utf8mb4_bin"


# MariaDB checks a JSON column with JSON_VALID() (the CHECK Django gives a JSONField there),
# which refuses a document nested 32 levels deep or more. MySQL's JSON type takes 100.
MARIADB_JSON_DEPTH = 31


def json_depth_limit(connection: BaseDatabaseWrapper) -> int | None:
    """The deepest nesting a JSON column of `connection` stores, when it is a small number."""
    if is_mysql(connection) and connection.mysql_is_mariadb:  # type: ignore[attr-defined]
        return MARIADB_JSON_DEPTH
    return None


# Django's model warnings on MariaDB/MySQL that do not apply to the queue's models, and why.
# Each arises on MariaDB/MySQL only, so dropping it leaves every other database's intact.
SETTLED_MYSQL_WARNINGS = {
    # The partial indexes (due, claim, held) are built whole there: bigger, and just as usable,
    # since every query that uses one also says what its condition says.
    "models.W037": "indexes with conditions",
    # Target.key (300), RateBucket.key (320) and ThrottleWindow.key (a category and a
    # recipient, 355): InnoDB indexes up to 3072 bytes (DYNAMIC rows,
    # the default since MariaDB 10.2 and MySQL 5.7), and 355 utf8mb4 characters are 1420.
    "mysql.W003": "unique CharFields longer than 255",
}


class SettledOnMySQL:
    """A model mixin: its checks leave out the warnings `SETTLED_MYSQL_WARNINGS` settles."""

    @classmethod
    def check(cls, **kwargs: Any) -> list[Any]:
        messages = super().check(**kwargs)  # type: ignore[misc]  # models.Model's, next in the MRO
        return [message for message in messages if message.id not in SETTLED_MYSQL_WARNINGS]


class DatabaseNow(Now):
    """`Now()`, the database's clock, in UTC on every database.

    Django stores aware datetimes as UTC on MariaDB/MySQL, but its `Now()` there is
    CURRENT_TIMESTAMP, read in the session's time zone (the server's, unless set): on a
    server in Europe/Berlin a lease compared with it would end an hour early or late.
    UTC_TIMESTAMP is the same instant in UTC. PostgreSQL and SQLite: Django's `Now()`.
    """

    def as_mysql(self, compiler: Any, connection: BaseDatabaseWrapper, **extra_context: Any) -> Any:
        return self.as_sql(compiler, connection, template="UTC_TIMESTAMP(6)", **extra_context)


# MariaDB/MySQL refuse a statement longer than `max_allowed_packet` (16 MiB by default:
# "server has gone away", 2006). Multi-row INSERTs are split to fit: each value counted at
# its longest in the statement's text (mysqlclient escapes a quote, a backslash, NUL and
# line breaks as two bytes), and this much left for the text around the values.
PACKET_MARGIN = 64 * 1024
# Statements shorter than this fit any server as run in practice (MariaDB's default packet
# is 16 MiB, MySQL 8's 64 MiB, MySQL 5.5's was 1 MiB): the server is not asked.
PACKET_FLOOR = 1024 * 1024


def statement_bytes_limit(connection: BaseDatabaseWrapper) -> int | None:
    """The longest statement `connection` takes: MariaDB/MySQL's `max_allowed_packet` (read
    once per connection to the server), None where the length has no practical limit."""
    if not is_mysql(connection):
        return None
    connection.ensure_connection()
    raw = connection.connection
    known = getattr(connection, "_notifications_packet", None)
    if known is None or known[0] is not raw:  # a new connection: its session's value
        with connection.cursor() as cursor:
            cursor.execute("SELECT @@max_allowed_packet")
            (value,) = cursor.fetchone()
        known = (raw, int(value))
        connection._notifications_packet = known  # type: ignore[attr-defined]
    return int(known[1])


def value_bytes(value: Any) -> int:
    """At most how long `value` is in a statement's text, quotes and a separator included."""
    if value is None:
        return 5
    if isinstance(value, str):
        return 2 * len(value.encode()) + 4
    if isinstance(value, (bytes, bytearray, memoryview)):
        return 2 * len(value) + 12  # _binary'...'
    return len(str(value)) + 4


def statement_chunks(
    connection: BaseDatabaseWrapper, rows: Sequence[Sequence[Any]], per_statement: int
) -> Iterator[slice]:
    """Slices of `rows` (each a row's parameters) that one INSERT on `connection` may carry:
    at most `per_statement` rows and, on MariaDB/MySQL, within the server's packet (a row
    longer than that goes alone, and the server says so)."""
    lengths = [sum(value_bytes(v) for v in row) + 4 for row in rows] if is_mysql(connection) else []
    limit = None
    if sum(lengths) > PACKET_FLOOR - PACKET_MARGIN:
        limit = statement_bytes_limit(connection)
    budget = None if limit is None else max(limit - PACKET_MARGIN, 1)
    start, size = 0, 0
    for index in range(len(rows)):
        length = lengths[index] if budget is not None else 0
        if index > start and (index - start >= per_statement or (budget is not None and size + length > budget)):
            yield slice(start, index)
            start, size = index, 0
        size += length
    if start < len(rows):
        yield slice(start, len(rows))
