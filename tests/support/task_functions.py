"""Tasks the tests of `notifications.tasks` enqueue (Django 6.0+ only: imports django.tasks).

Module-level, so `runtick` (in this process or a child) imports them by their path.
"""

from __future__ import annotations

import asyncio
import datetime
import os

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
