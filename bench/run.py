"""The benchmark: `python bench/run.py` (SQLite), `DATABASE_URL=postgres://... python bench/run.py`
or `DATABASE_URL=mysql://... python bench/run.py` (MariaDB/MySQL).

Creates a throwaway database and a local HTTP sink in its own process, runs the
scenarios of docs/performance.md, prints a Markdown table and writes it
(with the due query's plan) to bench/results/. Comparisons are run side by side, in
alternating order, and reported as ratios: absolute figures drift on a shared machine.
Needs bench/requirements.txt (django-post-office, the peer).

One scenario alone: `--scenario host-writes` (a comma-separated list; `--only` is the same):
the host site's own `schedule()` writes, alone and beside a tick draining a backlog, about
80 s with the defaults (`--host-seconds 8 --repeats 3`). `--scenario fast-lane` (PostgreSQL
only, about 15 s a route): the latency from `schedule()` returning to the sink receiving the
webhook, with `runtick --loop 60` woken by LISTEN/NOTIFY (`--fast-lane-rows 200 --fast-lane-rate 20`),
connected directly, through a PgBouncer in transaction pooling it starts (polling), and through
it with a direct listen line (`--fast-lane-routes direct,pgbouncer,pgbouncer-listen`).
`--scenario burst` (about 2.5 min): 10,000 rows due at once over 100 loopback receivers
(one port each, so 100 targets) answering after 100 ms, runtick with the default settings
beside plain `HTTPAdapter.send` with as many threads, the memory per in-flight send, then
the same burst to one receiver that counts its connections (`--burst-rows`, `--burst-receivers`).
`--scenario actions` (bench/actions.py): requeue, pause, resume, run now and purge of a
select-all of 100,000 rows, timed, with the host's own saves beside the requeue (`--action-rows`).
`--scenario instrumentation` (about a minute at `--rows 5000`): what monitoring costs per
row, runtick without the monitoring totals, as shipped, and with the OpenTelemetry SDK.
`--scenario charts` (about a minute on SQLite, a few on PostgreSQL): the admin's chart
queries over a delivery log of `--attempts` records (default 1,000,000).
`--scenario digests` (bench/digests.py): one tick draining `--digest-rows` rows in `--digests`
digests (default 10,000 in 200) beside one draining as many plain rows: statements per digest
and time. `--scenario digest-race`: `--race-digests` digests (default 1,000, 5 rows each) due at
once, drained by 4 runtick processes: each must arrive exactly once.
`--scenario prune`: one tick with nothing due over `--prune-attempts` delivery records past
retention (default 200,000): how fast the tick's housekeeping catches up.
`--scenario enqueue` (bench/enqueue.py, about a minute on SQLite): `schedule()`, `schedule_many()`
and `send_mass_mail()` through `QueuedEmailBackend`, `--enqueue-rows` each (default 10,000), side
by side with Django's own `Model.save()` and `bulk_create()` of the same rows.
`--scenario cpu` (bench/cpu.py, about a minute): the tick's CPU per delivery and deliveries/s
after the first, `--cpu-rows` (default 3,000) over `--cpu-receivers` (50) receivers answering after
100 ms, beside plain threads with urllib3 on the same sink.
`--scenario tick-chart` (bench/tick_chart.py): the Notifications list's activity chart and
page over a day of `--tick-records` tick records (default 345,600: four hosts, every second).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/run.py`: the repository

from bench.actions import scenario_actions
from bench.common import (
    PAYLOAD,
    ROOT,
    clear,
    due_tick_seconds,
    job,
    jobs_together,
    make_rows,
    median,
    rate,
    remaining,
    run_together,
    throwaway_database,
)
from bench.cpu import scenario_cpu
from bench.digests import scenario_digest_race, scenario_digests
from bench.enqueue import scenario_enqueue
from bench.flow import scenario_flow
from bench.sink import Sink, ceiling
from bench.tick_chart import scenario_tick_chart

# --- the table -------------------------------------------------------------------------------


@dataclass
class Table:
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, scenario: str, measured: str, target: str = "", met: bool | None = None) -> None:
        verdict = "" if met is None else ("yes" if met else "**no**")
        self.rows.append((scenario, measured, target, verdict))
        print(f"  {scenario}: {measured}  [{target}] {verdict}", flush=True)

    def markdown(self) -> str:
        lines = ["| scenario | measured | target | met |", "|---|---|---|---|"]
        lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in self.rows]
        return "\n".join(lines)


# --- scenarios -------------------------------------------------------------------------------


def runtick_drain(sink: Sink, rows: int, settings: dict | None, **fields: Any) -> dict:
    """One runtick draining `rows` webhook rows made with `fields` into the sink: its result,
    with the rows the sink never got (`lost`, counting rows left in the table) and got twice."""
    make_rows(rows, **fields)
    result = job("runtick", {"budget": 3600}, settings)
    stats = sink.stats()
    result["lost"] = rows - stats["unique"] + remaining()
    result["duplicates"] = stats["duplicates"]
    clear()
    return result


def drain_pair(sink: Sink, rows: int, concurrency: int, ours_first: bool) -> tuple[dict, dict]:
    """runtick draining `rows` webhooks, and plain requests posting as many: one of each."""
    url = sink.url("/drain")
    settings = {"NOTIFICATIONS_CONCURRENCY": concurrency}
    results = {}
    for which in ("ours", "limit") if ours_first else ("limit", "ours"):
        sink.reset()
        if which == "ours":
            result = runtick_drain(sink, rows, settings, webhook_url=url)
        else:
            result = job("plain_requests", {"rows": rows, "url": url, "payload": PAYLOAD, "concurrency": concurrency})
            result["lost"] = rows - result["ok"]
        result["rate"] = rate(rows, result["seconds"])
        results[which] = result
    return results["ours"], results["limit"]


def scenario_drain(table: Table, sink: Sink, rows: int, repeats: int, concurrency: int, sweep: list[int]) -> dict:
    ratios, ours_rates, limit_rates, peaks, lost, dup = [], [], [], [], 0, 0
    for i in range(repeats):
        ours, limit = drain_pair(sink, rows, concurrency, ours_first=i % 2 == 0)
        ratios.append(ours["rate"] / limit["rate"])
        ours_rates.append(ours["rate"])
        limit_rates.append(limit["rate"])
        peaks.append(ours["rss_peak_kb"])
        lost += ours["lost"]
        dup += ours["duplicates"]
    spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
    table.add(
        f"1. webhook drain, {rows:,} rows, concurrency {concurrency}",
        f"runtick {median(ours_rates):,.0f} rows/s vs plain requests {median(limit_rates):,.0f} rows/s: "
        f"**{median(ratios):.2f}x** (median of {repeats}, range {spread}); lost {lost}, duplicates {dup}",
        ">= 0.8x",
        median(ratios) >= 0.8 and lost == 0 and dup == 0,
    )
    for c in sweep:
        ours, limit = drain_pair(sink, max(rows // 2, 1), c, ours_first=True)
        table.add(
            f"1b. concurrency {c} ({max(rows // 2, 1):,} rows)",
            f"runtick {ours['rate']:,.0f} rows/s, plain requests {limit['rate']:,.0f} rows/s "
            f"({ours['rate'] / limit['rate']:.2f}x)",
        )
    return {"peak_kb": max(peaks), "rss_before_kb": ours["rss_before_kb"]}


def scenario_statements(table: Table, sink: Sink) -> None:
    from django.db import connection
    from django.test import override_settings
    from django.test.utils import CaptureQueriesContext

    from notifications.tick.engine import run_tick

    kinds = {
        "one-shot success": ({"email": True}, "succeeded"),
        "recurring advance": ({"email": True, "recurring": True}, "succeeded"),
        "retry": ({"webhook_url": sink.url("/status/503")}, "retried"),
        "partial": ({"email": True, "webhook_url": sink.url("/status/503")}, "partial"),
    }
    per_row = []
    for label, (fields, kind) in kinds.items():
        clear()
        make_rows(100, **fields)
        # The breaker off: a failing receiver would otherwise hold most of the 100 rows.
        with (
            override_settings(NOTIFICATIONS_CIRCUIT_BREAKER={"failures": 0}),
            CaptureQueriesContext(connection) as queries,
        ):
            report = run_tick(limit=100)
        assert report.counts()[kind] == 100, report.summary()
        per_row.append(len(queries) / 100)
        measured = f"{len(queries)} statements / 100 rows = {len(queries) / 100:.2f}"
        table.add(f"2. SQL per row, {label} (limit 100)", measured)
    average = sum(per_row) / len(per_row)
    table.add("2. SQL per row, average", f"**{average:.2f}** statements per row", "<= 0.5", average <= 0.5)
    clear()


def fill_not_due(n: int, start: int = 0) -> None:
    """`n` rows that are not due (scheduled later, retrying later, parked, dead), in one SQL statement."""
    from django.db import connection

    from notifications.models import Notification

    table = connection.ops.quote_name(Notification._meta.db_table)
    columns = (
        "channels, email_to, subject, body, webhook_url, webhook_secret, payload, recurrence_rule, timezone, "
        "next_fire_at, error_count, last_error, dead_lettered_at, firing_id, pending_channels, created_at, updated_at, "
        "recipient, escalate_to"
    )
    if connection.vendor == "postgresql":
        sql = f"""
            INSERT INTO {table} ({columns})
            SELECT '["email"]'::jsonb, '"ada@example.com"'::jsonb, 'Later', 'Not yet', '', '', '{{}}'::jsonb, '', 'UTC',
                   CASE WHEN i %% 4 < 2 THEN now() + interval '1 hour' + i * interval '1 second' END,
                   CASE i %% 4 WHEN 1 THEN 1 WHEN 3 THEN 3 ELSE 0 END,
                   CASE WHEN i %% 4 IN (1, 3) THEN 'webhook: HTTP 503' END,
                   CASE WHEN i %% 4 = 3 THEN now() END,
                   gen_random_uuid(), NULL, now(), now(), '', '[]'::jsonb
            FROM generate_series(%s, %s) AS i
        """
        params = [start + 1, start + n]
    elif connection.vendor == "mysql":
        sql = f"""
            INSERT INTO {table} ({columns})
            WITH RECURSIVE seq(i) AS (SELECT %s UNION ALL SELECT i + 1 FROM seq WHERE i < %s)
            SELECT '["email"]', '"ada@example.com"', 'Later', 'Not yet', '', '', '{{}}', '', 'UTC',
                   CASE WHEN i %% 4 < 2 THEN UTC_TIMESTAMP(6) + INTERVAL (3600 + i) SECOND END,
                   CASE i %% 4 WHEN 1 THEN 1 WHEN 3 THEN 3 ELSE 0 END,
                   CASE WHEN i %% 4 IN (1, 3) THEN 'webhook: HTTP 503' END,
                   CASE WHEN i %% 4 = 3 THEN UTC_TIMESTAMP(6) END,
                   REPLACE(UUID(), '-', ''), NULL, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), '', '[]'
            FROM seq
        """
        params = [start + 1, start + n]
    else:
        sql = f"""
            INSERT INTO {table} ({columns})
            WITH RECURSIVE seq(i) AS (SELECT %s UNION ALL SELECT i + 1 FROM seq WHERE i < %s)
            SELECT '["email"]', '"ada@example.com"', 'Later', 'Not yet', '', '', '{{}}', '', 'UTC',
                   CASE WHEN i % 4 < 2
                        THEN strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '+' || (3600 + i) || ' seconds') END,
                   CASE i % 4 WHEN 1 THEN 1 WHEN 3 THEN 3 ELSE 0 END,
                   CASE WHEN i % 4 IN (1, 3) THEN 'webhook: HTTP 503' END,
                   CASE WHEN i % 4 = 3 THEN strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now') END,
                   lower(hex(randomblob(16))), NULL, strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now'),
                   strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now'), '', '[]'
            FROM seq
        """
        params = [start + 1, start + n]
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":  # a recursive CTE of `n` rows: past the default depth of 1,000
            depth = "max_recursive_iterations" if connection.mysql_is_mariadb else "cte_max_recursion_depth"
            cursor.execute(f"SET SESSION {depth} = %s", [n + 1])
        cursor.execute(sql, params)
        if connection.vendor == "postgresql":
            cursor.execute(f"ANALYZE {table}")  # as autovacuum would after a load this size
        elif connection.vendor == "mysql":
            cursor.execute(f"ANALYZE TABLE {table}")


def due_query_plan() -> str:
    from django.db import connection
    from django.utils import timezone

    from notifications.store.claims import due_query, selection

    if connection.vendor == "mysql":  # the ids are read by the selection itself there (no LIMIT inside IN)
        sql, params = selection(timezone.now(), 100)
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN {sql}", params)
            return "\n".join(" ".join(str(value) for value in row) for row in cursor.fetchall())
    return due_query(timezone.now(), 100).explain()


def scenario_backlog(table: Table, small: int, big: int, due: int, repeats: int) -> str:
    from django.db import connection

    clear()
    fill_not_due(small)
    due_tick_seconds(due, 2)  # warm up
    t_small, db_small = due_tick_seconds(due, repeats)
    fill_not_due(big - small, start=small)
    due_tick_seconds(due, 2)
    t_big, db_big = due_tick_seconds(due, repeats)
    ratio = median(t_big) / median(t_small)
    table.add(
        f"3. backlog: tick of {due} due rows, {small:,} vs {big:,} not-due rows ({connection.vendor})",
        f"{median(t_small) * 1000:.0f} ms vs {median(t_big) * 1000:.0f} ms: **{ratio:.2f}x** (medians of {repeats}); "
        f"of which SQL {median(db_small) * 1000:.1f} ms vs {median(db_big) * 1000:.1f} ms",
        "<= 1.3x",
        ratio <= 1.3,
    )
    plan = due_query_plan()
    clear()
    return plan


def scenario_peer(table: Table, emails: int, repeats: int, lockfile: str) -> None:
    from post_office.models import STATUS, Email

    ratios, ours_rates, peer_rates = [], [], []
    for i in range(repeats):
        results = {}
        for which in ("ours", "peer") if i % 2 == 0 else ("peer", "ours"):
            if which == "peer":
                Email.objects.bulk_create(
                    Email(
                        from_email="bench@example.com",
                        to=["ada@example.com"],
                        subject="Your order shipped",
                        message="Order 12345 is on its way.",
                        status=STATUS.queued,
                    )
                    for _ in range(emails)
                )
                result = job("post_office", {"lockfile": lockfile})
                sent = Email.objects.filter(status=STATUS.sent).count()
                assert sent == emails, f"post_office sent {sent} of {emails}"
            else:
                make_rows(emails, email=True)
                result = job("runtick", {"budget": 3600})
                assert remaining() == 0, result
            results[which] = rate(emails, result["seconds"])
            clear()
        ratios.append(results["ours"] / results["peer"])
        ours_rates.append(results["ours"])
        peer_rates.append(results["peer"])
    table.add(
        f"4. {emails:,} emails, dummy backend: runtick vs django-post-office send_queued_mail",
        f"{median(ours_rates):,.0f} vs {median(peer_rates):,.0f} emails/s: **{median(ratios):.2f}x** "
        f"(median of {repeats}, range {min(ratios):.2f}-{max(ratios):.2f})",
        ">= 2x",
        median(ratios) >= 2,
    )


def scenario_scale_out(table: Table, sink: Sink, rows: int, vendor: str) -> None:
    for processes in (1, 2, 4):
        sink.reset()
        make_rows(rows, webhook_url=sink.url("/scale"))
        results = jobs_together("runtick", [{"budget": 3600}] * processes)
        seconds = max(r["end"] for r in results) - min(r["start"] for r in results)
        stats = sink.stats()
        claimed = sum(int(r["summary"].split("claimed=")[1].split()[0]) for r in results)
        lost = rows - stats["unique"] + remaining()
        table.add(
            f"5. scale-out ({vendor}): {processes} runtick process{'es' if processes > 1 else ''}, {rows:,} rows",
            f"{rate(rows, seconds):,.0f} rows/s; claimed {claimed}, duplicates {stats['duplicates']}, lost {lost}",
            "0 duplicates, 0 lost",
            stats["duplicates"] == 0 and lost == 0 and claimed == rows,
        )
        clear()


def scenario_memory(table: Table, sink: Sink, rows: int, big_peak_kb: int | None) -> None:
    small = max(rows // 10, 1)
    peaks = {}
    for n in (small, rows) if big_peak_kb is None else (small,):
        make_rows(n, webhook_url=sink.url("/memory"))
        result = job("runtick", {"budget": 3600})
        peaks[n] = result["rss_peak_kb"]
        before = result["rss_before_kb"]
        clear()
    if big_peak_kb is not None:
        peaks[rows] = big_peak_kb
    growth = (peaks[rows] - peaks[small]) / 1024
    table.add(
        f"6. peak RSS of runtick draining {small:,} vs {rows:,} rows",
        f"{peaks[small] / 1024:.0f} MB vs **{peaks[rows] / 1024:.0f} MB** (growth {growth:+.1f} MB; "
        f"{before / 1024:.0f} MB before the tick)",
        "< 150 MB, flat",
        peaks[rows] < 150 * 1024 and growth < 10,
    )


def scenario_stuck(table: Table, sink: Sink, stuck_rows: int, healthy_rows: int, concurrency: int) -> None:
    timeout = 2.0
    stuck = Sink()
    try:
        # The stuck rows are older, so they are claimed first: the hard case for the healthy ones.
        make_rows(stuck_rows, webhook_url=stuck.url("/hang"), age=120)
        make_rows(healthy_rows, webhook_url=sink.url("/healthy"), age=60)
        sink.reset()
        # The breaker off: this measures the dispatcher's fairness with every stuck row sent
        # (with it on, the rows after the first `failures` timeouts are held; see flow).
        off = {"failures": 0}
        result = job(
            "runtick", {"budget": 50}, {"NOTIFICATIONS_CHANNEL_TIMEOUT": timeout, "NOTIFICATIONS_CIRCUIT_BREAKER": off}
        )
        stats = sink.stats()
    finally:
        stuck.close()
    # The stuck rows share one target: at most the per-target cap of them are in flight at once.
    in_flight = min(concurrency, target_cap() or concurrency)
    expected = math.ceil(stuck_rows / in_flight) * timeout
    healthy = stats["paths"].get("healthy", {"count": 0, "last": float("nan")})
    waited = healthy["last"] - result["start"]
    table.add(
        f"7. stuck endpoint, breaker off: {stuck_rows} rows never answered (timeout {timeout:g} s, "
        f"concurrency {concurrency}, {in_flight} in flight to one target) + {healthy_rows} healthy rows",
        f"tick {result['seconds']:.1f} s vs ceil({stuck_rows}/{in_flight}) x {timeout:g} s = {expected:g} s; "
        f"last healthy row delivered after **{waited:.2f} s** ({healthy['count']}/{healthy_rows}); "
        f"{result['summary'].split(' seconds=')[0]}",
        f"near {expected:g} s; healthy within {timeout:g} s",
        result["seconds"] <= expected * 1.25 + 2 and waited <= timeout and healthy["count"] == healthy_rows,
    )
    clear()


# --- 8. the host site's writes while a tick drains ------------------------------------------------

# The tick as cron runs it: the product's defaults (budget 50 s, deadline 10 s), not the
# bench's long budget. The claim size depends on both: at most concurrency x (budget
# left / deadline) rows held, so `--tick-budget 10` shows the small claims of a short budget.
CRON_TICK = {"NOTIFICATIONS_TICK_BUDGET": 50, "NOTIFICATIONS_CHANNEL_TIMEOUT": 10}
HOST_VARIANTS = ("alone", "same", "apart")


def percentile(ordered: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not ordered:
        return float("nan")
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def latency_figures(latencies: list[float], seconds: float) -> dict:
    ordered = sorted(latencies)
    return {
        "n": len(ordered),
        "seconds": seconds,
        "ops": rate(len(ordered), seconds),
        **{f"p{p}": percentile(ordered, p) * 1000 for p in (50, 95, 99)},
        "max": (ordered[-1] if ordered else float("nan")) * 1000,
    }


def tick_only_database(config: dict) -> dict:
    """A copy of the (empty, migrated) bench database in a file of its own, for the tick alone."""
    import sqlite3

    path = Path(config["NAME"]).with_name("tick-only.sqlite3")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with contextlib.closing(sqlite3.connect(config["NAME"])) as src, contextlib.closing(sqlite3.connect(path)) as dst:
        src.backup(dst)
    return {**config, "NAME": str(path)}


def host_writes_run(sink: Sink, variant: str, rows: int, seconds: float, tick_budget: float) -> dict:
    """The host site's closed loop of schedule() calls: alone, or beside a tick draining `rows`
    on the same database ("same") or on a database file of its own ("apart")."""
    host = ("host_writes", {"seconds": seconds}, None)
    if variant == "alone":
        [calls] = run_together([host])
        latencies = [lat for _, lat in calls["calls"]]
        seconds = calls["end"] - calls["start"]
        result = {"host": latency_figures(latencies, seconds), "latencies": latencies, "errors": calls["errors"]}
        clear()
        return result
    settings = {**CRON_TICK, "NOTIFICATIONS_TICK_BUDGET": tick_budget}
    if variant == "apart":
        settings["DATABASES"] = {"default": tick_only_database(json.loads(os.environ["BENCH_DATABASE"]))}
    sink.reset()
    tick_args = {"rows": rows, "url": sink.url("/host-writes"), "stop_after": seconds}
    calls, tick = run_together([host, ("tick_writes", tick_args, settings)])
    stats = sink.stats()
    # Only the calls made while the tick ran count: the tick may drain early or finish late.
    low, high = max(calls["start"], tick["start"]), min(calls["end"], tick["end"])
    latencies = [lat for at, lat in calls["calls"] if low <= at < high]
    clear()
    if variant == "apart":
        Path(settings["DATABASES"]["default"]["NAME"]).unlink(missing_ok=True)
    return {
        "host": latency_figures(latencies, max(high - low, 0.0)),
        "latencies": latencies,
        "errors": calls["errors"],
        "covered": max(high - low, 0.0) / (calls["end"] - calls["start"]),
        "tick": tick,
        "duplicates": stats["duplicates"],
        "delivered": stats["unique"],
    }


def host_cell(runs: list[dict]) -> str:
    """Pooled percentiles over the runs, with each run's p99."""
    n = sum(r["host"]["n"] for r in runs)
    seconds = sum(r["host"]["seconds"] for r in runs)
    pooled = latency_figures([lat for r in runs for lat in r["latencies"]], seconds)
    per_run = "/".join(f"{r['host']['p99']:.1f}" for r in runs)
    errors = sum(r["errors"] for r in runs)
    return (
        f"p50 {pooled['p50']:.2f} ms, p95 {pooled['p95']:.1f} ms, **p99 {pooled['p99']:.1f} ms**, "
        f"max {pooled['max']:.0f} ms; {rate(n, seconds):,.0f} ops/s ({n:,} calls; p99 per run {per_run} ms"
        f"{f'; {errors} locked errors' if errors else ''})"
    )


