"""Scenario 17 of the benchmark: the Notifications list's activity chart over a busy day
of tick records (issue 34, finding 10).

`python bench/run.py --scenario tick-chart` (`--tick-records 345600`, the default: four
hosts ticking every second for 24 hours; `--quick` uses 20,000). Times, median of the
repeats: the chart's query (`charts.activity`, summed by the database per bucket), the
same chart read the old way (every record fetched and summed in Python), and the whole
Notifications list page as a superuser sees it.
"""

from __future__ import annotations

import statistics
import time
from datetime import timedelta
from typing import Any

from bench.common import clear

HOSTS = 4
CHUNK = 20_000


def fill_ticks(records: int) -> None:
    """`records` tick records over the last 24 hours, HOSTS hosts ticking in turn."""
    from django.utils import timezone

    from notifications.models import TickRun

    now = timezone.now()
    spacing = 86_400 / records
    for start in range(0, records, CHUNK):
        TickRun.objects.bulk_create(
            TickRun(
                started_at=now - timedelta(seconds=i * spacing + 0.2),
                finished_at=now - timedelta(seconds=i * spacing),
                host=f"host{i % HOSTS}",
                pid=1000 + i % HOSTS,
                claimed=i % 3,
                succeeded=i % 3,
            )
            for i in range(start, min(records, start + CHUNK))
        )


def read_every_record(now: Any) -> int:
    """The chart's read before it was summed in the database: every record of the day."""
    from notifications.models import TickRun

    rows = TickRun.objects.filter(finished_at__gte=now - timedelta(hours=24), finished_at__lte=now)
    return sum(s + p for _, s, p in rows.values_list("finished_at", "succeeded", "partial").order_by())


def timed(read: Any, repeats: int) -> tuple[float, int]:
    """Median seconds of `repeats` runs of `read`, and the statements of the last one."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    times = []
    statements = 0
    for _ in range(repeats):
        with CaptureQueriesContext(connection) as queries:
            began = time.perf_counter()
            read()
            times.append(time.perf_counter() - began)
        statements = len(queries)
    return statistics.median(times), statements


def scenario_tick_chart(table: Any, records: int, repeats: int) -> None:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.urls import reverse
    from django.utils import timezone

    from notifications.admin import charts
    from notifications.models import TickRun

    clear()
    began = time.monotonic()
    fill_ticks(records)
    filled = time.monotonic() - began
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    vendor = connection.vendor
    now = timezone.now()
    summed, statements = timed(lambda: charts.activity(now), repeats)
    table.add(
        f"17. activity chart over {records:,} tick records of 24 h ({vendor}), summed by the database",
        f"**{summed * 1000:.0f} ms** in {statements} query (median of {repeats}; records made in {filled:.0f} s)",
        "< 250 ms",
        summed < 0.25,
    )
    every, _ = timed(lambda: read_every_record(now), repeats)
    table.add(f"17. the same chart read record by record, as before ({vendor})", f"{every * 1000:.0f} ms")
    User.objects.filter(username="bench-chart").delete()
    operator = User.objects.create_superuser("bench-chart", "chart@example.com", None)
    client = Client()
    client.force_login(operator)
    url = reverse("admin:notifications_notification_changelist")
    page, _ = timed(lambda: client.get(url), repeats)
    table.add(f"17. the Notifications list with that chart ({vendor})", f"{page * 1000:.0f} ms (median of {repeats})")
    TickRun.objects.all().delete()
    operator.delete()
