"""The Notifications list's activity chart sums the tick records in the database (issue
34, finding 10): four hosts ticking every second write 345,600 records a day, and the
chart read every one of them (1.4 s; the list went from 1.1 s to 2.5 s).

Pinned without timing: one statement of sums, and one row per bucket fetched (24 hours
and 60 minutes), however many records there are. The
figure is in the benchmark: `python bench/run.py --scenario tick-chart`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from notifications.admin import charts
from notifications.models import TickRun

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 4, 12, 30, 15, tzinfo=UTC)
RECORDS = 3_000


def fill(now: datetime) -> list[TickRun]:
    """RECORDS tick records over the last 24 hours (a third of them in the last hour)."""
    ticks = []
    for i in range(RECORDS):
        ago = timedelta(seconds=(i * 37) % 3_600) if i % 3 == 0 else timedelta(seconds=(i * 29) % 86_400)
        finished = now - ago
        ticks.append(
            TickRun(
                started_at=finished - timedelta(seconds=1),
                finished_at=finished,
                host=f"host{i % 4}",
                pid=1,
                claimed=i % 7 + i % 3 + i % 2,
                succeeded=i % 7,
                partial=i % 2,
                retried=i % 3,
                dead_lettered=i % 5 == 0,
            )
        )
    TickRun.objects.bulk_create(ticks, batch_size=500)
    return ticks


def test_the_activity_chart_is_summed_by_the_database_in_one_query_of_a_few_rows():
    ticks = fill(NOW)
    hours = charts._buckets(NOW, timedelta(hours=1), charts.HOURS)
    minutes = charts._buckets(NOW, timedelta(minutes=1), charts.MINUTES)

    with CaptureQueriesContext(connection) as queries:
        activity = charts.activity(NOW)
    fetched = list(charts.activity_rows(NOW, hours, minutes))

    assert len(queries) == 1
    assert "UNION ALL" in queries[0]["sql"].upper() and "SUM(" in queries[0]["sql"].upper()
    assert len(fetched) == charts.HOURS + charts.MINUTES  # one row per bucket, not one per record
    # The sums are those of the records, per hour and per minute.
    delivered, failed, dead = activity["hours"]
    shown = [t for t in ticks if t.finished_at >= hours[0]]  # the first hour's bucket starts on the hour
    assert len(shown) < RECORDS
    assert delivered.total == sum(t.succeeded + t.partial for t in shown)
    assert failed.total == sum(t.retried for t in shown)
    assert dead.total == sum(t.dead_lettered for t in shown)
    last_minute = [t for t in ticks if t.finished_at >= minutes[-1]]
    assert activity["minutes"][0].values[-1] == sum(t.succeeded + t.partial for t in last_minute)
    last_hour = [t for t in ticks if t.finished_at >= minutes[0]]
    assert activity["minutes"][1].total == sum(t.retried for t in last_hour)
    first_hour = [t for t in ticks if hours[0] <= t.finished_at < hours[1]]
    assert delivered.values[0] == sum(t.succeeded + t.partial for t in first_hour)