def tick_cell(runs: list[dict]) -> str:
    """The tick beside the host: rows/s, claims, write transactions per second and the lock time."""
    seconds = sum(r["tick"]["end"] - r["tick"]["start"] for r in runs)
    succeeded = sum(r["tick"]["succeeded"] for r in runs)
    claimed = sum(r["tick"]["claimed"] for r in runs)
    batches = sum(r["tick"]["batches"] for r in runs)
    kinds: dict[str, dict[str, float]] = {}
    for r in runs:
        for kind, entry in r["tick"]["writes"].items():
            total = kinds.setdefault(kind, {"count": 0, "held": 0.0, "max": 0.0, "wait": 0.0})
            total["count"] += entry["count"]
            total["held"] += entry["held"]
            total["wait"] += entry["wait"]
            total["max"] = max(total["max"], entry["max"])
    transactions = sum(k["count"] for k in kinds.values())
    held = sum(k["held"] for k in kinds.values())
    parts = []
    ranked = sorted(kinds.items(), key=lambda item: -item[1]["held"])
    for kind, k in ranked[:3]:
        waited = f", {k['wait'] / k['count'] * 1000:.1f} ms waiting for BEGIN" if k["wait"] >= 5e-5 * k["count"] else ""
        parts.append(
            f"{kind} {k['count'] / seconds:,.1f}/s held {k['held'] / k['count'] * 1000:.2f} ms each "
            f"(max {k['max'] * 1000:.0f} ms{waited})"
        )
    if rest := ranked[3:]:
        parts.append(f"{len(rest)} other kinds {sum(k['count'] for _, k in rest) / seconds:,.1f}/s")
    per_claim = f"{claimed / batches:.1f}" if batches else "?"
    return (
        f"tick {rate(succeeded, seconds):,.0f} rows/s, {batches / seconds:,.1f} claims/s of {per_claim} rows; "
        f"**{transactions / seconds:,.0f} write transactions/s**, lock held {held / seconds:.0%} of the tick: "
        + "; ".join(parts)
        + f"; duplicates {sum(r['duplicates'] for r in runs)}"
    )


