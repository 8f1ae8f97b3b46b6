"""Killing a database connection from another one, as an operator's `KILL` or
`pg_terminate_backend` (or a failover) does, and waiting until it is gone."""

from __future__ import annotations

import time
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper


def backend_id(conn: BaseDatabaseWrapper) -> int:
    """The server's id of `conn`'s session (PostgreSQL: its backend pid)."""
    query = "SELECT pg_backend_pid()" if conn.vendor == "postgresql" else "SELECT CONNECTION_ID()"
    with conn.cursor() as cursor:
        cursor.execute(query)
        return int(cursor.fetchone()[0])


def kill(session: int, timeout: float = 10) -> None:
    """End the server session `session` from a connection of its own; return once it is gone."""
    killer: Any = connections.create_connection("default")
    try:
        with killer.cursor() as cursor:
            if killer.vendor == "postgresql":
                # The second argument waits (milliseconds) until the backend has exited.
                cursor.execute("SELECT pg_terminate_backend(%s, %s)", [session, int(timeout * 1000)])
                return
            cursor.execute(f"KILL {int(session)}")
            deadline = time.monotonic() + timeout
            while True:  # KILL returns at once; the session ends when its thread notices
                cursor.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = %s", [session])
                if not cursor.fetchone()[0]:
                    return
                assert time.monotonic() < deadline, f"session {session} still there after {timeout}s"
                time.sleep(0.01)
    finally:
        killer.close()
