"""Scenario 11, flow control (`python bench/run.py --scenario flow`): loopback only, bounded.

(a) 2,000 rows to a dead endpoint (503) plus 2,000 to a healthy one, breaker off vs on:
    when the last healthy row arrives, and the requests (and worker-seconds) spent on the
    dead one. (b) 10,000 rows to a target limited to 200/s, drained by 2 runtick processes:
    the rate the receiver measures after the first burst, within 5 % of the limit.
(c) a tick of 100 due rows to other targets, with 100,000 rows held behind an open
    circuit vs without them: within 1.3x.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from bench.common import clear, due_tick_seconds, job, jobs_together, make_rows, median, remaining

OFF = {"failures": 0}
ON = {"failures": 10, "cooldown": 60, "max_cooldown": 3600}


def scenario_flow(table: Any, sink: Any, quick: bool) -> None:
    dead_rows, rate_rows, held_rows, repeats = (100, 600, 2_000, 3) if quick else (2_000, 10_000, 100_000, 9)
    for label, breaker in (("off", OFF), ("on", ON)):
        dead_endpoint(table, sink, dead_rows, label, breaker)
    rate_limited_drain(table, sink, rate_rows, 200)
    held_due_query(table, held_rows, repeats)


def dead_endpoint(table: Any, sink: Any, rows: int, label: str, breaker: dict[str, int]) -> None:
    from bench.sink import Sink

    dead = Sink()
    try:
        clear()
        make_rows(rows, webhook_url=dead.url("/status/503/dead"), age=120)  # older: claimed first
        make_rows(rows, webhook_url=sink.url("/healthy"), age=60)
        sink.reset()
        dead.reset()
        result = job("runtick", {"budget": 50}, {"NOTIFICATIONS_CIRCUIT_BREAKER": breaker})
        healthy = sink.stats()["paths"].get("healthy", {"count": 0, "last": float("nan")})
        dead_stats = dead.stats()["paths"].get("status", {"count": 0, "first": 0.0, "last": 0.0})
    finally:
        dead.close()
    waited = healthy["last"] - result["start"]
    sent_dead = dead_stats["count"]
    # Worker time on the dead target: its requests times the tick's mean time per request
    # (a loopback 503 is as quick as a 200, so the requests are the cost that matters).
    per_request = result["seconds"] / max(healthy["count"] + sent_dead, 1)
    table.add(
        f"11a. dead endpoint (503): {rows:,} rows + {rows:,} healthy, breaker {label}",
        f"last healthy row after **{waited:.2f} s** ({healthy['count']}/{rows}); {sent_dead:,} requests to the dead "
        f"target, ~{sent_dead * per_request:.2f} worker-s; {result['summary'].split(' seconds=')[0]}",
        "breaker on: dead requests <= failures + in flight",
        healthy["count"] == rows and (label == "off" or sent_dead < rows // 2),
    )
    clear()


def rate_limited_drain(table: Any, sink: Any, rows: int, per_second: int) -> None:

    clear()
    key = sink.url("/").split("/")[2]
    make_rows(rows, webhook_url=sink.url("/limited"))
    sink.reset()
    settings = {"NOTIFICATIONS_RATE_LIMITS": {key: f"{per_second}/s"}, "NOTIFICATIONS_TICK_BUDGET": 120}
    results = jobs_together("runtick", [{"budget": 120}, {"budget": 120}], settings)
    stats = sink.stats()
    limited = stats["paths"].get("limited", {"count": 0, "first": 0.0, "last": 0.0})
    # After the first burst (`per_second` at once) the bucket refills at the limit.
    span = limited["last"] - limited["first"]
    measured = (limited["count"] - per_second) / span if span > 0 else float("inf")
    left = remaining()
    twice = stats["duplicates"]
    table.add(
        f"11b. {rows:,} rows to one target limited to {per_second}/s, 2 runtick processes",
        f"**{measured:.1f}/s** after the burst ({limited['count']:,} delivered in {span:.1f} s, {left} left, "
        f"{twice} twice); " + "; ".join(r["summary"].split(" seconds=")[0] for r in results),
        f"within 5 % of {per_second}/s",
        abs(measured - per_second) <= per_second * 0.05 and left == 0 and limited["count"] == rows and not twice,
    )
    clear()


def fill_held(n: int, key: str) -> None:
    """`n` rows held behind `key`'s open circuit, as the tick leaves them: due at its retry_at."""
    from django.utils import timezone

    from notifications.models import Notification, Target

    now = timezone.now()
    retry_at = now + timedelta(hours=1)
    Target.objects.create(
        key=key, state=Target.State.OPEN, failures=10, opened_at=now, retry_at=retry_at, cooldown=3600
    )
    url = f"https://{key}/hook"
    for start in range(0, n, 10_000):
        Notification.objects.bulk_create(
            Notification(
                channels=["webhook"],
                webhook_url=url,
                payload={"n": i},
                timezone="UTC",
                next_fire_at=retry_at,
                held_for=key,
            )
            for i in range(start, min(n, start + 10_000))
        )
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {Notification._meta.db_table}")  # as autovacuum would


def held_due_query(table: Any, held: int, repeats: int) -> None:
    clear()
    due_tick_seconds(100, 2)  # warm up
    t_without, _ = due_tick_seconds(100, repeats)
    started = time.perf_counter()
    fill_held(held, "dead.example.com")
    filled = time.perf_counter() - started
    due_tick_seconds(100, 2)
    t_with, _ = due_tick_seconds(100, repeats)
    ratio = median(t_with) / median(t_without)
    table.add(
        f"11c. tick of 100 due rows, without vs with {held:,} rows held behind an open circuit",
        f"{median(t_without) * 1000:.0f} ms vs {median(t_with) * 1000:.0f} ms: **{ratio:.2f}x** "
        f"(medians of {repeats}; held rows written in {filled:.0f} s)",
        "<= 1.3x",
        ratio <= 1.3,
    )
    clear()