def scenario_host_writes(
    table: Table, sink: Sink, rows: int, seconds: float, repeats: int, vendor: str, tick_budget: float
) -> None:
    variants = HOST_VARIANTS if vendor == "sqlite" else HOST_VARIANTS[:2]  # "apart" is a second SQLite file
    clear()
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for i in range(repeats):
        order = variants[i % len(variants) :] + variants[: i % len(variants)]  # rotated: side by side
        for variant in order:
            run = host_writes_run(sink, variant, rows, seconds, tick_budget)
            runs[variant].append(run)
    label = f"8. host writes ({vendor}): schedule() in a closed loop, {seconds:g} s"
    table.add(f"{label}, alone", host_cell(runs["alone"]))
    budget = "" if tick_budget == CRON_TICK["NOTIFICATIONS_TICK_BUDGET"] else f", tick budget {tick_budget:g} s"
    table.add(f"{label}, while runtick drains {rows:,} rows (same database{budget})", host_cell(runs["same"]))
    table.add("8. the tick beside the host writes (same database)", tick_cell(runs["same"]))
    if "apart" in runs:
        table.add(f"{label}, while runtick drains on a separate database file{budget}", host_cell(runs["apart"]))
        table.add("8. the tick beside the host writes (separate file)", tick_cell(runs["apart"]))
    ratios = [s["host"]["p99"] / a["host"]["p99"] for s, a in zip(runs["same"], runs["alone"], strict=True)]
    ops = [s["host"]["ops"] / a["host"]["ops"] for s, a in zip(runs["same"], runs["alone"], strict=True)]
    covered = min(r["covered"] for r in runs["same"])
    table.add(
        "8. host-write p99 with a draining tick vs alone",
        f"**{median(ratios):.2f}x** (median of {repeats}, range {min(ratios):.2f}-{max(ratios):.2f}); "
        f"ops/s {median(ops):.2f}x; the tick ran through {covered:.0%} of the host's loop or more",
        "<= 2x",
        median(ratios) <= 2,
    )
    if "apart" in runs:  # the part of the slowdown the shared write lock causes; the rest is CPU
        control = [s["host"]["p99"] / c["host"]["p99"] for s, c in zip(runs["same"], runs["apart"], strict=True)]
        table.add(
            "8. host-write p99, tick on the same database vs on a separate file",
            f"{median(control):.2f}x (median of {repeats}, range {min(control):.2f}-{max(control):.2f})",
        )


