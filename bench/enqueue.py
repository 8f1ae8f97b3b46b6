"""Scenario 16 of the benchmark: enqueueing, beside Django's own writes of the same rows.

`python bench/run.py --scenario enqueue` (`--enqueue-rows 10000`, the default; `--quick`
uses 200). In this process, on the throwaway database, each measured `--repeats` times in
alternating order, the table emptied between runs:

- `schedule()` once per row, beside Django's own `Model.save()` of the same rows (built as
  `Notification(...)` with their due time, no validation): the ratio of the rates;
- `schedule_many()` of all the rows in one call, beside `bulk_create()` of the same rows;
- `send_mass_mail()` of as many messages through `QueuedEmailBackend` inside a transaction
  (queued at its commit), beside `bulk_create()` of the same email rows.

Statements per row count every statement the connection runs (transaction control and
the fast lane's NOTIFY on PostgreSQL included).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

PAYLOAD = {"order": 12345, "status": "shipped", "customer": "Ada Lovelace", "items": [1, 2, 3]}
HOOK_URL = "https://hooks.example.com/in"


def webhook_fields(n: int) -> dict[str, Any]:
    return {"channels": ["webhook"], "webhook_url": HOOK_URL, "payload": {**PAYLOAD, "order": n}, "timezone": "UTC"}


def mail_fields(n: int) -> dict[str, Any]:
    return {
        "channels": ["email"],
        "email_to": [f"reader{n}@example.com"],
        "from_email": "news@example.com",
        "subject": f"Newsletter {n}",
        "body": "Hello, here is the news.",
        "timezone": "UTC",
    }


class Counter:
    """An execute wrapper that counts the statements run."""

    def __init__(self) -> None:
        self.statements = 0

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        self.statements += 1
        return execute(sql, params, many, context)


def measured(work: Callable[[], Any]) -> tuple[float, int]:
    """(seconds, statements) of `work`, the table emptied afterwards."""
    from django.db import connection

    from notifications.models import Notification

    counter = Counter()
    with connection.execute_wrapper(counter):
        started = time.perf_counter()
        work()
        seconds = time.perf_counter() - started
    Notification.objects.all().delete(with_attachments=False)
    return seconds, counter.statements


def compare(rows: int, repeats: int, ours: Callable[[], Any], theirs: Callable[[], Any]) -> dict[str, Any]:
    """Both sides `repeats` times, in alternating order; medians and the ratio of times per run."""
    mine: list[tuple[float, int]] = []
    django: list[tuple[float, int]] = []
    for repeat in range(repeats):
        pair = [(ours, mine), (theirs, django)]
        for work, results in pair if repeat % 2 == 0 else reversed(pair):
            results.append(measured(work))
    ratios = [a[0] / b[0] for a, b in zip(mine, django, strict=True)]
    return {
        "ours": rows / statistics.median(s for s, _ in mine),
        "theirs": rows / statistics.median(s for s, _ in django),
        "ours_per_row": mine[0][1] / rows,
        "theirs_per_row": django[0][1] / rows,
        "ratio": statistics.median(ratios),
        "range": (min(ratios), max(ratios)),
    }


def cell(name: str, other: str, figures: dict[str, Any], repeats: int) -> str:
    low, high = figures["range"]
    return (
        f"{name} {figures['ours']:,.0f} rows/s ({figures['ours_per_row']:.3g} statements/row) vs "
        f"{other} {figures['theirs']:,.0f} rows/s ({figures['theirs_per_row']:.3g}/row): "
        f"**{figures['ratio']:.2f}x** the time (median of {repeats}, range {low:.2f}-{high:.2f})"
    )


def scenario_enqueue(table: Any, rows: int, repeats: int) -> None:
    from django.core.mail import get_connection, send_mass_mail
    from django.db import transaction
    from django.db.models import Model
    from django.utils import timezone

    from notifications.api import schedule, schedule_many
    from notifications.models import Notification

    def save_each() -> None:
        for n in range(rows):
            Model.save(Notification(**webhook_fields(n), next_fire_at=timezone.now()))

    def schedule_each() -> None:
        for n in range(rows):
            schedule(**webhook_fields(n))

    def bulk_create(fields: Callable[[int], dict[str, Any]]) -> Callable[[], Any]:
        def run() -> None:
            now = timezone.now()
            Notification.objects.bulk_create([Notification(**fields(n), next_fire_at=now) for n in range(rows)])

        return run

    def many() -> None:
        schedule_many([webhook_fields(n) for n in range(rows)])

    def mass_mail() -> None:
        messages = [
            (f"Newsletter {n}", "Hello, here is the news.", "news@example.com", [f"reader{n}@example.com"])
            for n in range(rows)
        ]
        with transaction.atomic():  # as a view's request does: the rows are queued at its commit
            send_mass_mail(messages, connection=get_connection("notifications.mail.QueuedEmailBackend"))

    one = compare(rows, repeats, schedule_each, save_each)
    table.add(
        f"16. enqueue {rows:,} rows one by one: schedule() vs Model.save()",
        cell("schedule()", "Model.save()", one, repeats),
        "<= 2x",
        one["ratio"] <= 2,
    )
    bulk = compare(rows, repeats, many, bulk_create(webhook_fields))
    table.add(
        f"16. enqueue {rows:,} rows at once: schedule_many() vs bulk_create()",
        cell("schedule_many()", "bulk_create()", bulk, repeats),
        "<= 2x",
        bulk["ratio"] <= 2,
    )
    mail = compare(rows, repeats, mass_mail, bulk_create(mail_fields))
    table.add(
        f"16. enqueue {rows:,} emails: send_mass_mail() through QueuedEmailBackend vs bulk_create()",
        cell("send_mass_mail()", "bulk_create()", mail, repeats),
    )
