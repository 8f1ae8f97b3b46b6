"""Scenario 12 of the benchmark: operator actions on a select-all of many rows.

`python bench/run.py --scenario actions` (`--action-rows 100000`, the default; `--quick`
uses 2,000). Requeue, pause, resume, run now and purge each take the whole table, as the
admin's "select all" does, and are timed; while the requeue runs, the host site saves
one row of its own every 50 ms from another connection, and the longest of those saves
is reported: each action works in chunks of `ACTION_BATCH` rows, one short transaction
each, so the host's writes get their turn between chunks.

Then the operator's own path: "Select all" and "Requeue" posted to the admin's list of
dead letters by a logged-in superuser, which also writes one `LogEntry` per row (a
chunk's entries in the chunk's transaction).
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

from bench.common import clear, rate

HOST_WRITE_INTERVAL = 0.05  # seconds between the host's saves during the requeue


def make_dead_rows(n: int) -> None:
    from django.utils import timezone

    from notifications.models import Notification

    now = timezone.now()
    rows = [
        Notification(
            channels=["webhook"],
            webhook_url="https://hooks.example.com/in",
            payload={"order": i},
            timezone="UTC",
            next_fire_at=None,
            dead_lettered_at=now - timedelta(minutes=5),
            error_count=3,
            last_error="webhook: HTTP 503",
        )
        for i in range(n)
    ]
    Notification.objects.bulk_create(rows, batch_size=2000)


class HostWrites:
    """The host site's own saves, from another thread (another connection), timed."""

    def __init__(self, pk: Any) -> None:
        self.pk = pk
        self.latencies: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        from django.db import connections

        from notifications.models import Notification

        try:
            while not self.stop.is_set():
                started = time.monotonic()
                Notification.objects.filter(pk=self.pk).update(subject=f"host {started:.3f}")
                self.latencies.append(time.monotonic() - started)
                self.stop.wait(HOST_WRITE_INTERVAL)
        finally:
            connections.close_all()

    def __enter__(self) -> HostWrites:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def timed(action: Any) -> tuple[float, Any]:
    started = time.monotonic()
    result = action()
    return time.monotonic() - started, result


def scenario_actions(table: Any, rows: int) -> None:
    from django.db import connection
    from django.utils import timezone

    from notifications import services
    from notifications.models import Notification
    from notifications.services.actions import ACTION_BATCH

    clear()
    make_dead_rows(rows)
    host_row = services.schedule_notification(
        channels=["webhook"], webhook_url="https://hooks.example.com/host", payload={}
    )
    selection = Notification.objects.exclude(pk=host_row.pk)
    vendor = connection.vendor

    with HostWrites(host_row.pk) as host:
        seconds, result = timed(lambda: services.requeue(selection))
    longest = max(host.latencies, default=0.0)
    table.add(
        f"requeue a select-all of {rows:,} dead letters ({vendor}, chunks of {ACTION_BATCH})",
        f"{seconds:.1f} s ({result.changed:,} changed, {rate(result.changed, seconds):,.0f} rows/s); "
        f"host saves beside it: {len(host.latencies)}, longest {longest * 1000:.0f} ms",
    )
    for name, action in (("pause", services.PAUSE), ("resume", services.RESUME), ("run now", services.RUN_NOW)):
        if name == "run now":  # resumed rows are due: scheduled an hour ahead, run now applies
            selection.update(next_fire_at=timezone.now() + timedelta(hours=1))
        seconds, result = timed(lambda action=action: services.act(action, selection))
        table.add(f"{name} a select-all of {rows:,} rows ({vendor})", f"{seconds:.1f} s ({result.changed:,} changed)")
    seconds, deleted = timed(lambda: services.purge(selection))
    table.add(f"purge a select-all of {rows:,} rows ({vendor})", f"{seconds:.1f} s ({deleted:,} deleted)")
    clear()
    admin_requeue(table, rows, vendor)


def admin_requeue(table: Any, rows: int, vendor: str) -> None:
    """Select all -> Requeue on the admin's list of dead letters, as an operator posts it."""
    from django.contrib.admin.models import LogEntry
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import reverse

    from notifications.models import Notification

    make_dead_rows(rows)
    operator = User.objects.create_superuser("bench-operator", "operator@example.com", None)
    client = Client()
    client.force_login(operator)
    page = list(Notification.objects.order_by("pk").values_list("pk", flat=True)[:100])  # the boxes of one page
    form = {"action": "requeue", "select_across": "1", "index": "0", "_selected_action": page}
    url = reverse("admin:notifications_notification_changelist") + "?state=dead"
    seconds, response = timed(lambda: client.post(url, form))
    requeued = Notification.objects.filter(dead_lettered_at__isnull=True, error_count=0).count()
    logged = LogEntry.objects.count()
    table.add(
        f"requeue a select-all of {rows:,} dead letters through the admin ({vendor})",
        f"{seconds:.1f} s (HTTP {response.status_code}, {requeued:,} requeued, {logged:,} log entries)",
    )
    LogEntry.objects.all().delete()
    User.objects.filter(pk=operator.pk).delete()
    clear()