# --- 9. the fast lane: `runtick --loop` woken by LISTEN/NOTIFY -----------------------------------

# The loop's interval: far beyond any latency measured, so a row delivered in time was
# woken for (or polled for, at NOTIFICATIONS_LOOP_POLL_INTERVAL), not found at the interval.
FAST_LANE_INTERVAL = 60
# How the loop reaches PostgreSQL: straight; through a PgBouncer in transaction pooling
# (the fast lane is silent, the loop polls); through it with a direct listen line.
FAST_LANE_ROUTES = {
    "direct": "direct",
    "pgbouncer": "through PgBouncer (transaction pooling), polling",
    "pgbouncer-listen": "through PgBouncer (transaction pooling), direct listen line",
}
# What each route's p99 should stay under (ms): a wake is a tick; polling waits up to the
# poll interval (2 s by default) on top.
FAST_LANE_TARGETS = {"direct": 1000, "pgbouncer": 5000, "pgbouncer-listen": 1000}


def start_loop(log: Path, settings: dict | None = None) -> subprocess.Popen:
    """`manage.py runtick --loop 60` on the bench database (`settings` overriding some), its output in `log`."""
    from django.db import connections

    connections.close_all()
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "manage.py", "runtick", "--loop", str(FAST_LANE_INTERVAL), "--settings=bench.settings"],
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", BENCH_SETTINGS=json.dumps(settings or {})),
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )


