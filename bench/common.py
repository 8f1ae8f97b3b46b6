"""What the benchmark's scenarios share: the throwaway database, child processes
(`bench.worker` jobs), rows made in bulk, emptying the tables, and small figures.

bench/run.py imports the scenario modules; they and run.py import these helpers from
here, never from run.py (which would make the two import each other).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PAYLOAD = {"order": 12345, "status": "shipped", "customer": "Ada Lovelace", "items": [1, 2, 3]}


# --- the throwaway database ----------------------------------------------------------------


@contextlib.contextmanager
def throwaway_database(url: str | None):
    """A fresh database for this run, dropped afterwards: SQLite file, PostgreSQL or MariaDB/MySQL database."""
    if not url:
        folder = tempfile.mkdtemp(prefix="notifications-bench-")
        config = {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(Path(folder) / "bench.sqlite3"),
            # As the demo project ships them: concurrent ticks on one host.
            "OPTIONS": {
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
            },
        }
        try:
            yield config
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    import environ

    config = environ.Env.db_url_config(url)
    if config["ENGINE"] == "django.db.backends.mysql":
        with throwaway_mysql_database(config) as mysql_config:
            yield mysql_config
        return
    import psycopg

    name = f"notifications_bench_{os.getpid()}"
    admin = dict(host=config.get("HOST") or None, port=config.get("PORT") or None, user=config.get("USER") or None)
    if config.get("PASSWORD"):
        admin["password"] = config["PASSWORD"]
    with psycopg.connect(dbname=config.get("NAME") or "postgres", autocommit=True, **admin) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    config = {**config, "NAME": name}
    try:
        yield config
    finally:
        from django.db import connections

        connections.close_all()
        with psycopg.connect(dbname="postgres", autocommit=True, **admin) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def migrated_site(url: str | None = None):
    """Django set up on a throwaway database (`url`, else DATABASE_URL, else SQLite) with
    the bench's settings, migrated; dropped afterwards. For scripts run on their own."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    with throwaway_database(url or os.environ.get("DATABASE_URL")) as database:
        os.environ["BENCH_DATABASE"] = json.dumps(database)
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        yield


@contextlib.contextmanager
def throwaway_mysql_database(config: dict):
    """MariaDB/MySQL: a database of this run's own, utf8mb4, at READ COMMITTED (the README's setup)."""
    import MySQLdb

    name = f"notifications_bench_{os.getpid()}"
    admin = {"host": config.get("HOST") or "127.0.0.1", "port": int(config.get("PORT") or 3306)}
    admin["user"] = config.get("USER") or "root"
    admin["password"] = config.get("PASSWORD") or ""

    def execute(sql: str) -> None:
        conn = MySQLdb.connect(**admin)
        try:
            conn.cursor().execute(sql)
        finally:
            conn.close()

    execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    options = {"charset": "utf8mb4", "isolation_level": "read committed", **config.get("OPTIONS", {})}
    try:
        yield {**config, "NAME": name, "OPTIONS": options}
    finally:
        from django.db import connections

        connections.close_all()
        execute(f"DROP DATABASE IF EXISTS `{name}`")


# --- child processes -----------------------------------------------------------------------


def job(name: str, args: dict, settings: dict | None = None) -> dict:
    """Run one bench.worker job in a fresh process; return its JSON result."""
    return jobs_together(name, [args], settings)[0]


def jobs_together(name: str, args_list: list[dict], settings: dict | None = None) -> list[dict]:
    """Start one process per args, wait until all are ready, then let them go at once."""
    return run_together([(name, args, settings) for args in args_list])


def run_together(specs: list[tuple[str, dict, dict | None]]) -> list[dict]:
    """Start one bench.worker process per (job, args, settings); all ready, then all go at once."""
    from django.db import connections

    connections.close_all()  # SQLite: hold no lock while children write
    procs = []
    for name, args, settings in specs:
        env = dict(os.environ, BENCH_SETTINGS=json.dumps(settings or {}), PYTHONPATH=str(ROOT))
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "bench.worker", name, json.dumps({**args, "barrier": True})],
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for (name, _, _), proc in zip(specs, procs, strict=True):
        line = proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"{name} did not start: {line}{proc.stderr.read()}")
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    results = []
    for (name, _, _), proc in zip(specs, procs, strict=True):
        out, err = proc.communicate(timeout=1800)
        if proc.returncode:
            raise RuntimeError(f"{name} failed ({proc.returncode}): {err[-3000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


# --- rows ------------------------------------------------------------------------------------


def make_rows(
    n: int,
    *,
    webhook_url: str = "",
    webhook_urls: list[str] | None = None,
    email: bool = False,
    recurring: bool = False,
    age: float = 60,
) -> None:
    """`n` valid due rows, created in bulk (the tick validates them as it claims them).

    With `webhook_urls`, the rows are spread evenly over them in a shuffled (but fixed)
    order, as a site's rows to its customers' endpoints would come due.
    """
    import random

    from django.utils import timezone

    from notifications.models import Notification

    due = timezone.now() - timedelta(seconds=age)
    urls = [webhook_url] * n
    if webhook_urls:
        urls = [webhook_urls[i % len(webhook_urls)] for i in range(n)]
        random.Random(n).shuffle(urls)
    channels = (["email"] if email else []) + (["webhook"] if urls[0] else []) if n else []
    rows = [
        Notification(
            channels=channels,
            email_to="ada@example.com" if email else "",
            subject="Your order shipped" if email else "",
            body="Order 12345 is on its way." if email else "",
            webhook_url=url,
            payload=PAYLOAD,
            # Yearly: a tick that runs across the next firing would claim the rows twice.
            recurrence_rule="0 9 1 1 *" if recurring else "",
            timezone="UTC",
            next_fire_at=due,
        )
        for url in urls
    ]
    Notification.objects.bulk_create(rows, batch_size=2000)


def clear() -> None:
    """Empty every table a scenario fills, flow control's too: one scenario's failures must not
    open a circuit (or spend a rate limit) for the next."""
    from post_office.models import Email, Log

    from notifications.models import DeliveryAttempt, Notification, RateBucket, Target, TickRun

    for model in (Notification, DeliveryAttempt, TickRun, Target, RateBucket, Log, Email):
        model.objects.all().delete()


def remaining() -> int:
    from notifications.models import Notification

    return Notification.objects.count()


# --- figures ---------------------------------------------------------------------------------


def rate(rows: int, seconds: float) -> float:
    return rows / seconds if seconds > 0 else float("inf")


def median(values: list[float]) -> float:
    return statistics.median(values)


def due_tick_seconds(due: int, repeats: int) -> tuple[list[float], list[float]]:
    """Tick times for `due` due rows, and the part of each spent waiting on the database."""
    from django.db import connection

    from notifications.tick.engine import run_tick

    times, db_times = [], []
    for _ in range(repeats):
        make_rows(due, email=True)
        in_db = [0.0]

        def timed(execute, sql, params, many, context, in_db=in_db):
            started = time.perf_counter()
            try:
                return execute(sql, params, many, context)
            finally:
                in_db[0] += time.perf_counter() - started

        with connection.execute_wrapper(timed):
            started = time.perf_counter()
            report = run_tick(limit=100)
            times.append(time.perf_counter() - started)
        db_times.append(in_db[0])
        assert report.counts()["succeeded"] == due, report.summary()
    return times, db_times
