"""`schedule()` one row at a time: per-row time, CPU and statements, and where the CPU goes.

    .venv/bin/python -m bench.enqueue_profile [--rows 2000] [--repeats 5] [--profile 25]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python -m bench.enqueue_profile

A throwaway database (SQLite, or the server DATABASE_URL names), migrated; then, `--repeats`
times in alternating order, `--rows` calls of `schedule()` for each kind of row: a webhook
row (names nobody: one INSERT) and an email row (its addresses are indexed with it,
`models.address_keys`). Printed per row: wall time and this thread's CPU time
(`time.thread_time()`, which the machine's other work moves far less), medians of the
repeats, and the statements the connection ran (transaction control and PostgreSQL's
NOTIFY included). `--profile N` runs each kind once more under cProfile and prints its
N costliest functions by own time.

`--callgrind` runs each kind once, after the warm-up, between calls of `os.getppid()`,
for deterministic instruction counts:

    valgrind --tool=callgrind --dump-before=getppid --callgrind-out-file=/tmp/cg.%p \
        .venv/bin/python -m bench.enqueue_profile --callgrind --rows 300

writes one profile per segment (`/tmp/cg.<pid>.N`): the webhook rows are the second
(`.2`), the email rows the fourth (`.4`); `callgrind_annotate` on each gives its total.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/enqueue_profile.py`

from bench.common import migrated_site
from bench.enqueue import Counter, mail_fields, webhook_fields

KINDS: dict[str, Callable[[int], dict[str, Any]]] = {"webhook row": webhook_fields, "email row": mail_fields}


def run(fields: Callable[[int], dict[str, Any]], rows: int) -> tuple[float, float, int]:
    """(wall s, CPU s, statements) of `rows` calls of schedule(), the table emptied afterwards."""
    from django.db import connection

    from notifications.api import schedule
    from notifications.models import Notification

    arguments = [fields(n) for n in range(rows)]
    counter = Counter()
    with connection.execute_wrapper(counter):
        wall, cpu = time.perf_counter(), time.thread_time()
        for given in arguments:
            schedule(**given)
        cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    Notification.objects.all().delete(with_attachments=False)
    return wall, cpu, counter.statements


def profile(fields: Callable[[int], dict[str, Any]], rows: int, top: int) -> None:
    from notifications.api import schedule
    from notifications.models import Notification

    arguments = [fields(n) for n in range(rows)]
    profiler = cProfile.Profile()
    profiler.enable()
    for given in arguments:
        schedule(**given)
    profiler.disable()
    Notification.objects.all().delete(with_attachments=False)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def schedule_between_marks(rows: int) -> None:
    """Each kind's `rows` calls of schedule() alone between two calls of `os.getppid()`
    (valgrind's `--dump-before=getppid` ends a segment at each)."""
    from notifications.api import schedule
    from notifications.models import Notification

    for fields in KINDS.values():
        arguments = [fields(n) for n in range(rows)]
        os.getppid()
        for given in arguments:
            schedule(**given)
        os.getppid()
        Notification.objects.all().delete(with_attachments=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile: the N costliest functions")
    parser.add_argument("--callgrind", action="store_true", help="each kind once, between calls of os.getppid()")
    options = parser.parse_args()
    with migrated_site():
        from django.db import connection

        run(webhook_fields, 200)  # warm: imports, caches, the connection
        run(mail_fields, 200)
        if options.callgrind:
            schedule_between_marks(options.rows)
            connection.close()
            return
        results: dict[str, list[tuple[float, float, int]]] = {kind: [] for kind in KINDS}
        for repeat in range(options.repeats):
            order = list(KINDS) if repeat % 2 == 0 else list(reversed(KINDS))
            for kind in order:
                results[kind].append(run(KINDS[kind], options.rows))
        print(f"schedule() x {options.rows:,} on {connection.vendor}, median of {options.repeats}:")
        for kind, runs in results.items():
            wall = statistics.median(r[0] for r in runs) / options.rows * 1000
            cpu = statistics.median(r[1] for r in runs) / options.rows * 1000
            cpus = ", ".join(f"{r[1] / options.rows * 1000:.3f}" for r in runs)
            print(
                f"  {kind}: {wall:.3f} ms wall, {cpu:.3f} ms CPU per row ({cpus}); "
                f"{runs[0][2] / options.rows:g} statements per row"
            )
        if options.profile:
            for kind, fields in KINDS.items():
                print(f"\n--- {kind} under cProfile")
                profile(fields, options.rows, options.profile)
        connection.close()


if __name__ == "__main__":
    main()