def summaries(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if "claimed=" in line]


def wait_listening(loop: subprocess.Popen, log: Path, listener: bool, timeout: float = 60) -> None:
    """Until the loop has ticked once (it probed its fast lane before) and, when `listener`,
    its LISTEN connection is up."""
    from django.db import connection

    from notifications.services import wake

    deadline = time.monotonic() + timeout
    while True:
        listening = 1
        if listener:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND application_name = %s",
                    [wake.LISTENER_NAME],
                )
                listening = cursor.fetchone()[0]
        if listening and summaries(log):
            return
        if loop.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"runtick --loop did not start listening:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)


@contextlib.contextmanager
def queries_through(host: str, port: int):
    """This process's own queries (the scheduling site's) through `host:port` meanwhile."""
    from django.db import connection

    saved = {key: connection.settings_dict[key] for key in ("HOST", "PORT")}
    connection.close()
    connection.settings_dict.update(HOST=host, PORT=port)
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.update(saved)


def scenario_fast_lane(table: Table, sink: Sink, rows: int, per_second: float, vendor: str, routes: list[str]) -> None:
    """From `schedule()` returning to the sink receiving the webhook, rows due now scheduled one
    at a time at a steady pace while `runtick --loop 60` waits (PostgreSQL only), on each route."""
    label = f"9. fast lane ({vendor}): schedule() returned -> webhook received"
    if vendor != "postgresql":
        print("  fast lane: skipped, LISTEN/NOTIFY needs PostgreSQL (DATABASE_URL=postgres://...)", flush=True)
        table.add(label, "skipped: PostgreSQL only (SQLite's --loop polls at its interval)")
        return
    from django.db import connection

    from tests.support.pgbouncer import PgBouncer, binary

    direct = dict(connection.settings_dict)
    bouncer = None
    try:
        for route in routes:
            where = f"9. fast lane ({vendor}, {FAST_LANE_ROUTES[route]}): schedule() returned -> webhook received"
            if route == "direct":
                fast_lane_run(table, sink, rows, per_second, where, route, None)
                continue
            if binary() is None:
                table.add(where, "skipped: pgbouncer is not installed (Debian: apt-get install pgbouncer)")
                continue
            if bouncer is None:
                bouncer = PgBouncer.start(
                    direct.get("HOST") or "127.0.0.1", int(direct.get("PORT") or 5432), direct["USER"]
                )
            databases = {"default": bouncer.database(direct)}
            settings: dict[str, Any] = {"DATABASES": databases}
            if route == "pgbouncer-listen":
                databases["listen"] = direct
                settings["NOTIFICATIONS_LISTEN_DATABASE"] = "listen"
            with queries_through(bouncer.host, bouncer.port):  # the site schedules through it too
                fast_lane_run(table, sink, rows, per_second, where, route, settings)
    finally:
        if bouncer is not None:
            connection.close()
            bouncer.close()


def fast_lane_run(
    table: Table, sink: Sink, rows: int, per_second: float, label: str, route: str, settings: dict | None
) -> None:
    from notifications.api import schedule

    clear()
    sink.reset()
    log = Path(tempfile.mkdtemp(prefix="bench-fast-lane-")) / "loop.log"
    loop = start_loop(log, settings)
    try:
        wait_listening(loop, log, listener=route != "pgbouncer")
        before = len(summaries(log))
        returned: dict[str, float] = {}
        began = time.monotonic()
        for i in range(rows):
            time.sleep(max(0.0, began + i / per_second - time.monotonic()))
            schedule(channels=["webhook"], webhook_url=sink.url(f"/fast-lane-{i}"), payload=PAYLOAD)
            returned[f"fast-lane-{i}"] = time.time()
        deadline = time.monotonic() + FAST_LANE_INTERVAL / 2  # well before the loop would look anyway
        while len(arrived := {k: v for k, v in sink.stats()["paths"].items() if k in returned}) < rows:
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        ticks = len(summaries(log)) - before
    finally:
        loop.send_signal(signal.SIGTERM)
        loop.wait(30)
    silent = "the fast lane is off" in log.read_text()
    latencies = sorted(arrived[k]["first"] - at for k, at in returned.items() if k in arrived)
    figures = latency_figures(latencies, rows / per_second)
    stats = sink.stats()
    target = FAST_LANE_TARGETS[route]
    table.add(
        f"{label}, {rows} rows at {per_second:g}/s, runtick --loop {FAST_LANE_INTERVAL}",
        f"**p50 {figures['p50']:.0f} ms, p99 {figures['p99']:.0f} ms**, max {figures['max']:.0f} ms; "
        f"delivered {len(latencies)}/{rows} in {ticks} ticks, duplicates {stats['duplicates']}"
        + ("; the loop said its fast lane is off" if silent else ""),
        f"p99 < {target / 1000:g} s",
        len(latencies) == rows and figures["p99"] < target,
    )
    clear()


