"""The connection-kill chaos run of issue 34 (finding 1), repeatable:
`DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/chaos.py` or
`DATABASE_URL=mysql://root@127.0.0.1:3306/mysql python bench/chaos.py` (`--rows 3000`).

N webhook rows due at once go to a local sink that counts each `webhook-id` (it answers
after `--delay` seconds, so the drain lasts long enough to be hit); two
`manage.py runtick --loop 1` processes drain them with the product's budget and lease
(50 s, 116 s); a killer ends one idle connection of theirs every `--kill-every` seconds
(`pg_terminate_backend`, `KILL`), the way an operator, a proxy's idle timeout or a
failover does, until the rows are drained. It prints the rows sent twice, the rows lost,
the drain time, the kills, and the failures and retries the ticks logged.

Before the write-back and the claim were retried (issue 34): MariaDB, 3,000 rows, 38
kills: 368 rows sent twice, a drain of 382 s instead of ~30 s (each failure left its rows
claimed for the lease).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import make_rows, throwaway_database  # noqa: E402
from bench.sink import Sink  # noqa: E402

TICKS = 2
LOOP_INTERVAL = 1  # seconds between a loop's ticks
# Each tick sends this many at once: with the sink's delay, a drain of some tens of seconds.
CONCURRENCY = 16


def idle_sessions(cursor: Any, vendor: str, spare: set[int]) -> list[int]:
    """The ticks' idle sessions on this database (not `spare`, not the fast lane's LISTEN)."""
    from notifications.services.wake import LISTENER_NAME

    if vendor == "postgresql":
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle' "
            "AND backend_type = 'client backend' AND application_name <> %s",
            [LISTENER_NAME],
        )
    else:
        cursor.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND COMMAND = 'Sleep'")
    return [int(row[0]) for row in cursor.fetchall() if int(row[0]) not in spare]


def session_id(cursor: Any, vendor: str) -> int:
    cursor.execute("SELECT pg_backend_pid()" if vendor == "postgresql" else "SELECT CONNECTION_ID()")
    return int(cursor.fetchone()[0])


class Killer(threading.Thread):
    """Ends one idle tick connection every `every` seconds, from a connection of its own."""

    def __init__(self, every: float, spare: set[int]) -> None:
        super().__init__(daemon=True)
        self.every = every
        self.spare = set(spare)
        self.kills = 0
        self.stop = threading.Event()

    def run(self) -> None:
        from django.db import connection

        rng = random.Random(34)
        with connection.cursor() as cursor:
            vendor = connection.vendor
            self.spare.add(session_id(cursor, vendor))
            while not self.stop.wait(self.every):
                idle = idle_sessions(cursor, vendor, self.spare)
                if not idle:
                    continue
                victim = rng.choice(idle)
                try:
                    if vendor == "postgresql":
                        cursor.execute("SELECT pg_terminate_backend(%s)", [victim])
                    else:
                        cursor.execute(f"KILL {victim}")
                    self.kills += 1
                except Exception:
                    continue
        connection.close()


def start_ticks(log_dir: Path) -> list[tuple[subprocess.Popen[str], Path]]:
    settings = {"NOTIFICATIONS_TICK_BUDGET": 50, "NOTIFICATIONS_CONCURRENCY": CONCURRENCY}
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", BENCH_SETTINGS=json.dumps(settings))
    ticks = []
    for i in range(TICKS):
        log = log_dir / f"tick{i}.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [sys.executable, "manage.py", "runtick", "--loop", str(LOOP_INTERVAL), "--settings=bench.settings"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )
        ticks.append((proc, log))
    return ticks


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=3_000)
    parser.add_argument("--kill-every", type=float, default=4.0, help="seconds between kills")
    parser.add_argument("--delay", type=float, default=0.25, help="the sink's answer time (seconds)")
    parser.add_argument("--timeout", type=float, default=900, help="give up after this many seconds")
    args = parser.parse_args(argv)
    url = os.environ.get("DATABASE_URL")
    if not url or url.startswith("sqlite"):
        parser.error("DATABASE_URL must name a PostgreSQL or MariaDB/MySQL server (connections to kill)")
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    sink = Sink(delay=args.delay)
    try:
        with throwaway_database(url) as database:
            os.environ["BENCH_DATABASE"] = json.dumps(database)
            import django

            django.setup()
            from django.core.management import call_command
            from django.db import connection

            from notifications.models import Notification

            call_command("migrate", verbosity=0)
            vendor = connection.vendor
            make_rows(args.rows, webhook_url=sink.url("/chaos"), age=1)
            with connection.cursor() as cursor:
                spare = {session_id(cursor, vendor)}
            log_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"notifications-chaos-{os.getpid()}"
            log_dir.mkdir(parents=True, exist_ok=True)
            started = time.monotonic()
            ticks = start_ticks(log_dir)
            killer = Killer(args.kill_every, spare)
            killer.start()
            drained = None
            try:
                while time.monotonic() - started < args.timeout:
                    time.sleep(0.5)
                    stats = sink.stats()
                    if stats["unique"] >= args.rows and not Notification.objects.exists():
                        drained = time.monotonic() - started
                        break
            finally:
                killer.stop.set()
                killer.join(30)
                for proc, _ in ticks:
                    proc.send_signal(signal.SIGTERM)
                for proc, _ in ticks:
                    try:
                        proc.wait(120)
                    except subprocess.TimeoutExpired:
                        proc.kill()
            stats = sink.stats()
            left = Notification.objects.count()
            connection.close()
            logs = "\n".join(log.read_text() for _, log in ticks)
    finally:
        sink.close()
    result = {
        "database": vendor,
        "rows": args.rows,
        "kills": killer.kills,
        "sent_twice": stats["duplicates"],
        "lost": args.rows - stats["unique"] + left,
        "drain_seconds": None if drained is None else round(drained, 1),
        "tick_failures": logs.count("tick failed"),
        "write_back_retries": logs.count("write-back:"),
        "claim_retries": logs.count("claim:"),
    }
    print(json.dumps(result))
    print(
        f"chaos on {vendor}: {args.rows:,} rows, {TICKS} runtick --loop, a connection killed every "
        f"{args.kill_every:g} s ({killer.kills} kills): sent twice {result['sent_twice']}, lost {result['lost']}, "
        f"drained in {result['drain_seconds']} s; tick failures {result['tick_failures']}, retried write-backs "
        f"{result['write_back_retries']}, retried claims {result['claim_retries']} (logs in {log_dir})"
    )
    return result


if __name__ == "__main__":
    main()
