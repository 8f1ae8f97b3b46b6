"""Scenario 18 of the benchmark: the tick's CPU per delivery at real-world latency.

`python bench/run.py --scenario cpu` (about a minute; `--cpu-rows 3000 --cpu-receivers 50`,
`--repeats 3`): `--cpu-rows` signed webhooks over `--cpu-receivers` loopback receivers that
answer after 100 ms, drained by one `runtick` with the default settings, beside plain
threads posting the same signed bodies on the same sink through urllib3's pool (the limit
of a Python client) and through libcurl, as many threads as NOTIFICATIONS_CONCURRENCY, and
the webhook channel's own client (`CurlClient`: one thread drives every send in flight) with
as many sends in flight: the limit of the channel's client. No database, no engine; in
alternating order. For each: the CPU its process spent per delivery (user +
system, every thread: on a shared machine the steadier figure), and deliveries per second
after the first (the sink's first to last arrival). Run it with DATABASE_URL for PostgreSQL.
"""

from __future__ import annotations

from typing import Any

from bench.common import PAYLOAD, clear, job, make_rows, median, remaining
from bench.sink import Sink

# Seconds each receiver takes to answer: a real endpoint, not loopback.
DELAY = 0.1
# The goal of issue 46, per delivery and per second.
CPU_GOAL_MS = 0.40
RATE_GOAL = 2_000


def after_first(stats: dict) -> float:
    """Deliveries per second from the sink's first arrival to its last."""
    count = sum(p["count"] for p in stats["paths"].values())
    first = min(p["first"] for p in stats["paths"].values())
    last = max(p["last"] for p in stats["paths"].values())
    return (count - 1) / (last - first) if count > 1 and last > first else 0.0


# The plain clients beside runtick (bench.worker jobs): urllib3 threads, the limit of a
# client; libcurl threads; the webhook channel's own client, the limit of what the tick sends with.
PLAIN = {
    "plain urllib3 threads": "plain_urllib3",
    "plain libcurl threads": "plain_libcurl",
    "the channel's client alone": "plain_curl_client",
}


def scenario_cpu(table: Any, rows: int, receivers: int, repeats: int, concurrency: int) -> None:
    sink = Sink(ports=receivers, delay=DELAY)
    runs = ["ours", *PLAIN]
    figures: dict[str, dict[str, list[float]]] = {w: {"cpu": [], "rate": []} for w in runs}
    lost = duplicates = 0
    try:
        urls = sink.urls("/cpu")
        for i in range(repeats):
            for which in runs if i % 2 == 0 else runs[::-1]:
                sink.reset()
                if which == "ours":
                    make_rows(rows, webhook_urls=urls)
                    result = job("runtick", {"budget": 3600})
                    stats = sink.stats()
                    lost += rows - stats["unique"] + remaining()
                    duplicates += stats["duplicates"]
                    clear()
                else:
                    args = {"rows": rows, "urls": urls, "payload": PAYLOAD, "concurrency": concurrency}
                    result = job(PLAIN[which], args)
                    stats = sink.stats()
                    if result["ok"] != rows:
                        raise RuntimeError(f"{which} delivered {result['ok']} of {rows}")
                figures[which]["cpu"].append(result["cpu_seconds"] / rows * 1000)
                figures[which]["rate"].append(after_first(stats))
    finally:
        sink.close()
    ours = figures["ours"]
    cpu, rate = median(ours["cpu"]), median(ours["rate"])
    plain = "; ".join(
        f"{name}, {concurrency} at once: {median(figures[name]['cpu']):.2f} ms, {median(figures[name]['rate']):,.0f}/s"
        for name in PLAIN
    )
    table.add(
        f"18. CPU per delivery: {rows:,} signed webhooks over {receivers} receivers answering after "
        f"{DELAY * 1000:.0f} ms, default settings (concurrency {concurrency})",
        f"runtick **{cpu:.2f} ms CPU per delivery**, **{rate:,.0f} deliveries/s after the first** "
        f"(CPU {min(ours['cpu']):.2f}-{max(ours['cpu']):.2f} ms); {plain}; median of {repeats}; "
        f"lost {lost}, duplicates {duplicates}",
        f"<= {CPU_GOAL_MS:.2f} ms, >= {RATE_GOAL:,}/s, 0 lost, 0 duplicates",
        cpu <= CPU_GOAL_MS and rate >= RATE_GOAL and lost == duplicates == 0,
    )