# --- 10. a burst at real-world latency: many slow receivers, and one -------------------------------

# Seconds each receiver of the burst scenario takes to answer: a real endpoint, not loopback.
BURST_DELAY = 0.1


def target_cap() -> int | None:
    """NOTIFICATIONS_TARGET_CONCURRENCY as the tick reads it (None before there was one)."""
    from notifications.conf import TickSettings

    return getattr(TickSettings.read(), "target_concurrency", None)


def burst_pair(
    sink: Sink, rows: int, concurrency: int, ours_first: bool, settings: dict | None = None
) -> tuple[dict, dict]:
    """runtick (default settings, or `settings`) and plain `HTTPAdapter.send` with as many threads,
    the same burst."""
    urls = sink.urls("/burst")
    results = {}
    for which in ("ours", "limit") if ours_first else ("limit", "ours"):
        sink.reset()
        if which == "ours":
            result = runtick_drain(sink, rows, settings, webhook_urls=urls)
        else:
            args = {"rows": rows, "urls": urls, "payload": PAYLOAD, "concurrency": concurrency}
            result = job("plain_adapter", args)
            result["lost"] = rows - result["ok"]
        result["rate"] = rate(rows, result["seconds"])
        result["in_flight_peak"] = sink.stats()["in_flight_peak"]
        results[which] = result
    return results["ours"], results["limit"]


