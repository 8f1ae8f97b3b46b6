"""`manage.py runtick` child processes against the test database, for process-level tests.

A child reads the database of the running test from NOTIFICATIONS_TEST_DATABASE and
extra settings from NOTIFICATIONS_TEST_SETTINGS (see tests/child_settings.py). Tests
that start children need `@pytest.mark.django_db(transaction=True)`: a child sees only
committed data.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from django.db import connection, transaction

REPO = Path(__file__).resolve().parents[2]
# What children's DATABASES entry changes while `through(...)` is in effect (a pooler's
# HOST and PORT): the children connect there, the test itself stays on the direct line.
_route: dict[str, Any] = {}
SUMMARY = re.compile(r"claimed=(\d+) succeeded=(\d+) partial=(\d+) retried=(\d+) dead_lettered=(\d+)")
TABLE = "notifications_notification"


def child_env(
    settings: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    db_options: dict[str, Any] | None = None,
) -> dict[str, str]:
    """The environment of a child: this test's database (its OPTIONS updated by
    `db_options`), extra settings, unbuffered output."""
    database = {**connection.settings_dict, **_route}
    database["OPTIONS"] = {**database.get("OPTIONS", {}), **(db_options or {})}
    variables = dict(os.environ)
    variables.pop("DJANGO_SETTINGS_MODULE", None)  # --settings names the child's module
    variables["NOTIFICATIONS_TEST_DATABASE"] = json.dumps(database, default=str)
    variables["NOTIFICATIONS_TEST_SETTINGS"] = json.dumps(settings or {})
    variables["PYTHONUNBUFFERED"] = "1"
    variables.update(env or {})
    return variables


@contextlib.contextmanager
def through(overrides: dict[str, Any]) -> Iterator[None]:
    """Children started inside connect with their DATABASES entry updated by `overrides`."""
    _route.update(overrides)
    try:
        yield
    finally:
        _route.clear()


def parse_summary(line: str) -> dict[str, int] | None:
    """The counts of a `runtick` summary line, or None if `line` is not one."""
    match = SUMMARY.search(line)
    if not match:
        return None
    names = ("claimed", "succeeded", "partial", "retried", "dead_lettered")
    return dict(zip(names, map(int, match.groups()), strict=True))


class Runtick:
    """One `python manage.py runtick ...` child; stdout and stderr are collected as they come."""

    def __init__(
        self,
        *args: str,
        settings: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        db_options: dict[str, Any] | None = None,
    ):
        command = [sys.executable, "manage.py", "runtick", "--settings=tests.child_settings", *args]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            command,
            cwd=REPO,
            env=child_env(settings, env, db_options),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._stdout: list[str] = []
        self._stderr: list[str] = []
        self._changed = threading.Condition()
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self._stdout), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, self._stderr), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: Any, into: list[str]) -> None:
        for line in stream:
            with self._changed:
                into.append(line.rstrip("\n"))
                self._changed.notify_all()
        stream.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def stdout(self) -> str:
        with self._changed:
            return "\n".join(self._stdout)

    @property
    def stderr(self) -> str:
        with self._changed:
            return "\n".join(self._stderr)

    def summaries(self) -> list[dict[str, int]]:
        """Every summary line printed so far, parsed."""
        with self._changed:
            return [s for s in map(parse_summary, self._stdout) if s is not None]

    def wait_for_output(self, predicate: Callable[[Runtick], bool], timeout: float = 30) -> None:
        """Block until `predicate(self)` holds; fail with the child's output if it does not."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self):
                if self.proc.poll() is not None and not any(r.is_alive() for r in self._readers):
                    raise AssertionError(f"runtick exited with {self.proc.returncode}:\n{self._describe()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"runtick: condition not met within {timeout}s:\n{self._describe()}")
                self._changed.wait(min(left, 0.2))

    def wait(self, timeout: float = 60) -> int:
        """The exit status; fails the test (and kills the child) if it does not exit in time."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"runtick did not exit within {timeout}s:\n{self._describe()}") from None
        for reader in self._readers:
            reader.join(5)
        return code

    def send(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL: the process dies at once, holding whatever it claimed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def _describe(self) -> str:
        out, err = "\n".join(self._stdout), "\n".join(self._stderr)
        return f"--- stdout\n{out}\n--- stderr\n{err}"


class Children:
    """The runtick children of one test; whatever is still running at the end is killed."""

    def __init__(self) -> None:
        self.started: list[Runtick] = []

    def start(
        self,
        *args: str,
        settings: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        db_options: dict[str, Any] | None = None,
    ) -> Runtick:
        child = Runtick(*args, settings=settings, env=env, db_options=db_options)
        self.started.append(child)
        return child

    def close(self) -> None:
        for child in self.started:
            child.kill()


def run(*args: str, settings: dict[str, Any] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run one runtick child to the end and return its exit status and output."""
    return subprocess.run(
        [sys.executable, "manage.py", "runtick", "--settings=tests.child_settings", *args],
        cwd=REPO,
        env=child_env(settings),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# --- a starting gate for racing ticks --------------------------------------------------


@contextlib.contextmanager
def claim_gate() -> Iterator[Callable[[list[Runtick], float], None]]:
    """Hold the lock every claim needs, so children started inside all wait at the claim.

    On leaving the block the lock is released and the waiting ticks race for the rows
    from the same instant. Inside, call the yielded function with the children to wait
    until each of them is blocked at its claim.
    """
    if connection.vendor == "mysql":
        with _mysql_read_lock():
            yield _wait_until_blocked
        return
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                # Conflicts with the claim's UPDATE and FOR UPDATE, not with plain reads.
                cursor.execute(f"LOCK TABLE {TABLE} IN EXCLUSIVE MODE")
        else:
            # SQLite: an IMMEDIATE transaction holds the database's write lock; the
            # children's claims wait on it (busy timeout) instead of failing.
            _take_write_lock()
        yield _wait_until_blocked


@contextlib.contextmanager
def _mysql_read_lock() -> Iterator[None]:
    """MariaDB/MySQL: a READ table lock, like PostgreSQL's EXCLUSIVE mode above: plain reads
    go on, while the claim's FOR UPDATE, UPDATE and INSERT wait for it (SKIP LOCKED skips
    locked rows, never a locked table). While it is held this connection reads that table
    only (and information_schema)."""
    with connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLES {TABLE} READ")
        try:
            yield
        finally:
            cursor.execute("UNLOCK TABLES")


def _take_write_lock() -> None:
    """SQLite: make sure this transaction holds the write lock (whatever its BEGIN mode)."""
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {TABLE} SET id = id WHERE 0 = 1")


def short_lock_wait() -> dict[str, Any]:
    """A child's `db_options` that make it give up waiting for a lock after about a second:
    its claim fails, as it would while the database restarts."""
    if connection.vendor == "postgresql":
        return {"options": "-c lock_timeout=500"}
    if connection.vendor == "mysql":  # whole seconds; table locks wait lock_wait_timeout
        return {"init_command": "SET SESSION lock_wait_timeout = 1, innodb_lock_wait_timeout = 1"}
    return {"timeout": 0.5}


def _wait_until_blocked(children: list[Runtick], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not _all_blocked(children):
        for child in children:
            if child.proc.poll() is not None:
                raise AssertionError(f"runtick exited early with {child.proc.returncode}:\n{child._describe()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"not every runtick reached its claim within {timeout}s")
        time.sleep(0.05)


def _all_blocked(children: list[Runtick]) -> bool:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")  # pg_stat_activity is cached per transaction
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            return cursor.fetchone()[0] >= len(children)
    if connection.vendor == "mysql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() "
                "AND STATE LIKE 'Waiting for table%' AND ID <> CONNECTION_ID()"
            )
            return cursor.fetchone()[0] >= len(children)
    # SQLite: a child has opened the database file only to claim (system checks do not
    # touch it), and the claim then waits on the lock held here.
    if not Path("/proc/self/fd").is_dir():  # no /proc: give the children time to get there
        time.sleep(5)
        return True
    database = os.path.realpath(connection.settings_dict["NAME"])
    return all(_has_open(child.pid, database) for child in children)


def _has_open(pid: int, path: str) -> bool:
    fds = Path(f"/proc/{pid}/fd")
    with contextlib.suppress(OSError):
        for fd in fds.iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) == path:
                    return True
    return False


def run_benchmark(out: Path, on_postgres: bool, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """`bench/run.py --quick *args --out out` in a child process, on the database of this
    pass (PostgreSQL, MariaDB: a throwaway database the benchmark makes on the local server)."""
    from django.conf import settings

    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    db = settings.DATABASES["default"]
    if on_postgres:
        env["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/postgres"
    elif db["ENGINE"] == "django.db.backends.mysql":
        env["DATABASE_URL"] = f"mysql://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    return subprocess.run(
        [sys.executable, "bench/run.py", "--quick", *args, "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
