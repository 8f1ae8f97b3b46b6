"""The benchmark runs end to end on tiny sizes: every scenario, its checks, its table.

No figure is asserted (the machine is shared and the sizes are tiny); what is checked
is what the benchmark itself verifies on every run: nothing lost, nothing delivered
twice, the due query on its index, and a table with every scenario written to file.
On the PostgreSQL pass it runs on PostgreSQL (its own throwaway database).
"""

from __future__ import annotations

import os

import django
import pytest

from tests.support import pgbouncer
from tests.support.processes import run_benchmark

SCENARIOS = [
    "sink ceiling",
    "1. webhook drain",
    "2. SQL per row, one-shot success",
    "2. SQL per row, recurring advance",
    "2. SQL per row, retry",
    "2. SQL per row, partial",
    "3. backlog",
    "4. 100 emails, dummy backend: runtick vs django-post-office",
    "5. scale-out",
    "6. peak RSS",
    "7. stuck endpoint",
    "8. host writes",
    "8. the tick beside the host writes (same database)",
    "8. host-write p99 with a draining tick vs alone",
    "10. burst: 200 rows over 10 receivers",
    "10. memory per in-flight send",
    "10. burst: the same 200 rows to one receiver",
    "16. enqueue 200 rows one by one: schedule() vs Model.save()",
    "16. enqueue 200 rows at once: schedule_many() vs bulk_create()",
    "16. enqueue 200 emails: send_mass_mail() through QueuedEmailBackend vs bulk_create()",
]


@pytest.mark.slow
@pytest.mark.skipif(
    django.VERSION >= (6, 0),
    reason="the benchmark on Django 6's SQLite is the SQLite pass's run again; it runs on 5.2 on each database",
)
def test_benchmark_runs_every_scenario_on_tiny_sizes(tmp_path, on_postgres, vendor):
    out = tmp_path / "results.md"

    run = run_benchmark(out, on_postgres, timeout=900)

    assert run.returncode == 0, run.stderr[-3000:]
    table = out.read_text()
    assert table in run.stdout  # printed and written alike
    assert f"on {vendor}" in table.splitlines()[0]
    for scenario in SCENARIOS:
        assert f"| {scenario}" in table, scenario
    drain = next(line for line in table.splitlines() if line.startswith("| 1. webhook drain"))
    assert "lost 0, duplicates 0" in drain
    scale_out = [line for line in table.splitlines() if line.startswith("| 5. scale-out")]
    assert len(scale_out) == 3
    assert all("duplicates 0, lost 0" in line for line in scale_out)
    stuck = next(line for line in table.splitlines() if line.startswith("| 7. stuck endpoint"))
    assert "(20/20)" in stuck and "retried=20" in stuck  # every healthy row delivered, every stuck one retried
    assert "notification_due_idx" in table  # the plan shows the due query on its index
    host = [line for line in table.splitlines() if line.startswith("| 8. host writes")]
    # alone, beside the tick, (SQLite) beside a tick on another file
    assert len(host) == (3 if vendor == "sqlite" else 2)
    assert all("ops/s" in line and "p99" in line and "locked errors" not in line for line in host)
    ticks = [line for line in table.splitlines() if line.startswith("| 8. the tick beside")]
    assert all("write transactions/s" in line and "duplicates 0" in line for line in ticks)
    burst = [line for line in table.splitlines() if line.startswith("| 10. burst")]
    assert len(burst) == 2 and all("lost 0, duplicates 0" in line for line in burst)
    one = burst[1]  # the receiver counted its connections: never more than the per-target cap (16)
    peak = int(one.split("**peak ")[1].split()[0])
    assert 0 < peak <= 16 and line_met(one)
    assert_enqueue_lines(table, vendor)  # scenario 16, as test_the_enqueue_scenario_runs_on_tiny_sizes on Django 6
    assert_fast_lane_lines(table, on_postgres)  # scenario 9: the three routes, or skipped away from PostgreSQL


def assert_fast_lane_lines(table: str, on_postgres: bool) -> None:
    lines = [line for line in table.splitlines() if line.startswith("| 9. fast lane")]
    if not on_postgres:
        (line,) = lines
        assert "skipped" in line, line
        return
    # Direct, through PgBouncer polling, through PgBouncer with a direct listen line.
    direct, polled, listen_line = lines
    assert "direct)" in direct and "polling)" in polled and "direct listen line)" in listen_line, lines
    if pgbouncer.binary() is None and not os.environ.get("NOTIFICATIONS_REQUIRE_POSTGRES"):
        assert "skipped: pgbouncer is not installed" in polled + listen_line, lines
        lines = [direct]
    for line in lines:
        assert "p50" in line and "p99" in line and "delivered 20/20" in line, line
    if len(lines) == 3:
        assert "the loop said its fast lane is off" in polled, polled
        assert "fast lane is off" not in direct + listen_line, lines


def line_met(line: str) -> bool:
    return line.rstrip(" |").endswith("yes")


@pytest.mark.slow
@pytest.mark.skipif(
    django.VERSION >= (6, 0),
    reason="the flow scenarios on Django 6's SQLite are the SQLite pass's run again; they run on 5.2 on each database",
)
def test_the_flow_scenarios_run_on_tiny_sizes(tmp_path, on_postgres):
    """`--scenario flow --quick`: the dead endpoint off/on, the shared 200/s drain, the held
    rows beside a due tick; none delivered twice. No rate is asserted here."""
    out = tmp_path / "flow.md"
    run = run_benchmark(out, on_postgres, "--scenario", "flow", timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    table = out.read_text()
    for name in ("11a. dead endpoint (503)", "breaker off", "breaker on", "11b. ", "11c. "):
        assert name in table, table
    # None twice, whatever the machine's load. How many are left when the ticks' budget ends
    # is a matter of speed: the benchmark's own table says it (`make bench`), not this test.
    assert ", 0 twice)" in table, table


@pytest.mark.slow
@pytest.mark.skipif(
    django.VERSION < (6, 0),
    reason="on Django 5.2 the whole benchmark's run above checks these lines: a second run would repeat it",
)
def test_the_enqueue_scenario_runs_on_tiny_sizes(tmp_path, on_postgres, vendor):
    """`--scenario enqueue --quick`: schedule(), schedule_many() and send_mass_mail() beside
    Model.save() and bulk_create() of 200 rows each; the statements per row are the
    benchmark's own count (one INSERT per schedule(), and the NOTIFY on PostgreSQL)."""
    out = tmp_path / "enqueue.md"
    run = run_benchmark(out, on_postgres, "--scenario", "enqueue", timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert_enqueue_lines(out.read_text(), vendor)


def assert_enqueue_lines(table: str, vendor: str) -> None:
    lines = [line for line in table.splitlines() if line.startswith("| 16. enqueue")]
    assert len(lines) == 3, lines
    one_by_one, at_once, emails = lines
    per_row = 2 if vendor == "postgresql" else 1
    assert "schedule() " in one_by_one and f"({per_row} statements/row) vs Model.save()" in one_by_one
    assert "schedule_many() " in at_once and "bulk_create() " in at_once
    assert "send_mass_mail() " in emails
    assert all("x** the time" in line for line in lines)  # the ratio is printed, never asserted