def scenario_burst(
    table: Table, rows: int, receivers: int, repeats: int, concurrency: int, memory_rows: int, sweep: list[int]
) -> None:
    """A 09:00 burst: `rows` due at once, over `receivers` loopback receivers that answer after
    BURST_DELAY, runtick beside plain requests; then the same burst to one receiver, whose
    connections and requests in flight are counted; then the memory per in-flight send."""
    cap = target_cap()
    ideal = concurrency / BURST_DELAY
    many = Sink(ports=receivers, delay=BURST_DELAY)
    try:
        ratios, ours_rates, limit_rates, peaks, flights, lost, dup = [], [], [], [], [], 0, 0
        for i in range(repeats):
            ours, limit = burst_pair(many, rows, concurrency, ours_first=i % 2 == 0)
            flights.append(ours["in_flight_peak"])
            ratios.append(ours["rate"] / limit["rate"])
            ours_rates.append(ours["rate"])
            limit_rates.append(limit["rate"])
            peaks.append(ours["rss_peak_kb"])
            lost += ours["lost"]
            dup += ours["duplicates"]
        table.add(
            f"10. burst: {rows:,} rows over {receivers} receivers answering after {BURST_DELAY * 1000:.0f} ms, "
            f"default settings (concurrency {concurrency}, per target {cap or 'no cap'})",
            f"runtick **{median(ours_rates):,.0f} rows/s** ({rows / median(ours_rates):.1f} s) vs plain "
            f"HTTPAdapter.send, {concurrency} threads, {median(limit_rates):,.0f} rows/s: **{median(ratios):.2f}x** "
            f"(median of {repeats}, range {min(ratios):.2f}-{max(ratios):.2f}; ideal {ideal:,.0f} rows/s); "
            f"up to {max(flights)} requests in flight; lost {lost}, duplicates {dup}; "
            f"peak RSS {max(peaks) / 1024:.0f} MB",
            ">= 800 rows/s, >= 0.8x, < 150 MB",
            median(ours_rates) >= 800 and median(ratios) >= 0.8 and lost == dup == 0 and max(peaks) < 150 * 1024,
        )
        for c in sweep:
            ours, limit = burst_pair(many, max(rows // 2, 1), c, True, {"NOTIFICATIONS_CONCURRENCY": c})
            table.add(
                f"10b. burst, concurrency {c} ({max(rows // 2, 1):,} rows)",
                f"runtick {ours['rate']:,.0f} rows/s, plain HTTPAdapter.send {limit['rate']:,.0f} rows/s "
                f"({ours['rate'] / limit['rate']:.2f}x; ideal {c / BURST_DELAY:,.0f}); peak RSS "
                f"{ours['rss_peak_kb'] / 1024:.0f} MB",
            )
        low = max(concurrency // 4, 1)
        if memory_rows and low < concurrency:
            # The same smaller burst at two concurrencies: what each further send in flight costs.
            peak = {}
            for c in (low, concurrency):
                make_rows(memory_rows, webhook_urls=many.urls("/burst"))
                peak[c] = job("runtick", {"budget": 3600}, {"NOTIFICATIONS_CONCURRENCY": c})["rss_peak_kb"]
                clear()
            per_send = (peak[concurrency] - peak[low]) / (concurrency - low)
            table.add(
                f"10. memory per in-flight send: peak RSS of runtick, {memory_rows:,} burst rows, "
                f"concurrency {low} vs {concurrency}",
                f"{peak[low] / 1024:.0f} MB vs {peak[concurrency] / 1024:.0f} MB: "
                f"**{per_send:,.0f} KB per in-flight send**",
            )
    finally:
        many.close()
    one = Sink(ports=1, delay=BURST_DELAY)
    try:
        make_rows(rows, webhook_urls=one.urls("/burst"))
        one.reset()
        result = job("runtick", {"budget": 3600})
        stats = one.stats()
        lost = rows - stats["unique"] + remaining()
        clear()
    finally:
        one.close()
    within = cap is None or stats["connections_peak"] <= cap
    table.add(
        f"10. burst: the same {rows:,} rows to one receiver (after {BURST_DELAY * 1000:.0f} ms), default settings",
        f"runtick {rate(rows, result['seconds']):,.0f} rows/s (ideal {(cap or concurrency) / BURST_DELAY:,.0f}); "
        f"**peak {stats['connections_peak']} connections, {stats['in_flight_peak']} requests in flight** "
        f"(cap {cap or 'none'}); lost {lost}, duplicates {stats['duplicates']}",
        "<= the per-target cap, 0 lost, 0 duplicates",
        within and lost == 0 and stats["duplicates"] == 0,
    )


def scenario_instrumentation(table: Table, sink: Sink, rows: int, repeats: int) -> None:
    """13. What monitoring costs per row: runtick draining `rows` webhooks without the
    monitoring totals (`bare`), as shipped (`product`: the totals, OpenTelemetry's API with
    no SDK) and with the OpenTelemetry SDK recording every span and metric (`otel`), in
    rotating order; CPU seconds per row, the steadier figure on a shared machine."""
    variants = ("bare", "product", "otel")
    cpu: dict[str, list[float]] = {v: [] for v in variants}
    wall: dict[str, list[float]] = {v: [] for v in variants}
    url = sink.url("/instrumented")
    for i in range(repeats):
        for variant in variants[i % 3 :] + variants[: i % 3]:
            sink.reset()
            make_rows(rows, webhook_url=url)
            result = job("runtick", {"budget": 3600, "instrumentation": variant})
            lost = rows - sink.stats()["unique"] + remaining()
            clear()
            if lost:
                raise RuntimeError(f"instrumentation {variant}: {lost} rows lost")
            cpu[variant].append(result["cpu_seconds"] / rows * 1e6)
            wall[variant].append(result["seconds"] / rows * 1e6)
    base_cpu, base_wall = median(cpu["bare"]), median(wall["bare"])
    for variant in ("product", "otel"):
        extra = median(cpu[variant]) / base_cpu - 1
        table.add(
            f"13. instrumentation: {variant} vs bare, {rows:,} webhook rows",
            f"CPU {median(cpu[variant]):.0f} vs {base_cpu:.0f} µs/row (**{extra:+.1%}**), "
            f"wall {median(wall[variant]):.0f} vs {base_wall:.0f} µs/row "
            f"({median(wall[variant]) / base_wall - 1:+.1%}); median of {repeats}",
            "<= 5%" if variant == "product" else "",
            extra <= 0.05 if variant == "product" else None,
        )


def fill_attempts(n: int, targets: int, failed_share: float, now: datetime) -> None:
    """`n` delivery records over the last 24 hours, spread over `targets` webhook targets,
    `failed_share` of them failures; and a day of tick records (one a minute)."""
    import random
    import uuid

    from django.db import connection, transaction

    from notifications.models import DeliveryAttempt, TickRun
    from notifications.store.statements import insert_statements

    rng = random.Random(12)
    keys = [f"hooks{i}.example.com" for i in range(targets)]
    chunk = 20_000
    for start in range(0, n, chunk):
        objs = [
            DeliveryAttempt(
                notification_id=start + i + 1,
                firing_id=uuid.uuid4(),
                channel="webhook",
                target=rng.choice(keys),
                outcome="failed" if rng.random() < failed_share else "ok",
                error="",
                error_class="",
                duration_ms=rng.randint(5, 500),
                attempted_at=now - timedelta(seconds=rng.uniform(0, 86_400)),
            )
            for i in range(min(chunk, n - start))
        ]
        with transaction.atomic(), connection.cursor() as cursor:
            for sql, params in insert_statements(DeliveryAttempt, objs):
                cursor.execute(sql, params)
    TickRun.objects.bulk_create(
        TickRun(
            started_at=now - timedelta(minutes=m, seconds=2),
            finished_at=now - timedelta(minutes=m),
            host="bench",
            pid=1,
            claimed=100,
            succeeded=90,
            retried=9,
            dead_lettered=1,
        )
        for m in range(1440)
    )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")


def scenario_charts(table: Table, attempts: int, repeats: int) -> None:
    """14. The admin's chart queries over a delivery log of `attempts` records (10% failed,
    50 targets) and a day of tick records: each query's time, median of `repeats`."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from notifications.admin import charts
    from notifications.models import DeliveryAttempt

    now = timezone.now()
    started = time.monotonic()
    fill_attempts(attempts, 50, 0.1, now)
    filled = time.monotonic() - started
    keys = [f"hooks{i}.example.com" for i in range(50)]
    reads = {
        "activity (Notifications list: per hour and per minute)": lambda: charts.activity(now),
        "failures by target (Targets list, 50 targets on the page)": lambda: charts.failures_by_target(keys, now),
        "recent ticks (Tick runs list)": lambda: charts.recent_ticks(),
    }
    for name, read in reads.items():
        times = []
        for _ in range(repeats):
            with CaptureQueriesContext(connection) as queries:
                began = time.perf_counter()
                read()
                times.append(time.perf_counter() - began)
        table.add(
            f"14. chart {name}, {DeliveryAttempt.objects.count():,} attempts",
            f"**{median(times) * 1000:.1f} ms** in {len(queries)} query "
            f"(median of {repeats}; log filled in {filled:.0f} s)",
            "< 1 s",
            median(times) < 1,
        )
    DeliveryAttempt.objects.all().delete()


# --- main --------------------------------------------------------------------------------------


def scenario_prune(table: Table, attempts: int) -> None:
    """15. History pruning: `attempts` delivery records past retention, and one tick with
    nothing due. The tick prunes batch after batch until none is left or its budget is spent."""
    from django.utils import timezone

    from notifications.api import run_tick
    from notifications.conf import app_settings
    from notifications.models import DeliveryAttempt

    clear()
    retention = float(app_settings.ATTEMPT_RETENTION_DAYS)
    fill_attempts(attempts, 100, 0.1, timezone.now() - timedelta(days=retention + 2))
    started = time.perf_counter()
    report = run_tick()
    seconds = time.perf_counter() - started
    left = DeliveryAttempt.objects.count()
    table.add(
        f"15. one tick pruning {attempts:,} delivery records past retention",
        f"{seconds:.1f} s ({(attempts - left) / seconds:,.0f} records/s), {left:,} left, claimed={report.claimed}",
    )


SCENARIOS = [
    "ceiling",
    "drain",
    "statements",
    "backlog",
    "peer",
    "scale",
    "memory",
    "stuck",
    "host-writes",
    "fast-lane",
    "burst",
    "enqueue",
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000, help="rows drained (scenarios 1, 5, 6)")
    parser.add_argument("--emails", type=int, default=5_000, help="emails in the peer comparison")
    parser.add_argument("--backlog", type=int, default=1_000_000, help="not-due rows in the big table")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of each side-by-side comparison")
    parser.add_argument("--sweep", default="4,8,16,32", help="concurrencies to compare ('' for none)")
    parser.add_argument("--only", "--scenario", default=",".join(SCENARIOS), help="comma-separated scenarios")
    parser.add_argument("--host-seconds", type=float, default=8, help="length of each host-writes loop (scenario 8)")
    parser.add_argument(
        "--tick-budget",
        type=float,
        default=CRON_TICK["NOTIFICATIONS_TICK_BUDGET"],
        help="the tick's budget in scenario 8 (default: the product's, 50 s)",
    )
    parser.add_argument("--fast-lane-rows", type=int, default=200, help="rows scheduled one by one (scenario 9)")
    parser.add_argument("--fast-lane-rate", type=float, default=20, help="rows scheduled per second (scenario 9)")
    parser.add_argument(
        "--fast-lane-routes",
        default=",".join(FAST_LANE_ROUTES),
        help="how the loop reaches PostgreSQL (scenario 9): direct, pgbouncer (polling), pgbouncer-listen",
    )
    parser.add_argument("--burst-rows", type=int, default=10_000, help="rows of the burst (scenario 10)")
    parser.add_argument("--burst-receivers", type=int, default=100, help="receivers of the burst (scenario 10)")
    parser.add_argument("--burst-sweep", default="", help="further concurrencies to compare (scenario 10)")
    parser.add_argument(
        "--burst-memory-rows", type=int, default=3_000, help="rows of the memory comparison (scenario 10; 0: none)"
    )
    parser.add_argument("--action-rows", type=int, default=100_000, help="rows of the select-all actions (scenario 12)")
    parser.add_argument("--attempts", type=int, default=1_000_000, help="delivery records (scenario 14, charts)")
    parser.add_argument(
        "--prune-attempts", type=int, default=200_000, help="delivery records past retention (scenario 15, prune)"
    )
    parser.add_argument("--digest-rows", type=int, default=10_000, help="rows in digests (scenario 16, digests)")
    parser.add_argument("--digests", type=int, default=200, help="digests they form (scenario 16, digests)")
    parser.add_argument(
        "--race-digests", type=int, default=1_000, help="digests 4 runtick processes drain (scenario 17, digest-race)"
    )
    parser.add_argument(
        "--enqueue-rows", type=int, default=10_000, help="rows enqueued by each method (scenario 16, enqueue)"
    )
    parser.add_argument(
        "--tick-records", type=int, default=345_600, help="tick records of 24 h (scenario 17, tick-chart)"
    )
    parser.add_argument("--cpu-rows", type=int, default=3_000, help="webhooks drained (scenario 18, cpu)")
    parser.add_argument("--cpu-receivers", type=int, default=50, help="receivers they go to (scenario 18, cpu)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks the benchmark runs")
    parser.add_argument("--out", help="results file (default bench/results/<database>-<time>.md)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.emails, args.backlog, args.repeats, args.sweep = 200, 100, 2_000, 1, ""
        args.host_seconds = 1
        args.fast_lane_rows = 20
        args.burst_rows, args.burst_receivers, args.burst_memory_rows = 200, 10, 100
        args.action_rows = 2_000
        args.attempts = 5_000
        args.prune_attempts = 3_000
        args.digest_rows, args.digests, args.race_digests = 500, 10, 40
        args.enqueue_rows = 200
        args.tick_records = 20_000
        args.cpu_rows, args.cpu_receivers = 200, 10
    return args


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    only = set(args.only.split(","))
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    with throwaway_database(os.environ.get("DATABASE_URL")) as database:
        os.environ["BENCH_DATABASE"] = json.dumps(database)
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection

        from notifications.conf import app_settings

        call_command("migrate", verbosity=0)
        vendor = connection.vendor
        concurrency = int(app_settings.CONCURRENCY)
        table = Table()
        plan = ""
        print(f"benchmark on {vendor}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}", flush=True)
        sink = Sink()
        lockfile = tempfile.mktemp(prefix="bench-post-office-")
        try:
            if "ceiling" in only:
                table.add("sink ceiling (asyncio client, 16 keep-alive connections)", f"{ceiling(sink):,.0f} req/s")
            drained = None
            if "drain" in only:
                sweep = [int(c) for c in args.sweep.split(",") if c]
                drained = scenario_drain(table, sink, args.rows, args.repeats, concurrency, sweep)
            if "statements" in only:
                scenario_statements(table, sink)
            if "backlog" in only:
                small, repeats = (100, 3) if args.quick else (1_000, 15)
                plan = scenario_backlog(table, small, args.backlog, 100, repeats)
            if "peer" in only:
                scenario_peer(table, args.emails, args.repeats, lockfile)
            if "scale" in only:
                scenario_scale_out(table, sink, args.rows, vendor)
            if "memory" in only:
                scenario_memory(table, sink, args.rows, drained["peak_kb"] if drained else None)
            if "stuck" in only:
                scenario_stuck(table, sink, 200 if not args.quick else 20, 200 if not args.quick else 20, concurrency)
            if "host-writes" in only:
                scenario_host_writes(table, sink, args.rows, args.host_seconds, args.repeats, vendor, args.tick_budget)
            if "fast-lane" in only:
                routes = [r for r in args.fast_lane_routes.split(",") if r]
                scenario_fast_lane(table, sink, args.fast_lane_rows, args.fast_lane_rate, vendor, routes)
            if "flow" in only:  # scenario 11, bench/flow.py: not in the default set
                scenario_flow(table, sink, args.quick)
            if "actions" in only:  # scenario 12, bench/actions.py: not in the default set
                scenario_actions(table, args.action_rows)
            if "charts" in only:  # scenario 14: not in the default set
                scenario_charts(table, args.attempts, max(args.repeats, 5))
            if "tick-chart" in only:  # scenario 17, bench/tick_chart.py: not in the default set
                scenario_tick_chart(table, args.tick_records, max(args.repeats, 5))
            if "prune" in only:  # scenario 15: not in the default set
                scenario_prune(table, args.prune_attempts)
            if "digests" in only:  # scenario 16, bench/digests.py: not in the default set
                scenario_digests(table, sink, args.digest_rows, args.digests, clear, remaining)
            if "digest-race" in only:  # scenario 17: not in the default set
                scenario_digest_race(table, sink, args.race_digests, 5, 4, jobs_together, clear, remaining)
            if "instrumentation" in only:  # scenario 13: not in the default set
                scenario_instrumentation(table, sink, args.rows, max(args.repeats, 3))
            if "enqueue" in only:  # scenario 16, bench/enqueue.py
                scenario_enqueue(table, args.enqueue_rows, args.repeats)
            if "cpu" in only:  # scenario 18, bench/cpu.py: not in the default set
                scenario_cpu(table, args.cpu_rows, args.cpu_receivers, args.repeats, concurrency)
            if "burst" in only:
                burst_sweep = [int(c) for c in args.burst_sweep.split(",") if c]
                scenario_burst(
                    table,
                    args.burst_rows,
                    args.burst_receivers,
                    args.repeats,
                    concurrency,
                    args.burst_memory_rows,
                    burst_sweep,
                )
        finally:
            sink.close()
        load = os.getloadavg()
    header = (
        f"`{' '.join(['python', 'bench/run.py', *(argv or sys.argv[1:])])}` on {vendor}, "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, "
        f"NOTIFICATIONS_CONCURRENCY {concurrency}, load average at the end {load[0]:.1f}/{load[1]:.1f}"
    )
    text = f"{header}\n\n{table.markdown()}\n"
    if plan:
        text += f"\nDue query plan ({vendor}):\n\n```\n{plan}\n```\n"
    print("\n" + text)
    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"{vendor}-{datetime.now():%Y%m%d-%H%M%S}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"written to {out}")
    return out


if __name__ == "__main__":
    main()
