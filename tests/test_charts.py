"""The admin's charts: server-rendered SVG read with one query each, whatever the history.

Activity per hour and per minute in the Notifications list header (from the tick records),
a failure sparkline per target on Targets (from the delivery log), tick durations and
rows claimed on Tick runs, with a filter that hides the ticks that found nothing due.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from notifications.admin import charts
from notifications.models import DeliveryAttempt, Target, TickRun

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 4, 12, 30, 15, tzinfo=UTC)


def tick(finished: datetime, seconds: float = 0.5, **counts) -> TickRun:
    fields = {"succeeded": 0, "partial": 0, "retried": 0, "dead_lettered": 0, **counts}
    claimed = sum(fields.values())
    started = finished - timedelta(seconds=seconds)
    return TickRun.objects.create(started_at=started, finished_at=finished, host="h", pid=1, claimed=claimed, **fields)


def failure(target: str, at: datetime) -> DeliveryAttempt:
    return DeliveryAttempt.objects.create(
        notification_id=1, firing_id=uuid.uuid4(), channel="webhook", target=target, outcome="failed", attempted_at=at
    )


def test_activity_per_hour_and_per_minute():
    tick(NOW - timedelta(minutes=1), succeeded=5, partial=1, retried=2)
    tick(NOW - timedelta(hours=3), succeeded=7, dead_lettered=1)
    tick(NOW - timedelta(hours=25), succeeded=100)  # out of the 24 hours

    with CaptureQueriesContext(connection) as queries:
        activity = charts.activity(NOW)

    assert len(queries) == 1
    delivered, failed, dead = activity["hours"]
    assert len(delivered.values) == 24
    assert delivered.values[-1] == 6 and delivered.values[-4] == 7 and delivered.total == 13
    assert failed.total == 2 and dead.total == 1 and dead.values[-4] == 1
    delivered_m, failed_m, _ = activity["minutes"]
    assert len(delivered_m.values) == 60
    assert delivered_m.values[-2] == 6 and delivered_m.total == 6 and failed_m.values[-2] == 2


def test_failures_by_target_in_one_query():
    failure("hooks.example.com", NOW - timedelta(minutes=5))
    failure("hooks.example.com", NOW - timedelta(minutes=6))
    failure("hooks.example.com", NOW - timedelta(hours=2, minutes=1))
    failure("email", NOW - timedelta(hours=30))  # older than 24 h

    with CaptureQueriesContext(connection) as queries:
        found = charts.failures_by_target(["hooks.example.com", "email"], NOW)

    assert len(queries) == 1
    assert found["hooks.example.com"].values[-1] == 2 and found["hooks.example.com"].values[-3] == 1
    assert found["hooks.example.com"].total == 3 and found["email"].total == 0


def test_a_chart_says_its_numbers_in_words():
    tick(NOW - timedelta(minutes=1), succeeded=5, retried=2)
    (_delivered, failed, _dead) = charts.activity(NOW)["hours"]

    svg = str(charts.bars(failed))

    assert 'role="img"' in svg
    assert "Failed, to be retried: 2 in all, at most 2 per bar" in svg  # the caption: no colour needed
    assert re.search(r"<title>\d\d:00 to \d\d:00: 2</title>", svg)  # each bar's value on hover
    assert 'class="nq-bar-failed"' in svg


# --- the pages ------------------------------------------------------------------------------------


def test_the_notifications_list_shows_activity(admin_client):
    from django.utils import timezone

    tick(timezone.now() - timedelta(seconds=30), succeeded=3, retried=1, dead_lettered=1)

    html = admin_client.get("/admin/notifications/notification/").content.decode()

    assert "Firings per hour, last 24 hours" in html and "Firings per minute, last hour" in html
    assert "Delivered: 3 in all" in html
    assert "Dead-lettered: 1 in all" in html


def test_the_targets_list_has_a_sparkline_per_target(admin_client):
    from django.utils import timezone

    Target.objects.create(key="hooks.example.com", state=Target.State.OPEN)
    Target.objects.create(key="quiet.example.com")
    failure("hooks.example.com", timezone.now() - timedelta(minutes=2))
    admin_client.get("/admin/notifications/target/")

    with CaptureQueriesContext(connection) as queries:
        html = admin_client.get("/admin/notifications/target/").content.decode()

    assert "1 failures in 24 h" in html and "0 failures in 24 h" in html
    assert sum("notifications_deliveryattempt" in q["sql"] for q in queries) == 1  # one for the page


def test_tick_runs_chart_and_the_filter_that_hides_nothing_due(admin_client):
    from django.utils import timezone

    now = timezone.now()
    tick(now - timedelta(minutes=2), seconds=1.5, succeeded=4)
    for minutes in (1, 3, 4):
        tick(now - timedelta(minutes=minutes), seconds=0.01)  # nothing due

    page = admin_client.get("/admin/notifications/tickrun/").content.decode()
    busy = admin_client.get("/admin/notifications/tickrun/", {"activity": "busy"}).content.decode()

    assert "Tick duration: at most 1.5s" in page and "Rows claimed: 4 in all" in page
    assert page.count("nothing due") >= 3
    assert "The last 120 ticks that claimed rows" in busy
    assert busy.count('class="field-outcomes"') == 1  # only the busy tick is listed
