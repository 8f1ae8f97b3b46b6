"""Retrying a tick's database step that failed for the connection's sake, not the data's.

A tick's connection can be lost between two of its statements (a database restart, a
failover, an operator's `KILL` or `pg_terminate_backend`, an idle timeout), and its
transactions can lose a deadlock or a serialization check to the host site's writes.
None of that says anything about the rows: the step is run again, on a new connection
where the old one broke, a few times with a short backoff. A step retried here must be
safe to run twice: the claim takes a fresh token each time, and the write-back is fenced
by its claim tokens (see `writeback.save_outcomes`).

What is retried, by the driver's own error codes:

- the connection went away: Django's `InterfaceError`, PostgreSQL's SQLSTATE class 08
  and 57P01-57P03 (`pg_terminate_backend`, a shutdown), MariaDB/MySQL's 2006, 2013,
  2055, 1927 and 4031 (a `KILL`, an idle timeout), an `OperationalError` without a code
  that says so (libpq's "consuming input failed: server closed the connection
  unexpectedly" when the socket closed before the server's message was read), or any
  `OperationalError` after which the connection no longer answers;
- a lost deadlock or serialization check: PostgreSQL's 40P01 and 40001, MariaDB/MySQL's
  1213 and 1205 (lock wait timeout).

Never inside a transaction the caller holds: that transaction is gone with the
connection, so the error is the caller's to handle.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from django.db import DatabaseError, InterfaceError, OperationalError, connection

logger = logging.getLogger("notifications.tick")

T = TypeVar("T")

# What a database step can raise for the database's sake (Django's InterfaceError is no
# DatabaseError: a closed connection).
DATABASE_ERRORS = (DatabaseError, InterfaceError)

# Seconds to wait before each retry (a random tenth more or less, so two ticks that lost
# the same deadlock do not meet again): six retries, about four seconds in all, far
# inside a claim's lease.
RETRY_DELAYS: Sequence[float] = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)

POSTGRES_RETRIED = {"40P01", "40001", "57P01", "57P02", "57P03"}  # and class 08
MYSQL_DEADLOCKS = {1213, 1205}
MYSQL_LOST = {2006, 2013, 2055, 1927, 4031}
# What libpq and psycopg say, without a SQLSTATE, when the socket went away under a
# statement: the error carries no code, and by the time it is classified the connection
# may answer again (another step reopened it), so its words are what tell.
POSTGRES_LOST_WORDS = (
    "consuming input failed",
    "server closed the connection unexpectedly",
    "the connection is lost",
    "the connection is closed",
    "ssl syscall error",
)


def error_code(exc: BaseException) -> str | int | None:
    """The driver's code of a database error: SQLSTATE (PostgreSQL) or errno (MariaDB/MySQL)."""
    cause = exc.__cause__ or exc
    sqlstate = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    if sqlstate:
        return str(sqlstate)
    args = getattr(cause, "args", ())
    if args and isinstance(args[0], int):
        return args[0]
    return None


def is_deadlock(exc: BaseException) -> bool:
    """A lost deadlock, serialization check or lock wait: the same step may well pass now."""
    code = error_code(exc)
    return code in ("40P01", "40001") or code in MYSQL_DEADLOCKS


# A server that refuses writes: PostgreSQL's read_only_sql_transaction (a hot standby,
# default_transaction_read_only); MariaDB/MySQL's --read-only (1290), a read-only
# transaction (1792), innodb_read_only (1874).
READ_ONLY = {"25006", 1290, 1792, 1874}


def is_read_only(exc: BaseException) -> bool:
    """The database refused a write because it is read-only (a replica, or set so)."""
    return error_code(exc) in READ_ONLY


def is_lost_connection(exc: BaseException) -> bool:
    """The connection broke under the step (not the data's fault)."""
    if isinstance(exc, InterfaceError):
        return True
    if not isinstance(exc, OperationalError):
        return False
    code = error_code(exc)
    if isinstance(code, str) and (code.startswith("08") or code in POSTGRES_RETRIED - {"40P01", "40001"}):
        return True
    if code in MYSQL_LOST:
        return True
    if code is None and any(words in str(exc).lower() for words in POSTGRES_LOST_WORDS):
        return True
    return not _usable()


def retryable(exc: BaseException) -> bool:
    """Whether a step that raised `exc` may be run again (see the module's docstring)."""
    if not isinstance(exc, DATABASE_ERRORS) or connection.in_atomic_block:
        return False
    return is_deadlock(exc) or is_lost_connection(exc)


def _usable() -> bool:
    """Whether the default connection still answers (False when Django already dropped it)."""
    if connection.connection is None:
        return False
    try:
        return bool(connection.is_usable())
    except Exception:  # noqa: BLE001 - a connection that cannot even be asked is not usable
        return False


def reconnect() -> None:
    """Drop the default connection; Django opens a new one at the next query."""
    try:
        connection.close()
    except DATABASE_ERRORS:
        # Closing a connection the server already dropped can fail too; it is closed.
        connection.connection = None


def retry(
    step: Callable[[], T],
    what: str,
    *,
    before_retry: Callable[[], object] | None = None,
    delays: Sequence[float] | None = None,
) -> T:
    """Run `step`; when it fails with a `retryable` error, reconnect if need be, and run
    `before_retry` then `step` again, at most once per delay of `delays` (RETRY_DELAYS).

    The last error is raised when every retry has failed, or at once when it is not
    retryable. Each retry is logged once, by its error's class and code only.
    """
    delays = RETRY_DELAYS if delays is None else delays
    for attempt in range(len(delays) + 1):
        try:
            if attempt and before_retry is not None:
                before_retry()  # on the new connection, and retried with the step if it fails
            return step()
        except DATABASE_ERRORS as exc:
            if attempt == len(delays) or not retryable(exc):
                raise
            lost = not is_deadlock(exc)
            logger.warning(
                "%s: %s (%s), %s; retrying (%d of %d)",
                what,
                type(exc).__name__,
                error_code(exc) or "no code",
                "the connection was lost" if lost else "a deadlock or lock wait was lost",
                attempt + 1,
                len(delays),
            )
            if lost:
                reconnect()
            time.sleep(delays[attempt] * random.uniform(0.9, 1.1))
    raise AssertionError("unreachable")  # pragma: no cover
