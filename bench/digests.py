"""Scenarios 16 and 17 of the benchmark: digests.

`python bench/run.py --scenario digests` (`--digest-rows 10000 --digests 200`): one tick
drains 10,000 rows in 200 digests (50 rows each, every window ended: the tick files each
row into its digest, claims the digests whole and sends one webhook per digest), beside
one tick draining 10,000 plain rows. Reported: the SQL statements per digest and per
plain row, and each tick's time.

`python bench/run.py --scenario digest-race` (`--race-digests 1000`): 1,000 digests of 5
rows, filed and then due at once, drained by 4 `runtick` processes started together; the
sink counts the webhook-ids: every digest must arrive exactly once and no row be left.
"""

from __future__ import annotations

import re
import time
from datetime import timedelta
from typing import Any

DIGEST_WINDOW = 60  # seconds


def make_digest_rows(digests: int, per_digest: int, url: str, *, age: float, window: int = DIGEST_WINDOW) -> None:
    """`digests` groups of `per_digest` rows (recipient `user:<n>`), due `age` seconds ago."""
    from django.utils import timezone

    from notifications.models import Notification

    due = timezone.now() - timedelta(seconds=age)
    rows = [
        Notification(
            channels=["webhook"],
            webhook_url=url,
            recipient=f"user:{g}",
            digest_key="comments",
            digest_window=window,
            payload={"comment": g * per_digest + i, "text": "A new comment on your post."},
            timezone="UTC",
            next_fire_at=due + timedelta(microseconds=i),
        )
        for g in range(digests)
        for i in range(per_digest)
    ]
    Notification.objects.bulk_create(rows, batch_size=2000)


def counted_tick() -> tuple[Any, int, float]:
    """One tick in this process: its report, its statements and its seconds."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from notifications.tick.engine import run_tick

    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        report = run_tick(budget=3600)
        seconds = time.perf_counter() - started
    return report, len(queries), seconds


def scenario_digests(table: Any, sink: Any, rows: int, digests: int, clear: Any, remaining: Any) -> None:
    """16: 10,000 rows in 200 digests against 10,000 plain rows, one tick each."""
    from django.test import override_settings
    from django.utils import timezone

    from notifications.models import Notification

    per_digest = rows // digests
    with override_settings(NOTIFICATIONS_DIGEST_MAX_ITEMS=max(per_digest, 1)):
        clear()
        sink.reset()
        Notification.objects.bulk_create(
            [
                Notification(
                    channels=["webhook"],
                    webhook_url=sink.url("/plain"),
                    payload={"comment": n, "text": "A new comment on your post."},
                    timezone="UTC",
                    next_fire_at=timezone.now() - timedelta(seconds=2 * DIGEST_WINDOW),
                )
                for n in range(rows)
            ],
            batch_size=2000,
        )
        plain_report, plain_statements, plain_seconds = counted_tick()
        plain_stats = sink.stats()
        plain_left = remaining()

        clear()
        sink.reset()
        make_digest_rows(digests, per_digest, sink.url("/digest"), age=2 * DIGEST_WINDOW)
        report, statements, seconds = counted_tick()
        stats = sink.stats()
        left = remaining()
    clear()
    table.add(
        f"16. one tick, {rows:,} plain rows",
        f"{plain_seconds:.2f} s, {plain_statements} statements ({plain_statements / rows:.3f} per row), "
        f"{plain_stats['received']:,} webhooks, {plain_left} left ({plain_report.summary()})",
    )
    table.add(
        f"16. one tick, {rows:,} rows in {digests} digests",
        f"{seconds:.2f} s ({seconds / plain_seconds:.2f}x the plain rows), {statements} statements "
        f"(**{statements / digests:.1f} per digest**, {statements / rows:.3f} per row), "
        f"{stats['received']} webhooks ({stats['unique']} ids), {left} left ({report.summary()})",
        f"{digests} webhooks, 0 left",
        stats["received"] == stats["unique"] == digests and left == 0,
    )


def scenario_digest_race(
    table: Any, sink: Any, digests: int, per_digest: int, processes: int, jobs_together: Any, clear: Any, remaining: Any
) -> None:
    """17: `digests` digests due at once, drained by `processes` runtick processes."""
    from django.utils import timezone

    from notifications.models import Notification
    from notifications.tick.engine import run_tick

    clear()
    sink.reset()
    make_digest_rows(digests, per_digest, sink.url("/race"), age=1, window=3600)
    run_tick(budget=3600)  # every row files into its digest; no window has ended yet
    filed = Notification.objects.filter(digest_id__isnull=False).values("digest_id").distinct().count()
    # The windows end: every digest is due now.
    Notification.objects.update(next_fire_at=timezone.now() - timedelta(seconds=1))
    started = time.perf_counter()
    results = jobs_together(
        "runtick", [{"budget": 3600}] * processes, {"NOTIFICATIONS_TICK_LIMIT": 50, "NOTIFICATIONS_CONCURRENCY": 32}
    )
    seconds = time.perf_counter() - started
    stats = sink.stats()
    left = remaining()
    clear()
    claims = [re.search(r"claimed=\d+", r["summary"]).group(0) for r in results]
    table.add(
        f"17. {processes} runtick processes, {digests:,} digests of {per_digest} rows due at once",
        f"{seconds:.2f} s, {stats['received']:,} webhooks, {stats['unique']:,} ids, {stats['duplicates']} twice, "
        f"{left} rows left; filed into {filed:,} digests; per process {', '.join(claims)}",
        f"each of {digests:,} once",
        stats["received"] == stats["unique"] == filed == digests and left == 0,
    )
