"""`runtick --loop` holds no database connection while it waits between ticks.

A long-running loop (a container, a systemd service) must not pin a PostgreSQL
connection slot or an SQLite file handle for hours; each tick opens what it needs
and the loop closes it before sleeping. On PostgreSQL the one exception is the fast
lane's LISTEN connection (notifications.services.wake), idle and named by its application_name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest
from django.db import connection

from notifications.services import wake
from tests.support.processes import Runtick

pytestmark = pytest.mark.slow


def database_now() -> object:
    """PostgreSQL's clock: connections that began before it are not the child's."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def open_connections(child: Runtick, since: object = None) -> int:
    """How many database connections (PostgreSQL: opened since `since`, the child's start)
    or database file handles (SQLite) the child holds."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")  # pg_stat_activity is cached per transaction
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND backend_type = 'client backend' AND pid <> pg_backend_pid() "
                # A pooler's idle server connections from earlier tests (the PgBouncer pass of
                # the multi-process tests) began before the child and are not its own.
                "AND backend_start >= %s "
                "AND application_name <> %s",  # the fast lane's LISTEN connection stays, on purpose
                [since, wake.LISTENER_NAME],
            )
            return cursor.fetchone()[0]
    database = os.path.realpath(connection.settings_dict["NAME"])
    held = 0
    for fd in Path(f"/proc/{child.pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            if os.readlink(fd).startswith(database):  # the file, its -wal and its -shm
                held += 1
    return held


def wait_for(predicate, child: Runtick, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert child.proc.poll() is None, f"runtick exited early:\n{child.stdout}\n{child.stderr}"
        assert time.monotonic() < deadline, f"not within {timeout}s:\n{child.stdout}\n{child.stderr}"
        time.sleep(0.02)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads open files from /proc")
def test_the_loop_closes_its_connections_between_ticks(children, make_row):
    make_row()  # the first tick has a row to write back, so it surely used the database
    started = database_now() if connection.vendor == "postgresql" else None
    child = children.start("--loop", "3")

    for tick in (1, 2):
        wait_for(lambda tick=tick: len(child.summaries()) >= tick, child)
        # Between this tick's summary and the next one, the connection goes away.
        seen_closed = False
        while len(child.summaries()) == tick:
            if open_connections(child, started) == 0:
                seen_closed = True
                break
            assert child.proc.poll() is None, child.stderr
            time.sleep(0.02)
        assert seen_closed, f"tick {tick}: a connection stayed open into the next tick\n{child.stdout}"

    assert child.summaries()[0]["succeeded"] == 1
    child.send(signal.SIGTERM)
    assert child.wait() == 0
