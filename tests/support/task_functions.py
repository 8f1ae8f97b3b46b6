"""Tasks the tests of `notifications.tasks` enqueue (Django 6.0+ only: imports django.tasks).

Module-level, so `runtick` (in this process or a child) imports them by their path.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import socket

from django.tasks import task


@task()
def add(a: int, b: int) -> int:
    return a + b


@task()
def fail(message: str) -> None:
    raise ValueError(message)


@task()
async def add_later(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task()
def today() -> datetime.date:
    return datetime.date(2026, 1, 1)


@task()
def returns_a_set():  # unannotated on purpose: JSON refuses what it returns
    return {1, 2}


@task()
def append_line(path: str, line: str) -> str:
    """Appends one line (one write under PIPE_BUF: atomic with O_APPEND) and returns it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)
    return line


@task()
def count_users() -> int:
    """A task that uses the database, as a site's tasks do."""
    from django.contrib.auth.models import User

    return User.objects.count()


# Seconds a task held at a gate waits to be released: far beyond any test's wait.
GATE_SECONDS = 300


@task()
def held_at_gate(port: int) -> str:
    """Tells the test's gate it started (one connection per run: `tests/support/task_gate.py`),
    then runs until the gate releases it; returns the gate's word."""
    with socket.create_connection(("127.0.0.1", port), timeout=GATE_SECONDS) as conn:
        conn.sendall(b"started\n")
        return conn.makefile("r").readline().strip()
